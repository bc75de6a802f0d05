"""Over real HTTP: Host (421), then Origin (403), then bearer (401), then scopes (forbidden)."""

from __future__ import annotations

import socket
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.shared.exceptions import MCPError

from tests.service.conftest import (
    Service,
    ServiceFactory,
    call,
    connect,
    digest,
    new_token,
    ok,
    read_audit,
    run,
    token_of,
)

ALLOWED = "box.example.ts.net:8445"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"},
    },
}


@dataclass
class Setup:
    service: Service
    tokens: dict[str, str]

    @property
    def port(self) -> int:
        return int(self.service.url.rsplit(":", 1)[1].split("/", 1)[0])

    @property
    def audit_path(self) -> Path:
        return Path(self.service.env["PANEWARDEN_AUDIT_FILE"])


@pytest.fixture(scope="module")
def setup(module_services: ServiceFactory) -> Setup:
    tokens = {"reader": new_token(), "alice": new_token()}
    clients = [
        {"name": "reader", "token_sha256": digest(tokens["reader"]), "scopes": ["read"]},
        {
            "name": "alice",
            "token_sha256": digest(tokens["alice"]),
            "scopes": ["read", "input", "lifecycle"],
        },
    ]
    service = module_services.start(
        clients=clients, audit=True, extra_env={"PANEWARDEN_ALLOWED_HOSTS": ALLOWED}
    )
    tokens["operator"] = token_of(service)
    return Setup(service, tokens)


def _post(setup: Setup, headers: dict[str, str]) -> httpx2.Response:
    base = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    with httpx2.Client(trust_env=False, timeout=10) as http:
        return http.post(setup.service.url, json=INITIALIZE, headers=base | headers)


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_request_without_a_token_gets_401(setup: Setup) -> None:
    response = _post(setup, {})
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize("kind", ["wrong", "shorter", "longer", "empty", "basic-scheme"])
def test_a_wrong_token_of_any_length_gets_401(setup: Setup, kind: str) -> None:
    good = setup.tokens["operator"]
    header = {
        "wrong": _bearer(new_token()),
        "shorter": _bearer(good[:-1]),
        "longer": _bearer(good + "0"),
        "empty": {"Authorization": "Bearer"},
        "basic-scheme": {"Authorization": f"Basic {good}"},
    }[kind]
    assert _post(setup, header).status_code == 401


def test_the_right_token_initializes_a_session(setup: Setup) -> None:
    response = _post(setup, _bearer(setup.tokens["operator"]))
    assert response.status_code == 200
    assert "mcp-session-id" in response.headers


@pytest.mark.parametrize("token", [None, "operator"])
def test_a_foreign_host_gets_421_before_the_token_is_looked_at(
    setup: Setup, token: str | None
) -> None:
    headers = {"Host": "evil.example"}
    if token is not None:
        headers |= _bearer(setup.tokens[token])
    assert _post(setup, headers).status_code == 421


def test_host_is_checked_before_origin(setup: Setup) -> None:
    headers = {"Host": "evil.example", "Origin": "http://evil.example"}
    assert _post(setup, headers).status_code == 421


def test_a_loopback_name_on_another_port_gets_421(setup: Setup) -> None:
    headers = {"Host": f"127.0.0.1:{setup.port + 1}"} | _bearer(setup.tokens["operator"])
    assert _post(setup, headers).status_code == 421


@pytest.mark.parametrize("host", ["localhost:{port}", "127.0.0.1:{port}", "[::1]:{port}", ALLOWED])
def test_loopback_names_and_allowed_hosts_pass(setup: Setup, host: str) -> None:
    headers = {"Host": host.format(port=setup.port)} | _bearer(setup.tokens["operator"])
    assert _post(setup, headers).status_code == 200


@pytest.mark.parametrize("token", [None, "operator"])
def test_a_bad_origin_gets_403_before_the_token_is_looked_at(
    setup: Setup, token: str | None
) -> None:
    headers = {"Origin": "http://evil.example"}
    if token is not None:
        headers |= _bearer(setup.tokens[token])
    assert _post(setup, headers).status_code == 403


def test_allowed_origins_pass(setup: Setup) -> None:
    for origin in (f"http://localhost:{setup.port}", f"https://{ALLOWED}"):
        headers = {"Origin": origin} | _bearer(setup.tokens["operator"])
        assert _post(setup, headers).status_code == 200, origin


def test_any_path_is_behind_the_host_check(setup: Setup) -> None:
    with httpx2.Client(trust_env=False, timeout=10) as http:
        url = setup.service.url.replace("/mcp", "/other")
        assert http.get(url, headers={"Host": "evil.example"}).status_code == 421


def test_the_sdk_client_cannot_connect_with_a_wrong_token(setup: Setup) -> None:
    async def scenario() -> None:
        async with connect(setup.service.url, new_token()) as client:
            await client.list_tools()

    # The SDK client reports the 401 as an MCPError, wrapped in its task groups.
    with pytest.raises(ExceptionGroup) as caught:
        run(scenario(), 30)
    assert caught.group_contains(MCPError, depth=None)


def test_a_read_only_client_lists_panes_but_cannot_start_one(setup: Setup) -> None:
    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        async with connect(setup.service.url, setup.tokens["reader"]) as client:
            listed = await call(client, "list_panes")
            started = await call(client, "start_pane", {"name": "nope", "profile": "demo"})
            return listed, started

    listed, started = run(scenario(), 30)
    assert "panes" in ok(listed)
    assert started["error"]["code"] == "forbidden"
    assert "lifecycle" in started["error"]["message"]
    records = [r for r in read_audit(setup.audit_path) if r["client"] == "reader"]
    assert records[-1]["tool"] == "start_pane"
    assert records[-1]["outcome"] == "error"
    assert records[-1]["code"] == "forbidden"
    # Read tools are not mutating calls: list_panes left no record.
    assert all(r["tool"] != "list_panes" for r in read_audit(setup.audit_path))


def test_each_client_is_known_by_its_own_name(setup: Setup) -> None:
    async def scenario() -> dict[str, Any]:
        async with connect(setup.service.url, setup.tokens["alice"]) as client:
            return await call(client, "remove_pane", {"name": "never-started"})

    result = run(scenario(), 30)
    assert result["error"]["code"] == "not_found"
    last = read_audit(setup.audit_path)[-1]
    assert last["client"] == "alice"
    assert last["tool"] == "remove_pane"
    assert last["pane"] == "never-started"
    assert last["code"] == "not_found"


def test_responses_on_a_kept_alive_connection_do_not_wait_for_delayed_acks(setup: Setup) -> None:
    """Nagle's algorithm off on accepted sockets: no ~40 ms stall per response."""
    took: list[float] = []
    with socket.create_connection(("127.0.0.1", setup.port), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        request = b"GET /mcp HTTP/1.1\r\nHost: evil.example\r\n\r\n"
        for _ in range(15):
            started = time.monotonic()
            sock.sendall(request)
            received = b""
            while not received.endswith(b"Invalid Host header"):
                chunk = sock.recv(4096)
                assert chunk, received
                received += chunk
            took.append(time.monotonic() - started)
    assert statistics.median(took) < 0.030, took
