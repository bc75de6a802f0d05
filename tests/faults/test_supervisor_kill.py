"""SIGKILL of the supervisor: orphaned workers clean up after the grace; one supervisor per
state dir, and the lock is free again once the holder is SIGKILLed.

With ``PANEWARDEN_ORPHAN_GRACE_S=2`` a worker notices the silence after three heartbeats
(15 s), waits the grace, kills its tree and exits; the worker template, which saw its
connection close at once, waits as long and for its workers, then exits: nothing of any
pane, and no template, may survive 25 s after the kill, whether the supervisor died with
panes idle, mid-turn or mid-start. Seed the random kill moments with
``PANEWARDEN_TEST_SEED``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from protocol.timing import HEARTBEAT_S, ORPHAN_AFTER_S
from tests.conftest import REPO, Tools, service_env, stdio_params
from tests.faults import (
    CLIENT_GONE,
    Marks,
    ProcKey,
    describe,
    key_of,
    seeded_rng,
    sigkill_all,
    supervisor_of,
    survivors,
)
from tests.polling import apoll

pytestmark = pytest.mark.anyio

ORPHAN_GRACE_S = "2"
ALL_GONE_WITHIN_S = ORPHAN_AFTER_S + float(ORPHAN_GRACE_S) + 8.0
# A worker's silence began with the last heartbeat it heard, up to one period before.
ORPHANED_AFTER_S = ORPHAN_AFTER_S - HEARTBEAT_S + float(ORPHAN_GRACE_S)
# A turn of the demo agent takes ~0.1 s and a start ~0.3 s: kill before, during or after.
MAX_DELAY_S = 0.6
ROUNDS = 2
PANES = ("idle", "spawner", "busy")
# What calls on, and leaving, the client of a SIGKILLed server raise.


async def _start(tools: Tools, marks: Marks, name: str, i: int) -> dict[str, Any]:
    pane = await tools.call("start_pane", name=name, profile="demo", extra_args=[marks.arg(i)])
    return dict(pane["pane"])


async def _round(tmp: Path, seed: int, round_no: int, delay: float) -> None:
    """One supervisor, SIGKILLed with panes idle, mid-turn and mid-start; then the orphans."""
    where = f"seed {seed}, round {round_no}, kill {delay * 1000:.0f} ms into a turn and a start"
    state = tmp / f"state{round_no}"
    state.mkdir(mode=0o700)
    marks = Marks(tmp / f"r{round_no}", count=8)
    marks.tmp.mkdir()
    known: set[ProcKey] = set()
    try:
        killed_at = await _drive_and_kill(state, marks, known, delay)
        gone = await apoll(
            lambda: not survivors(known) and not marks.everything(),
            ALL_GONE_WITHIN_S - (time.monotonic() - killed_at),
        )
        gone_after = time.monotonic() - killed_at
        assert gone, (
            f"{where}: alive {gone_after:.1f}s after the supervisor's SIGKILL: "
            f"{describe(set(survivors(known)) | marks.everything())}"
        )
        # Workers outlive the supervisor (a new one could re-adopt them): they give up only
        # after three heartbeats of silence plus the grace.
        assert gone_after >= ORPHANED_AFTER_S, f"{where}: all gone after only {gone_after:.1f}s"
        print(f"{where}: {len(known)} processes, all gone {gone_after:.1f}s after the kill")
    finally:
        sigkill_all(known | marks.everything())


async def _drive_and_kill(state: Path, marks: Marks, known: set[ProcKey], delay: float) -> float:
    """Start panes (one with a grandchild), SIGKILL the supervisor while a turn and a start
    are in flight; adds every process seen to ``known``; returns the kill's time."""
    killed_at: float | None = None
    client = Client(stdio_params(state, **marks.env(PANEWARDEN_ORPHAN_GRACE_S=ORPHAN_GRACE_S)))
    try:
        async with client:
            tools = Tools(client)
            panes = [await _start(tools, marks, n, i) for i, n in enumerate(PANES)]
            supervisor = supervisor_of(panes[0]["worker_pid"])
            assert supervisor is not None
            for pane in panes:
                await tools.wait(pane["name"], until=["idle"])
                for pid in (pane["pid"], pane["worker_pid"]):
                    key = key_of(pid)
                    assert key is not None
                    known.add(key)
            await tools.call("send_input", name="spawner", text="spawn a helper")
            match = await tools.call(
                "wait_output", name="spawner", pattern=r"spawned \d+", regex=True, timeout_s=20
            )
            grandchild = key_of(int(match["line"].split()[1]))
            assert grandchild is not None
            known.add(grandchild)
            # The markers find every worker, program and grandchild known so far.
            assert known <= marks.everything(), describe(known - marks.everything())

            async def doomed(tool: str, args: dict[str, Any]) -> None:
                # The supervisor dies under this call: any outcome is fine.
                with contextlib.suppress(*CLIENT_GONE):
                    await client.call_tool(tool, args, read_timeout_seconds=30)

            late = {"name": "late", "profile": "demo", "extra_args": [marks.arg(len(PANES))]}
            async with anyio.create_task_group() as tg:
                tg.start_soon(doomed, "send_input", {"name": "busy", "text": "spawn busy"})
                tg.start_soon(doomed, "start_pane", late)
                await anyio.sleep(delay)  # the fault's random moment, not a synchronisation
                os.kill(supervisor, signal.SIGKILL)
                killed_at = time.monotonic()
                tg.cancel_scope.cancel()
            # Whatever carries a marker now was started by that supervisor.
            known |= marks.everything()
    except* CLIENT_GONE:
        pass  # leaving the client of a dead server
    assert killed_at is not None
    return killed_at


