"""A graceful stop ends open feed streams at once and cleanly: they never finish by
themselves, and uvicorn would otherwise wait its whole graceful period, then cut them."""

from __future__ import annotations

import signal
import time

import httpx2

from supervisor.front.transports.http import GRACEFUL_HTTP_STOP_S
from tests.service.conftest import ServiceFactory, call, connect, ok, run, token_of

# Well inside the graceful period a stop would otherwise wait for the streams.
STOP_BOUND_S = GRACEFUL_HTTP_STOP_S - 1.5


def test_a_stop_ends_open_feed_streams_cleanly(services: ServiceFactory) -> None:
    service = services.start()
    token = token_of(service)

    async def scenario() -> None:
        async with connect(service.url, token) as client:
            ok(await call(client, "start_pane", {"name": "d", "profile": "demo"}))
        base = service.url.removesuffix("/mcp")
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(trust_env=False, timeout=30) as http,
            http.stream("GET", base + "/feed?pane=d", headers=headers) as pane_feed,
            http.stream("GET", base + "/feed", headers=headers) as all_feed,
        ):
            lines = [pane_feed.aiter_lines(), all_feed.aiter_lines()]
            for stream in lines:
                assert (await anext(stream)).startswith(":")
            started = time.monotonic()
            service.send_signal(signal.SIGTERM)
            for stream in lines:
                async for _line in stream:  # a cut stream raises RemoteProtocolError here
                    pass
            assert time.monotonic() - started < STOP_BOUND_S

    run(scenario())
    assert service.proc is not None
    assert service.proc.wait(timeout=10) == 0
