"""Fault-injection tests, and the process helpers they share with the e2e stress tests.

The helpers observe real processes through ``/proc``: liveness with the start time (so a
reused pid is never mistaken for a survivor, nor killed in cleanup), the supervisor's
children and zombies, and processes carrying a test marker. A pane program is marked by
an allowed extra argument (``--pw-mark=…``, which the demo agent ignores and its forks
keep in their command line); a worker by a marker directory on ``PYTHONPATH`` (the
supervisor passes it on to the workers' environment).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sys
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import anyio
from mcp.shared.exceptions import MCPError

ProcKey = tuple[int, int]
"""(pid, start time in clock ticks): one process, never a later one reusing its pid."""

# What leaving the client of a server that died under it may raise.
CLIENT_GONE = (MCPError, anyio.BrokenResourceError, anyio.ClosedResourceError)


def seeded_rng(test: str) -> tuple[random.Random, int]:
    """A RNG seeded from ``PANEWARDEN_TEST_SEED`` (or a fresh seed); returns (rng, seed)."""
    raw = os.environ.get("PANEWARDEN_TEST_SEED")
    seed = int(raw) if raw else random.SystemRandom().randrange(2**32)
    print(f"{test}: PANEWARDEN_TEST_SEED={seed}")
    return random.Random(seed), seed


# ---------------------------------------------------------------- /proc facts


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state first), or None if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    return raw[raw.rfind(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, None if it is gone."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields is not None else None


def state(pid: int) -> str | None:
    """The one-letter process state (``Z`` for a zombie), None if the pid is gone."""
    fields = _stat_fields(pid)
    return fields[0] if fields is not None else None


def ppid(pid: int) -> int | None:
    """The parent pid, None if the pid is gone."""
    fields = _stat_fields(pid)
    return int(fields[1]) if fields is not None else None


def supervisor_of(worker_pid: int) -> int | None:
    """The supervisor of a pane worker: its parent, or its parent's parent when the worker
    was forked by the worker template (None if either is gone)."""
    parent = ppid(worker_pid)
    if parent is not None and comm(parent) == TEMPLATE_NAME:
        return ppid(parent)
    return parent


def key_of(pid: int) -> ProcKey | None:
    """(pid, start ticks) of a live process, None if it is gone."""
    ticks = start_ticks(pid)
    return None if ticks is None else (pid, ticks)


def alive(key: ProcKey) -> bool:
    """True while this very process runs (a zombie or a reused pid counts as gone)."""
    pid, ticks = key
    fields = _stat_fields(pid)
    if fields is None or int(fields[19]) != ticks:
        return False
    return fields[0] not in ("Z", "X")


def survivors(keys: Iterable[ProcKey]) -> list[ProcKey]:
    """The processes of ``keys`` that still run."""
    return [k for k in keys if alive(k)]


def children(pid: int) -> list[int]:
    """Children of ``pid`` (adopted orphans included), from /proc/PID/task/*/children."""
    found: list[int] = []
    for path in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError, ValueError):
            found.extend(int(p) for p in path.read_text().split())
    return found


def zombie_children(pid: int) -> list[int]:
    """Children of ``pid`` that exited and were not reaped."""
    return [c for c in children(pid) if state(c) in ("Z", "X")]


def descendants(pid: int) -> set[ProcKey]:
    """Live processes below ``pid``."""
    found: set[ProcKey] = set()
    stack = [pid]
    while stack:
        for child in children(stack.pop()):
            key = key_of(child)
            if key is not None and key not in found and alive(key):
                found.add(key)
                stack.append(child)
    return found


def _all_pids() -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit()]


def with_arg(pred: Callable[[bytes], bool]) -> dict[ProcKey, bytes]:
    """Live processes with an argv element matching ``pred``, with that element."""
    found: dict[ProcKey, bytes] = {}
    for pid in _all_pids():
        arg = next((a for a in _cmdline(pid).split(b"\0") if pred(a)), None)
        if arg is not None:
            key = key_of(pid)
            if key is not None and alive(key):
                found[key] = arg
    return found


def with_env_text(text: str) -> set[ProcKey]:
    """Live processes of this user whose environment contains ``text`` (pane workers)."""
    needle = text.encode()
    found: set[ProcKey] = set()
    for pid in _all_pids():
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ:
            key = key_of(pid)
            if key is not None and alive(key):
                found.add(key)
    return found


def sigkill_all(keys: Iterable[ProcKey]) -> None:
    """Cleanup only: SIGKILL whatever of ``keys`` still runs (start time re-checked)."""
    for pid, ticks in keys:
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            if start_ticks(pid) == ticks:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
        except OSError:
            pass
        finally:
            os.close(fd)


def describe(keys: Iterable[ProcKey]) -> str:
    """Pid, state, parent and command line of each process, for failure messages."""
    lines = []
    for pid, _ticks in sorted(keys):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            cmd = "?"
        lines.append(f"pid {pid} state {state(pid)} ppid {ppid(pid)}: {cmd[:120]}")
    return "; ".join(lines) or "(none)"


# ---------------------------------------------------------------- marked panes


class Marks:
    """Markers that let a test find every process of a pane, and of its workers.

    ``profiles_file`` writes a profiles file whose ``demo`` profile runs the demo agent
    and allows ``count`` marker arguments; start pane ``i`` with
    ``extra_args=[marks.arg(i)]``. ``env`` holds the variables that mark the workers.
    """

    def __init__(self, tmp: Path, count: int = 64) -> None:
        self.run = uuid.uuid4().hex[:12]
        self.count = count
        self.tmp = tmp
        self.worker_text = f"/nonexistent/pw-mark-{self.run}"

    def arg(self, i: int) -> str:
        return f"--pw-mark={self.run}-{i}"

    def profiles_file(self, **profile: Any) -> Path:
        entry: dict[str, Any] = {
            "name": "demo",
            "agent": "demo",
            "argv": [sys.executable, "-m", "supervisor.demo.agent"],
            "cwds": ["/"],
            "extra_args": [self.arg(i) for i in range(self.count)],
        }
        entry.update(profile)
        path = self.tmp / f"profiles-{self.run}.json"
        path.write_text(json.dumps({"profiles": [entry]}))
        return path

    def env(self, profiles: Path | None = None, **extra: str) -> dict[str, str]:
        """Service environment: a marked profiles file and the worker marker."""
        paths = (os.environ.get("PYTHONPATH"), self.worker_text)
        pythonpath = os.pathsep.join(p for p in paths if p)
        return {
            "PANEWARDEN_PROFILES": str(profiles or self.profiles_file()),
            "PYTHONPATH": pythonpath,
            **extra,
        }

    def pane_procs(self, i: int) -> set[ProcKey]:
        """Live processes of pane ``i``: its program and everything forked from it."""
        needle = self.arg(i).encode()
        return set(with_arg(lambda a: a == needle))

    def all_pane_procs(self) -> set[ProcKey]:
        """Live processes of every marked pane."""
        prefix = f"--pw-mark={self.run}-".encode()
        return set(with_arg(lambda a: a.startswith(prefix)))

    def workers(self) -> set[ProcKey]:
        """Live workers started by a supervisor with ``env()`` (cold or forked)."""
        return {k for k in self._service_procs() if comm(k[0]) != TEMPLATE_NAME}

    def templates(self) -> set[ProcKey]:
        """Live worker templates started by a supervisor with ``env()``."""
        return {k for k in self._service_procs() if comm(k[0]) == TEMPLATE_NAME}

    def _service_procs(self) -> set[ProcKey]:
        return {k for k in with_env_text(self.worker_text) if b"paneworker" in _cmdline(k[0])}

    def panes(self) -> set[ProcKey]:
        """What the panes own: their programs and workers (not the service's template)."""
        return self.all_pane_procs() | self.workers()

    def everything(self) -> set[ProcKey]:
        """Every marked process, the templates included: none may outlive the service."""
        return self.all_pane_procs() | self._service_procs()


TEMPLATE_NAME = "pw-template"
"""The process name (``comm``) of the worker template; workers call themselves pw-worker."""


def comm(pid: int) -> str | None:
    """The process name, None if the pid is gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
