"""A supervisor restart re-adopts the panes whose workers outlived it."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import signal
import time
from pathlib import Path

import anyio
import psutil
import pytest
from mcp import Client

from tests.conftest import Tools, stdio_params
from tests.faults import start_ticks, supervisor_of
from tests.polling import apoll

pytestmark = pytest.mark.anyio


async def test_a_new_supervisor_readopts_a_killed_ones_panes(state_dir: Path) -> None:
    async with Client(stdio_params(state_dir)) as client:
        tools = Tools(client)
        pane = (await tools.call("start_pane", name="keep", profile="demo"))["pane"]
        idle = await tools.wait("keep", until=["idle"])
        await tools.call("send_input", name="keep", text="before the crash")
        done = await tools.wait("keep", after=idle["seq"], until=["done"])
        supervisor = supervisor_of(pane["worker_pid"])
        assert supervisor is not None
        # A crash: no graceful stop, so the worker keeps running, orphaned.
        os.kill(supervisor, signal.SIGKILL)
        assert await apoll(lambda: _gone(supervisor), timeout_s=10)
    assert psutil.pid_exists(pane["worker_pid"]) and psutil.pid_exists(pane["pid"])

    async with Client(stdio_params(state_dir)) as client:
        # Listed tools mean a started service (initialize is answered before it starts).
        await client.list_tools()
        tools = Tools(client)
        # The first answer of the new service already shows the pane running, with its
        # seq where it was: never `starting`, never seq 0, never worker_lost.
        answered_at = time.monotonic()
        first = await tools.call("get_status", name="keep")
        assert time.monotonic() - answered_at < 1.0
        assert (first["lifecycle"], first["seq"], first["turn"]) == ("running", done["seq"], 1)
        shot = await tools.call("read_output", name="keep")
        assert shot["seq"] == done["seq"] and "reply: before the crash" in shot["text"]
        listed = (await tools.call("list_panes"))["panes"]
        assert [p["name"] for p in listed] == ["keep"]
        assert listed[0]["worker_pid"] == pane["worker_pid"]
        assert listed[0]["seq"] == done["seq"]
        status = await tools.wait("keep", until=["done"], timeout_s=20)
        # The seq cursor survives the restart: it continues from the worker's record.
        assert status["seq"] == done["seq"] and status["turn"] == 1
        assert status["lifecycle"] == "running"
        await tools.call("send_input", name="keep", text="after the restart")
        again = await tools.wait("keep", after=done["seq"], until=["done"])
        assert again["turn"] == 2
        text = (await tools.call("read_output", name="keep", scrollback=True))["text"]
        assert "reply: before the crash" in text and "reply: after the restart" in text
        await tools.call("remove_pane", name="keep")
    assert not (state_dir / "panes" / "keep.json").exists()
    for pid in (pane["worker_pid"], pane["pid"]):
        assert await apoll(functools.partial(_gone, pid), timeout_s=5)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def test_removing_a_pane_right_after_a_restart_closes_it_in_order(state_dir: Path) -> None:
    async with Client(stdio_params(state_dir)) as client:
        tools = Tools(client)
        pane = (await tools.call("start_pane", name="soon", profile="demo"))["pane"]
        await tools.wait("soon", until=["idle"])
        supervisor = supervisor_of(pane["worker_pid"])
        assert supervisor is not None
        os.kill(supervisor, signal.SIGKILL)
        assert await apoll(lambda: _gone(supervisor), timeout_s=10)
    async with Client(stdio_params(state_dir)) as client:
        tools = Tools(client)
        # Before the worker has re-introduced itself: the removal waits for it, then
        # closes the pane in order (the program's exit code comes back).
        removed = await tools.call("remove_pane", name="soon")
        assert removed["exit_code"] is not None
        assert (await tools.call("list_panes"))["panes"] == []
    for pid in (pane["worker_pid"], pane["pid"]):
        assert await apoll(functools.partial(_gone, pid), timeout_s=5)


async def test_a_forged_record_naming_another_process_is_never_signalled(
    state_dir: Path, tmp_path: Path
) -> None:
    """A record anyone could write names a live process that is not our worker: it is
    never adopted (it cannot prove the secret) and never signalled, stop included."""
    victim = await anyio.open_process(["sleep", "300"], start_new_session=True)
    try:
        ticks = start_ticks(victim.pid)
        record = {
            "version": 1,
            "name": "evil",
            "instance": "0123456789abcdef",
            "secret_sha256": hashlib.sha256(b"guess").hexdigest(),
            "worker_pid": victim.pid,
            "worker_start_ticks": ticks,
            "profile": "demo",
            "agent": "demo",
            "cwd": "/",
            "started_at": time.time(),
            "pid": None,
        }
        panes = state_dir / "panes"
        panes.mkdir(mode=0o700)
        (panes / "evil.json").write_text(json.dumps(record))
        async with Client(stdio_params(state_dir)) as client:
            tools = Tools(client)
            assert (await tools.call("list_panes"))["panes"] == []
            gone = await tools.error("get_status", name="evil")
            assert gone["code"] == "not_found", gone
        # The service stopped gracefully; the process it could not prove is untouched.
        assert victim.returncode is None and start_ticks(victim.pid) == ticks
        assert not (panes / "evil.json").exists()
    finally:
        victim.kill()
        await victim.wait()
