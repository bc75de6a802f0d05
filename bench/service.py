"""The real service under a benchmark: a stdio server, its profiles, and its processes.

``bench_service`` starts ``panewarden serve --stdio`` on a fresh state dir with a
profiles file holding the benchmark programs (``quick``: a shell that reports
``idle`` over OSC 7501 at once, then waits in ``cat``; ``demo``; ``replay``: a
recorded TUI stream written in real time), and yields a :class:`Service`. The
process helpers read ``/proc``: CPU time from ``schedstat`` (nanoseconds, every
thread), wake-ups from the context-switch counters, memory from ``smaps_rollup``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
# Reports idle at once, then blocks in read(2): a program that costs nothing idle.
QUICK_ARGV = ["/bin/sh", "-c", "printf '\\033]7501;state=idle:app=bench\\007ready\\n'; exec cat"]
REPLAYER = BENCH_DIR / "replayer.py"


def profiles(extra: Iterable[dict[str, Any]] = (), max_panes: int = 256) -> dict[str, Any]:
    """A profiles document: the benchmark programs, room for ``max_panes`` panes."""
    entries: list[dict[str, Any]] = [
        {"name": "quick", "agent": "generic", "argv": QUICK_ARGV, "cwds": ["/"]},
        {
            "name": "demo",
            "agent": "demo",
            "argv": [sys.executable, "-m", "supervisor.demo.agent"],
            "cwds": ["/"],
        },
        *extra,
    ]
    return {"max_panes": max_panes, "profiles": entries}


@dataclass
class Service:
    """A running service: its MCP client, its state dir and its supervisor's pid."""

    client: Client
    state: Path
    supervisor_pid: int

    async def call(self, tool: str, **args: Any) -> dict[str, Any]:
        """Call a tool; raise on an error result."""
        result = await self.client.call_tool(tool, args, read_timeout_seconds=120)
        if result.is_error:
            raise RuntimeError(f"{tool}: {result.content}")
        return dict(result.structured_content or {})

    async def try_call(self, tool: str, **args: Any) -> dict[str, Any] | None:
        """Call a tool; None on an error result."""
        result = await self.client.call_tool(tool, args, read_timeout_seconds=120)
        return None if result.is_error else dict(result.structured_content or {})


def bench_environ() -> dict[str, str]:
    """This process's environment without panewarden's variables, panes unconfined: the
    benchmarks measure the pane path itself (``startup`` compares confined starts in its
    own run), and some read pids the demo agent prints, which a PID namespace would hide."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PANEWARDEN_")}
    return env | {"PANEWARDEN_CONFINE": "off"}


@asynccontextmanager
async def bench_service(
    extra_profiles: Iterable[dict[str, Any]] = (), max_panes: int = 256, **env_extra: str
) -> AsyncIterator[Service]:
    """Start the service over stdio with the benchmark profiles; stop it on exit."""
    with tempfile.TemporaryDirectory(prefix="pwbench-") as tmp:
        state = Path(tmp) / "state"
        state.mkdir(mode=0o700)
        profiles_path = Path(tmp) / "profiles.json"
        profiles_path.write_text(json.dumps(profiles(extra_profiles, max_panes)))
        env = bench_environ()
        env |= {
            "PANEWARDEN_STATE_DIR": str(state),
            "PANEWARDEN_PROFILES": str(profiles_path),
            "PANEWARDEN_LOG_LEVEL": "WARNING",
            **env_extra,
        }
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "supervisor", "serve", "--stdio"],
            env=env,
            cwd=str(REPO),
        )
        async with Client(params) as client:
            # Answered once the service is up (initialize is answered before).
            await client.list_tools()
            pid = int((state / "supervisor.lock").read_text().split()[0])
            yield Service(client, state, pid)


# -- /proc -------------------------------------------------------------------------------


def cpu_ns(pid: int) -> int:
    """CPU time of every thread of ``pid`` so far (0 once it is gone)."""
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tids:
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total


def context_switches(pid: int) -> int:
    """Voluntary + involuntary context switches of every thread: one per wake-up at least."""
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tids:
        try:
            text = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.endswith("ctxt_switches:") or "ctxt_switches:" in line:
                total += int(line.split()[1])
    return total


def pss_kib(pid: int) -> int:
    """Proportional set size of ``pid`` (shared pages divided among their sharers)."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def parent_of(pid: int) -> int | None:
    """The parent pid, None if ``pid`` is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rfind(")") + 2 :].split()[1])


def service_processes(supervisor_pid: int, worker_pids: Iterable[int]) -> set[int]:
    """The service's own processes: the supervisor, the workers and their parents below
    the supervisor (the worker template), never the pane programs."""
    found = {supervisor_pid}
    for pid in worker_pids:
        found.add(pid)
        parent = parent_of(pid)
        if parent is not None and parent > 1:
            found.add(parent)
    return found
