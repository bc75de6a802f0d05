"""The one reader of ``/proc/PID/stat``, for both processes: which process a pid is
(its start time), its parent, session, group and state."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of ``/proc/PID/stat`` the reaper needs."""

    pid: int
    comm: str
    state: str
    ppid: int
    pgrp: int
    session: int
    # Clock ticks since boot (field 22): with the pid, identifies one process for life.
    start_time: int


def parse_stat(pid: int, text: str) -> ProcStat:
    """Parse the text of ``/proc/PID/stat``.

    Raises:
        ValueError: the text is not a stat line.
    """
    # comm is free text (spaces, parentheses), so split only after its last ")".
    open_at = text.index("(")
    close_at = text.rindex(")")
    rest = text[close_at + 1 :].split()
    # rest[0] is field 3 (state), so field N is rest[N - 3].
    return ProcStat(
        pid=pid,
        comm=text[open_at + 1 : close_at],
        state=rest[0],
        ppid=int(rest[1]),
        pgrp=int(rest[2]),
        session=int(rest[3]),
        start_time=int(rest[19]),
    )


def read_stat(pid: int | str) -> ProcStat | None:
    """``/proc/PID/stat`` parsed, or None when the process is gone or the line unreadable."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            text = f.read()
        return parse_stat(int(pid), text)
    except (OSError, ValueError, IndexError):
        return None
