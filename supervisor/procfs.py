"""Small readers of Linux ``/proc`` facts the supervisor needs about processes (the
``stat`` line itself is read by ``protocol.procstat``, for both processes)."""

from __future__ import annotations

from pathlib import Path

from protocol.procstat import read_stat


def process_start_ticks(pid: int) -> int | None:
    """A process's start time in clock ticks (field 22), or None if it is gone."""
    stat = read_stat(pid)
    return stat.start_time if stat is not None else None


def process_parent_and_start(pid: int) -> tuple[int, int] | None:
    """A process's parent pid (field 4) and start time in clock ticks (field 22), read
    from one ``stat`` read, or None if it is gone."""
    stat = read_stat(pid)
    return (stat.ppid, stat.start_time) if stat is not None else None


def is_zombie(pid: int) -> bool:
    """True when ``pid`` exists and has exited but was not reaped yet."""
    stat = read_stat(pid)
    return stat is not None and stat.state == "Z"


def own_children() -> list[int]:
    """Pids of this process's children, adopted orphans included (every thread)."""
    pids: list[int] = []
    for children in Path("/proc/self/task").glob("*/children"):
        try:
            pids.extend(int(p) for p in children.read_text().split())
        except (OSError, ValueError):
            continue
    return pids
