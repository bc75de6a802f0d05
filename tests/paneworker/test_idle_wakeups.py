"""An idle worker wakes once per heartbeat, for everything (``paneworker.loop``).

A real service and a pane of the demo agent, left idle: once the busy tree walks are
over, the worker's main thread is counted (``voluntary_ctxt_switches``: each blocking
poll that ends is one) over ``BEATS`` heartbeat periods. Its idle tree walk and its own
heartbeat ride on the wake-up the supervisor's heartbeat causes. (Before: the walk, at
exactly one period, fired its own timer a fixed phase away from the beat, and the
worker's heartbeat drifted onto the beat half a second per period: two or three
wake-ups per period instead of one.)
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import Client

from paneworker.loop.pacing import BUSY_FOR_S
from protocol.timing import HEARTBEAT_S
from tests.conftest import Tools, stdio_params
from tests.polling import apoll

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

BEATS = 4


def _main_thread_wakeups(pid: int) -> int:
    status = Path(f"/proc/{pid}/task/{pid}/status").read_text()
    for line in status.splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise AssertionError(f"no voluntary_ctxt_switches for {pid}")


async def test_an_idle_worker_wakes_once_per_heartbeat(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    async with Client(stdio_params(state)) as client:
        tools = Tools(client)
        pane = (await tools.call("start_pane", name="quiet", profile="demo"))["pane"]
        await tools.wait("quiet", until=["idle"])
        worker = int(pane["worker_pid"])
        # Past the busy walks and two beats, so the timers have met the beat; then a
        # measuring window (time itself is what is measured, not a synchronisation).
        await anyio.sleep(BUSY_FOR_S + 2 * HEARTBEAT_S)
        before = _main_thread_wakeups(worker)
        await anyio.sleep(BEATS * HEARTBEAT_S)
        woke = _main_thread_wakeups(worker) - before
        status = await tools.call("get_status", name="quiet")
        assert status["state"] == "idle", status  # nothing happened in the pane meanwhile
        # One per beat, one more for a beat that lands at the window's edge.
        assert woke <= BEATS + 1, f"{woke} wake-ups in {BEATS} heartbeat periods"
        await tools.call("remove_pane", name="quiet")
        assert await apoll(lambda: not Path(f"/proc/{worker}").exists(), timeout_s=10)
