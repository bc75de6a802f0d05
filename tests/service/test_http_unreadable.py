"""Over streamable HTTP an unreadable body gets status 400 and the JSON-RPC answer stdio
gives (``-32700``/``-32600``, with the id when it can be read); without a token it is
still 401 first, and a good request after it is served."""

from __future__ import annotations

import json

import httpx2
import pytest

from tests.service.conftest import Service, ServiceFactory, token_of
from tests.unreadable_lines import UNREADABLE

HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


@pytest.fixture(scope="module")
def service(module_services: ServiceFactory) -> Service:
    return module_services.start()


def _post(service: Service, body: str, token: str | None) -> httpx2.Response:
    headers = dict(HEADERS)
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    with httpx2.Client(trust_env=False, timeout=15) as http:
        return http.post(service.url, content=body.encode(), headers=headers)


@pytest.mark.parametrize("case", sorted(UNREADABLE))
def test_an_unreadable_body_is_answered(service: Service, case: str) -> None:
    line, code, request_id = UNREADABLE[case]
    response = _post(service, line, token_of(service))
    answer = json.loads(response.content)
    if code == -32602:  # JSON the SDK reads: refused inside the session, after its checks
        assert response.status_code in (200, 400), response
    else:
        assert response.status_code == 400, (response, answer)
        assert answer["id"] == request_id, answer
        assert answer["error"]["code"] == code, answer
    assert len(response.content) < 1000, response.content


def test_without_a_token_an_unreadable_body_gets_401(service: Service) -> None:
    assert _post(service, "this is not json", None).status_code == 401


def test_a_good_request_after_them_is_served(service: Service) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }
    response = _post(service, json.dumps(initialize), token_of(service))
    assert response.status_code == 200, response
