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
from collections.abc import Callable, Collection, Iterable

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


def sweep_leftovers(
    managed: Callable[[], set[int]], already: Collection[int] = (), *, spare_live: bool = False
) -> set[int]:
    """Kill and reap every child that is not a managed worker; returns the pids killed.

    ``already`` holds pids the caller just killed, so nothing is signalled or counted twice.
    ``spare_live``: only reap zombies (a fork is in flight: a live unknown child may be
    its worker, whose pid is not known yet); the caller sweeps again once it settled.
    """
    keep = managed()
    killed: set[int] = set()
    for pid in own_children():
        if pid in keep:
            continue
        if is_zombie(pid):
            _reap(pid)
            continue
        if pid not in already and not spare_live:
            killed |= kill_processes([pid], "adopted leftover of a dead pane", skip=already)
    return killed


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return


def kill_processes(pids: Iterable[int], reason: str, skip: Collection[int] = ()) -> set[int]:
    """SIGKILL each pid and its descendants (no grace: their pane is already lost).

    Returns the pids signalled; zombies and pids in ``skip`` are left alone.
    """
    victims: dict[int, psutil.Process] = {}
    for pid in pids:
        if pid <= 1 or pid == os.getpid():
            continue
        try:
            proc = psutil.Process(pid)
            for member in (proc, *proc.children(recursive=True)):
                victims.setdefault(member.pid, member)
        except psutil.Error:
            continue
    killed: set[int] = set()
    for pid, proc in victims.items():
        if pid in skip or is_zombie(pid):
            continue
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.Error:
            continue
        killed.add(pid)
        log.warning("killed pid %d (%s)", pid, reason, extra={"pid": pid})
    return killed


def kill_recorded(session_id: int | None, recorded: Iterable[tuple[int, int]]) -> set[int]:
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
