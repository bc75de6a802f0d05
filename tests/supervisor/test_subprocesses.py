"""Managed helper processes: exit codes kept under a sweeping subreaper, bounded output
with whole-stream digests, the process group killed on timeout or cancellation."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import textwrap

import pytest

from protocol.errors import PanewardenError
from supervisor.workers.subprocesses import ManagedChildren
from tests.conftest import REPO
from tests.polling import apoll

pytestmark = pytest.mark.anyio

# Runs in its own process: it becomes a subreaper and sweeps leftovers on every SIGCHLD
# and every 5 ms, as the supervisor does, while helpers run and exit with status 3.
SWEEPING_SUBREAPER = textwrap.dedent(
    """
    import asyncio, json, signal, sys
    from supervisor.workers import orphans
    from supervisor.workers.subprocesses import ManagedChildren

    async def main(registered):
        orphans.become_subreaper()
        children = ManagedChildren()
        keep = children.pids if registered else set
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGCHLD, orphans.sweep_leftovers, keep)

        async def sweeper():
            while True:
                await asyncio.sleep(0.005)
                orphans.sweep_leftovers(keep)

        task = loop.create_task(sweeper())
        argv = ["sh", "-c", "sleep 0.05; exit 3"]
        runs = [children.run(argv, cwd="/", env={"PATH": "/usr/bin:/bin"}, timeout_s=30)
                for _ in range(12)]
        results = await asyncio.gather(*runs)
        task.cancel()
        print(json.dumps([r.returncode for r in results]))

    asyncio.run(main(sys.argv[1] == "registered"))
    """
)


def _sweeping(mode: str) -> list[int]:
    done = subprocess.run(
        [sys.executable, "-c", SWEEPING_SUBREAPER, mode],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
        check=True,
    )
    return list(json.loads(done.stdout))


def test_exit_codes_survive_a_subreaper_that_sweeps_its_children() -> None:
    assert _sweeping("registered") == [3] * 12
    # The same run with the helpers left out of the keep-list loses exit codes: the
    # sweep kills them or reaps them first (then Popen reports a made-up 0).
    assert _sweeping("unregistered") != [3] * 12


async def test_a_timeout_kills_the_whole_process_group() -> None:
    children = ManagedChildren()
    script = "sleep 60 & echo $!; wait"
    result = await children.run(
        ["sh", "-c", script], cwd="/", env={"PATH": "/usr/bin:/bin"}, timeout_s=1.0
    )
    assert result.timed_out and result.returncode < 0
    grandchild = int(result.stdout.split()[0])
    assert await apoll(lambda: _gone(grandchild), 10), f"pid {grandchild} survived"
    assert children.pids() == set()


async def test_output_is_bounded_but_digested_whole() -> None:
    children = ManagedChildren()
    script = "import sys; sys.stdout.write('x' * 1_000_000); sys.stderr.write('e' * 10)"
    result = await children.run(
        [sys.executable, "-c", script], cwd="/", env={}, timeout_s=30, output_limit=1000
    )
    assert result.returncode == 0 and not result.timed_out
    assert result.stdout == b"x" * 1000 and result.truncated
    assert result.stdout_size == 1_000_000
    assert result.stdout_sha256 == hashlib.sha256(b"x" * 1_000_000).hexdigest()
    assert result.stderr == b"e" * 10
    assert result.stderr_sha256 == hashlib.sha256(b"e" * 10).hexdigest()


async def test_a_cancelled_run_kills_its_child() -> None:
    children = ManagedChildren()
    task = asyncio.ensure_future(
        children.run(["sleep", "60"], cwd="/", env={"PATH": "/usr/bin:/bin"}, timeout_s=60)
    )
    assert await apoll(children.pids, 10)
    (pid,) = children.pids()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await apoll(lambda: not children.pids(), 10)
    assert _gone(pid)


async def test_a_program_that_cannot_start_is_spawn_failed() -> None:
    children = ManagedChildren()
    with pytest.raises(PanewardenError) as caught:
        await children.run(["/nonexistent/program"], cwd="/", env={}, timeout_s=5)
    assert caught.value.code.value == "spawn_failed"
    assert children.pids() == set()


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
    except OSError:
        return not os.path.exists(f"/proc/{pid}")
