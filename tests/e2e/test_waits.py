"""Waits: cursors (after_seq), event-driven wake-ups and cancellation, in-process.

The service and the SDK's in-process client share the test's event loop, so the
test can see the service's own tasks.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from mcp import Client

from supervisor.auth.access import SingleClientAccess
from supervisor.config import load_config
from supervisor.front.mcp_server import build_server
from supervisor.front.runtime import running_service
from supervisor.panes.service import PaneService
from tests.conftest import Tools, service_env
from tests.polling import apoll

pytestmark = pytest.mark.anyio


@pytest.fixture
async def inproc(state_dir: Path) -> AsyncIterator[tuple[Tools, PaneService]]:
    config = load_config(service_env(state_dir))
    async with running_service(config) as services:
        service = services.panes
        server = build_server(services, SingleClientAccess("test"))
        async with Client(server) as client:
            yield Tools(client), service


def _waiting_tasks() -> list[asyncio.Task[object]]:
    return [
        t
        for t in asyncio.all_tasks()
        if not t.done() and re.search(r"wait_(for_)?status", repr(t.get_coro()))
    ]


async def test_after_seq_returns_the_first_record_after_the_cursor(
    inproc: tuple[Tools, PaneService],
) -> None:
    tools, service = inproc
    await tools.call("start_pane", name="c", profile="demo")
    idle = await tools.wait("c", until=["idle"])
    for word in ("one", "two", "three"):
        before = (await tools.call("get_status", name="c"))["seq"]
        await tools.call("send_input", name="c", text=word)
        await tools.wait("c", after=before, until=["done"])
    history = list(service.registry.get("c").history)
    dones = [r for r in history if r.state == "done"]
    assert [r.turn for r in dones] == [1, 2, 3]
    # A cursor just before turn 2's done returns that done, not the latest one.
    first = await tools.wait("c", after=dones[1].seq - 1, until=["done"])
    assert (first["seq"], first["turn"]) == (dones[1].seq, 2)
    # Never a record at or before the cursor: waiting past the last done times out.
    late = await tools.call(
        "wait_status", name="c", after_seq=dones[2].seq, until=["done"], timeout_s=0.3
    )
    assert late["timed_out"] is True
    assert idle["seq"] < dones[0].seq
    for seq in range(0, dones[2].seq):
        got = await tools.wait("c", after=seq, until=["done", "working"])
        assert got["seq"] > seq
    await tools.call("remove_pane", name="c")


async def test_a_cancelled_wait_leaves_no_waiter_behind(
    inproc: tuple[Tools, PaneService],
) -> None:
    tools, _service = inproc
    await tools.call("start_pane", name="x", profile="demo")
    idle = await tools.wait("x", until=["idle"])
    async with anyio.create_task_group() as tg:

        async def long_wait() -> None:
            await tools.client.call_tool(
                "wait_status", {"name": "x", "after_seq": idle["seq"], "timeout_s": 600}
            )

        tg.start_soon(long_wait)
        assert await apoll(lambda: _waiting_tasks(), timeout_s=5), "the wait never started"
        tg.cancel_scope.cancel()
    # The client's cancellation reaches the tool: its wait task ends promptly.
    assert await apoll(lambda: not _waiting_tasks(), timeout_s=2), _waiting_tasks()
    await tools.call("remove_pane", name="x")


async def test_a_wait_wakes_on_the_event_not_a_poll(inproc: tuple[Tools, PaneService]) -> None:
    tools, service = inproc
    await tools.call("start_pane", name="e", profile="demo")
    idle = await tools.wait("e", until=["idle"])
    pane = service.registry.get("e")
    async with anyio.create_task_group() as tg:
        result: dict[str, object] = {}

        async def waiter() -> None:
            result.update(await tools.wait("e", after=idle["seq"], until=["done"]))

        tg.start_soon(waiter)
        assert await apoll(lambda: len(_waiting_tasks()) == 1, timeout_s=5)
        event = pane.changed
        assert not event.is_set()
        await tools.call("send_input", name="e", text="wake")
    assert event.is_set() and result["state"] == "done"
    await tools.call("remove_pane", name="e")
