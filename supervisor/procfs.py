"""Small readers of Linux ``/proc`` facts the supervisor needs about processes."""

from __future__ import annotations

from pathlib import Path


def _stat_fields(pid: int | str) -> list[str] | None:
    """Fields of ``/proc/PID/stat`` after the command name (field 3 onwards)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(errors="replace")
    except OSError:
        return None
    # The command name may contain spaces and parentheses: split after the last ")".
    return stat[stat.rfind(")") + 2 :].split()


def process_start_ticks(pid: int) -> int | None:
    """A process's start time in clock ticks (field 22), or None if it is gone."""
    fields = _stat_fields(pid)
    try:
        return int(fields[19]) if fields else None
    except (IndexError, ValueError):
        return None


def process_parent_and_start(pid: int) -> tuple[int, int] | None:
    """A process's parent pid (field 4) and start time in clock ticks (field 22), read
    from one ``stat`` read, or None if it is gone."""
    fields = _stat_fields(pid)
    try:
        return (int(fields[1]), int(fields[19])) if fields else None
    except (IndexError, ValueError):
        return None


def is_zombie(pid: int) -> bool:
    """True when ``pid`` exists and has exited but was not reaped yet."""
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] == "Z"  # type: ignore[index]


def own_children() -> list[int]:
    """Pids of this process's children, adopted orphans included (every thread)."""
    pids: list[int] = []
    for children in Path("/proc/self/task").glob("*/children"):
        try:
            pids.extend(int(p) for p in children.read_text().split())
        except (OSError, ValueError):
            continue
    return pids
