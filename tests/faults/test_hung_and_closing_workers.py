"""A hung worker (stopped, so its pidfd stays quiet) and a worker killed mid-removal.

Both must end with the pane's program and every descendant gone, and the service
still serving.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.conftest import Tools, stdio_params
from tests.faults import alive, key_of, seeded_rng, sigkill_all
from tests.polling import apoll

pytestmark = pytest.mark.anyio


async def _spawned(tools: Tools, name: str) -> tuple[dict[str, Any], int]:
    pane = (await tools.call("start_pane", name=name, profile="demo"))["pane"]
    await tools.wait(name, until=["idle"])
    await tools.call("send_input", name=name, text="spawn")
    match = await tools.call("wait_output", name=name, pattern=r"spawned \d+", regex=True)
    grandchild = int(re.findall(r"\d+", match["line"])[-1])
    return pane, grandchild


async def test_a_hung_worker_is_killed_on_heartbeat_loss(state_dir: Path) -> None:
    params = stdio_params(state_dir, PANEWARDEN_HEARTBEAT_LOSS_S="2")
    async with Client(params) as client:
        tools = Tools(client)
        pane, grandchild = await _spawned(tools, "hung")
        keys = [k for k in (key_of(int(pane["pid"])), key_of(grandchild)) if k]
        worker = key_of(int(pane["worker_pid"]))
        assert worker is not None and len(keys) == 2
        try:
            os.kill(worker[0], signal.SIGSTOP)  # alive but silent: only heartbeats tell
            lost = await tools.wait("hung", until=["lost"], timeout_s=15)
            assert lost["lifecycle"] == "lost"
            assert await apoll(lambda: not any(alive(k) for k in [*keys, worker]), 5)
            await tools.call("start_pane", name="after", profile="demo")
            assert (await tools.wait("after", until=["idle"]))["state"] == "idle"
        finally:
            sigkill_all([*keys, worker])


async def test_a_worker_killed_during_remove_pane_leaves_nothing(state_dir: Path) -> None:
    async with Client(stdio_params(state_dir)) as client:
        tools = Tools(client)
        pane, grandchild = await _spawned(tools, "mid")
        keys = [k for k in (key_of(int(pane["pid"])), key_of(grandchild)) if k]
        worker = key_of(int(pane["worker_pid"]))
        assert worker is not None and len(keys) == 2
        # A handle on this very process: the worker may be gone (and its pid reused)
        # before the kill, when the removal is quicker than the random delay.
        worker_fd = os.pidfd_open(worker[0])
        try:
            async with anyio.create_task_group() as tg:
                result: dict[str, object] = {}

                async def remove() -> None:
                    result.update(await tools.call("remove_pane", name="mid"))

                tg.start_soon(remove)
                # Kill the worker at a random point of its close: no leak either way.
                rng, _seed = seeded_rng("remove_pane kill")
                await anyio.sleep(rng.uniform(0.0, 0.05))
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(worker_fd, signal.SIGKILL)
            assert "killed" in result
            assert await apoll(lambda: not any(alive(k) for k in [*keys, worker]), 5)
            assert (await tools.call("list_panes"))["panes"] == []
        finally:
            os.close(worker_fd)
            sigkill_all([*keys, worker])
