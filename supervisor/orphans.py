"""The supervisor as a subreaper: catch and kill what dead panes leave behind.

With ``PR_SET_CHILD_SUBREAPER`` set, a process that escapes a dead worker's tree
(even one that detached moments before the worker died, before any scan saw it)
re-parents to the supervisor. Every child that is not a live worker is such a
leftover: it is killed and reaped. Zombies are reaped by pid, never with a blind
``waitpid(-1)``, so a worker's exit status is left for its own handle.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
from collections.abc import Callable, Iterable

import psutil

from supervisor.procfs import is_zombie, own_children, process_start_ticks

log = logging.getLogger(__name__)

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process a child subreaper (Linux); returns False elsewhere."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return False
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        log.warning("cannot become a subreaper: errno %d", ctypes.get_errno())
        return False
    return True


def sweep_leftovers(managed: Callable[[], set[int]]) -> int:
    """Kill and reap every child that is not a managed worker; returns how many."""
    keep = managed()
    count = 0
    for pid in own_children():
        if pid in keep:
            continue
        if is_zombie(pid):
            _reap(pid)
            continue
        count += kill_processes([pid], reason="adopted leftover of a dead pane")
    return count


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return


def kill_processes(pids: Iterable[int], reason: str) -> int:
    """SIGKILL each pid and its descendants (no grace: their pane is already lost)."""
    victims: list[psutil.Process] = []
    for pid in pids:
        if pid <= 1 or pid == os.getpid():
            continue
        try:
            proc = psutil.Process(pid)
            victims.extend([proc, *proc.children(recursive=True)])
        except psutil.Error:
            continue
    for proc in victims:
        try:
            proc.send_signal(signal.SIGKILL)
            log.warning("killed pid %d (%s)", proc.pid, reason, extra={"pid": proc.pid})
        except psutil.Error:
            continue
    return len(victims)


def kill_recorded(session_id: int | None, recorded: Iterable[tuple[int, int]]) -> int:
    """Kill a dead pane's session members and recorded descendants (start times checked)."""
    victims: set[int] = set()
    for pid, ticks in recorded:
        if process_start_ticks(pid) == ticks:
            victims.add(pid)
    if session_id:
        for proc in psutil.process_iter(["pid"]):
            try:
                if os.getsid(proc.pid) == session_id:
                    victims.add(proc.pid)
            except OSError:
                continue
    return kill_processes(sorted(victims), reason="left by a lost pane")
