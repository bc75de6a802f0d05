"""How many panes this host can hold, and the one process limit the supervisor raises.

Every pane costs the supervisor ``SUPERVISOR_FDS_PER_PANE`` descriptors (the worker's
ZeroMQ ipc connection and its pidfd); the worker holds ``WORKER_FDS`` of its own (its
own limit, not the supervisor's), one PTY, and ``TASKS_PER_PANE`` kernel tasks (the
worker's threads and its program's first process; counted against ``RLIMIT_NPROC``,
``kernel.pid_max`` and ``kernel.threads-max``). The figures are measured
(``bench/scale.py`` counts them on a running service) and documented in
docs/operations.md "Bounds".

At start the supervisor raises its soft ``RLIMIT_NOFILE`` to what ``max_panes`` needs,
never above the hard limit (``raise_fd_limit``); its children inherit that soft limit.
``capacity`` is what ``panewarden doctor`` prints: the panes each limit allows, the
smallest of them binding first.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from pathlib import Path

# Per pane, in the supervisor: the worker's ipc connection and its pidfd.
SUPERVISOR_FDS_PER_PANE = 2
# The supervisor's own, pane-independent descriptors (22 measured idle: the event loop,
# ZeroMQ's context, the ctl and operator sockets, the state dir lock, logs) with room
# for clients (HTTP connections, ctl calls, verification recipes).
SUPERVISOR_FDS_BASE = 256
# Per pane, host-wide: the supervisor's two, the worker's 13 (measured: its ZeroMQ
# context and socket, the PTY master, pipes to the template, /dev/null), the program's
# three standard streams on the PTY at least.
HOST_FDS_PER_PANE = SUPERVISOR_FDS_PER_PANE + 13 + 3
# Per pane: the worker's 3 threads (its loop, ZeroMQ's I/O thread, ZeroMQ's reaper)
# and the program's first process; an agent CLI adds its own (node: ~11 threads).
TASKS_PER_PANE = 4
# Proportional set size of one idle worker (bench ``idle``: ~3.7 MB on the pyte
# backend, forked from the template); its program's memory is the program's own.
WORKER_PSS_KIB = 4 * 1024


def fd_limit_needed(max_panes: int) -> int:
    """The soft ``RLIMIT_NOFILE`` the supervisor needs for ``max_panes`` panes."""
    return SUPERVISOR_FDS_BASE + SUPERVISOR_FDS_PER_PANE * max_panes


@dataclass(frozen=True)
class FdLimit:
    """The supervisor's ``RLIMIT_NOFILE``: soft before and after ``raise_fd_limit``, hard."""

    before: int
    soft: int
    hard: int

    @property
    def panes(self) -> int:
        """How many panes this soft limit holds."""
        return max(0, (self.soft - SUPERVISOR_FDS_BASE) // SUPERVISOR_FDS_PER_PANE)


def raise_fd_limit(max_panes: int) -> FdLimit:
    """Raise the soft fd limit to what ``max_panes`` needs, as far as the hard limit
    allows; never lower it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = fd_limit_needed(max_panes)
    if hard != resource.RLIM_INFINITY:
        want = min(want, hard)
    if want > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError):
            return FdLimit(soft, soft, hard)
        return FdLimit(soft, want, hard)
    return FdLimit(soft, soft, hard)


@dataclass(frozen=True)
class Bound:
    """One limit: how many more panes it allows, and what it was computed from."""

    name: str
    panes: int
    detail: str


def _read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _tasks_now() -> int | None:
    """Kernel tasks (processes and threads) on the host now: /proc/loadavg's 4th field."""
    try:
        return int(Path("/proc/loadavg").read_text().split()[3].split("/")[1])
    except (OSError, ValueError, IndexError):
        return None


def _user_tasks() -> int:
    """Tasks of this user now (what ``RLIMIT_NPROC`` counts)."""
    uid = os.getuid()
    count = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid == uid:
                count += len(os.listdir(f"/proc/{entry.name}/task"))
        except OSError:
            continue
    return count


def _mem_available_kib() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def capacity() -> list[Bound]:
    """The panes each host limit allows beyond what runs now, smallest first."""
    bounds: list[Bound] = []
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    fds = FdLimit(soft, top, hard)
    bounds.append(
        Bound(
            "fds",
            fds.panes,
            f"RLIMIT_NOFILE soft {soft}, hard {hard}: the supervisor raises the soft limit "
            f"to the hard one as needed; {SUPERVISOR_FDS_PER_PANE} per pane, "
            f"{SUPERVISOR_FDS_BASE} of its own",
        )
    )
    file_max, file_nr = _read_int("/proc/sys/fs/file-max"), _read_int("/proc/sys/fs/file-nr")
    if file_max is not None and file_nr is not None:
        bounds.append(
            Bound(
                "host fds",
                max(0, (file_max - file_nr) // HOST_FDS_PER_PANE),
                f"fs.file-max {file_max}, {file_nr} open; {HOST_FDS_PER_PANE} per pane",
            )
        )
    pty_max, pty_nr = _read_int("/proc/sys/kernel/pty/max"), _read_int("/proc/sys/kernel/pty/nr")
    if pty_max is not None:
        used = pty_nr or 0
        bounds.append(
            Bound("ptys", max(0, pty_max - used), f"kernel.pty.max {pty_max}, {used} in use")
        )
    tasks = _tasks_now()
    for name, key in (("pid_max", "kernel/pid_max"), ("threads-max", "kernel/threads-max")):
        limit = _read_int(f"/proc/sys/{key}")
        if limit is not None and tasks is not None:
            bounds.append(
                Bound(
                    name,
                    max(0, (limit - tasks) // TASKS_PER_PANE),
                    f"kernel.{name} {limit}, {tasks} tasks now; {TASKS_PER_PANE} per pane",
                )
            )
    nproc_soft, _nproc_hard = resource.getrlimit(resource.RLIMIT_NPROC)
    if nproc_soft != resource.RLIM_INFINITY:
        used = _user_tasks()
        bounds.append(
            Bound(
                "nproc",
                max(0, (nproc_soft - used) // TASKS_PER_PANE),
                f"RLIMIT_NPROC {nproc_soft}, {used} tasks of this user; {TASKS_PER_PANE} per pane",
            )
        )
    available = _mem_available_kib()
    if available is not None:
        bounds.append(
            Bound(
                "memory",
                available // WORKER_PSS_KIB,
                f"MemAvailable {available // 1024} MiB; {WORKER_PSS_KIB // 1024} MiB PSS per "
                "idle worker (its program's memory comes on top)",
            )
        )
    return sorted(bounds, key=lambda b: b.panes)