@pytest.mark.slow
async def test_supervisor_sigkill_orphans_kill_their_trees(tmp_path: Path) -> None:
    rng, seed = seeded_rng("test_supervisor_sigkill_orphans_kill_their_trees")
    async with anyio.create_task_group() as tg:
        for round_no in range(ROUNDS):
            tg.start_soon(_round, tmp_path, seed, round_no, rng.uniform(0.0, MAX_DELAY_S))


def _serve(state_dir: Path, timeout_s: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor", "serve", "--stdio"],
        env=service_env(state_dir),
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


async def test_one_supervisor_per_state_dir_and_restart_after_sigkill(
    state_dir: Path, tmp_path: Path
) -> None:
    marks = Marks(tmp_path, count=4)
    known: set[ProcKey] = set()
    # The default orphan grace (120 s): no worker gives up on its own during this test.
    env = marks.env()
    try:
        first = Client(stdio_params(state_dir, **env))
        try:
            async with first:
                tools = Tools(first)
                pane = await _start(tools, marks, "before", 0)
                known |= {k for p in (pane["pid"], pane["worker_pid"]) if (k := key_of(p))}
                supervisor = supervisor_of(pane["worker_pid"])
                assert supervisor is not None
                await tools.wait("before", until=["idle"])
                await tools.call("send_input", name="before", text="spawn before the crash")
                match = await tools.call(
                    "wait_output", name="before", pattern=r"spawned \d+", regex=True, timeout_s=20
                )
                grandchild = key_of(int(match["line"].split()[1]))
                assert grandchild is not None
                known.add(grandchild)

                second = await anyio.to_thread.run_sync(_serve, state_dir)
                assert second.returncode == 2, second
                assert "another supervisor" in second.stderr, second.stderr
                assert f"pid {supervisor}" in second.stderr, second.stderr
                # The refused supervisor touched nothing: the first one still serves.
                assert (await tools.call("get_status", name="before"))["lifecycle"] == "running"

                first_tree = set(known)
                os.kill(supervisor, signal.SIGKILL)
                assert await apoll(lambda: not alive_pid(supervisor), 5)
        except* CLIENT_GONE:
            pass

        # The kernel released the flock with the dead holder: a new supervisor starts.
        async with Client(stdio_params(state_dir, **env)) as client:
            tools = Tools(client)
            pane = await _start(tools, marks, "after", 1)
            known |= {k for p in (pane["pid"], pane["worker_pid"]) if (k := key_of(p))}
            assert supervisor_of(pane["worker_pid"]) != supervisor
            idle = await tools.wait("after", until=["idle"])
            await tools.call("send_input", name="after", text="served by the second one")
            await tools.wait("after", after=idle["seq"], until=["done"])
            text = (await tools.call("read_output", name="after"))["text"]
            assert "reply: served by the second one" in text

            # The first supervisor's pane, once taken over, is removed with its whole tree,
            # the grandchild it spawned before the crash included.
            await tools.wait("before", until=["done"], timeout_s=20)
            await tools.call("remove_pane", name="before")
            removed_at = time.monotonic()
            gone = await apoll(lambda: not survivors(first_tree) and not marks.pane_procs(0), 3)
            assert gone, (
                f"alive {time.monotonic() - removed_at:.1f}s after remove_pane: "
                f"{describe(set(survivors(first_tree)) | marks.pane_procs(0))}"
            )
            await tools.call("remove_pane", name="after")
        assert await apoll(lambda: not survivors(known) and not marks.everything(), 5), describe(
            set(survivors(known)) | marks.everything()
        )
    finally:
        sigkill_all(known | marks.everything())


def alive_pid(pid: int) -> bool:
    key = key_of(pid)
    return key is not None and survivors([key]) == [key]
