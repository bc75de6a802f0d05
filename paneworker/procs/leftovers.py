"""What a subreaper does with an orphan it did not ask for: kill it and all below it.

The worker template is a child subreaper: when one of its workers dies, whatever that
worker's pane left running (even a ``setsid`` grandchild the worker never saw)
re-parents to the template. Nothing of a dead pane may outlive it, so every such
process and its whole subtree get SIGKILL at once (no grace: the pane is already gone).
Each signal goes through a pidfd opened before the start time is checked, so a reused
pid is never signalled.
"""

from __future__ import annotations

import logging
import signal

from paneworker.procs.oscalls import OsCalls

log = logging.getLogger(__name__)

ProcKey = tuple[int, int]
_DEAD_STATES = frozenset({"Z", "X"})
# Bounds one walk: a fork bomb below a dead pane cannot stall the template.
MAX_PROCESSES = 4096
_UNSEEN = (ProcessLookupError, PermissionError)


def subtree(os_calls: OsCalls, root: int) -> list[ProcKey]:
    """``root`` and its live descendants, parents first, as (pid, start time)."""
    found: list[ProcKey] = []
    seen: set[int] = set()
    stack = [root]
    while stack and len(found) < MAX_PROCESSES:
        pid = stack.pop()
        if pid in seen or pid <= 1:
            continue
        seen.add(pid)
        try:
            st = os_calls.proc_stat(pid)
        except _UNSEEN:
            continue
        if st.state not in _DEAD_STATES:
            found.append((pid, st.start_time))
        try:
            stack.extend(os_calls.read_children(pid))
        except _UNSEEN:
            continue
    return found


def kill_subtree(os_calls: OsCalls, root: int, own_pid: int) -> int:
    """SIGKILL ``root`` and everything below it; returns how many were signalled."""
    killed = 0
    for pid, start_time in subtree(os_calls, root):
        if pid == own_pid:
            continue
        if _kill(os_calls, pid, start_time):
            killed += 1
    return killed


def _kill(os_calls: OsCalls, pid: int, start_time: int) -> bool:
    try:
        pidfd = os_calls.pidfd_open(pid)
    except OSError:
        return False
    try:
        if os_calls.proc_stat(pid).start_time != start_time:
            return False
        os_calls.pidfd_send_signal(pidfd, signal.SIGKILL)
    except _UNSEEN:
        return False
    except OSError as exc:
        log.warning("cannot kill leftover pid %d: %s", pid, exc)
        return False
    finally:
        os_calls.close(pidfd)
    return True
