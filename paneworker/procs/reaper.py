"""The pane worker's process-tree reaper (Linux): record, reap and kill the pane's tree.

The worker is a child subreaper, so every descendant of its program, however it forks or
calls ``setsid``, stays in the worker's tree: orphans re-parent to the worker rather than
to init. ``scan`` walks that tree from the worker down through the
``/proc/PID/task/TID/children`` files, so it costs in proportion to the pane's processes,
not the host's, and records each live descendant as a ``ProcKey`` (pid, start time) so a
reused pid is never mistaken for a descendant. ``reap`` collects every exited child
without blocking. ``kill_tree`` closes a pane: SIGHUP and SIGTERM to the program's process
group, session and tree, a bounded grace, then SIGKILL. It is the only call here that
waits, and only for as long as its deadlines allow.

Signals go through a pidfd opened *before* the start time is checked, so the process
signalled is the one whose identity was verified even if its pid is recycled meanwhile.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeAlias

from paneworker.procs.oscalls import OsCalls
from protocol.procstat import ProcStat
from protocol.timing import KILL_GRACE_S

_log = logging.getLogger(__name__)

ProcKey: TypeAlias = tuple[int, int]
"""(pid, start time in clock ticks since boot): one process, never a later one with its pid."""

# Bounds one reap() call so a fork storm of exiting children cannot stall the poll loop.
REAP_GUARD = 1000
POLL_INTERVAL_S = 0.02
# How long to wait for SIGKILLed processes to disappear before calling them survivors.
KILL_WAIT_S = 2.0

_SOFT_SIGNALS = (signal.SIGHUP, signal.SIGTERM, signal.SIGCONT)
_COUNTED_SIGNALS = frozenset({signal.SIGTERM, signal.SIGKILL})
_DEAD_STATES = frozenset({"Z", "X"})
# A process we may not inspect (hidepid, another user) is one we cannot verify, so never
# signal: treated like one that is gone rather than crashing the worker's loop.
_UNSEEN = (ProcessLookupError, PermissionError)


@dataclass(frozen=True, slots=True)
class KillResult:
    """What ``kill_tree`` did.

    ``signalled`` counts processes that were sent SIGTERM, ``killed_hard`` those that then
    needed SIGKILL; ``survivors`` were still alive after both deadlines; ``reaped`` holds
    every ``(pid, raw wait status)`` collected during the kill, the program's included.
    """

    signalled: int
    killed_hard: int
    survivors: list[ProcKey]
    reaped: list[tuple[int, int]]


class Reaper:
    """Records, reaps and kills the descendants of one pane worker process.

    Single-threaded: call it from the worker's loop only.
    """

    def __init__(self, os_calls: OsCalls, own_pid: int) -> None:
        """Track the descendants of ``own_pid`` (the calling worker) through ``os_calls``."""
        self._os = os_calls
        self._own_pid = own_pid
        self._recorded: frozenset[ProcKey] = frozenset()
        self._spawned: set[int] = set()
        # Children someone else waits for, by pid, with the start time they had when handed
        # over: a later child that reuses the pid is ours to reap again.
        self._owned_elsewhere: dict[int, int] = {}

    def become_subreaper(self) -> None:
        """Make the worker adopt every orphaned descendant (``PR_SET_CHILD_SUBREAPER``).

        Raises:
            OSError: the kernel refused.
        """
        self._os.prctl_set_child_subreaper()

    @property
    def recorded(self) -> frozenset[ProcKey]:
        """Live descendants seen so far, as of the last scan."""
        return self._recorded

    def note_spawned(self, pid: int) -> None:
        """Mark ``pid`` as a child the worker forked itself (not an adopted orphan)."""
        self._spawned.add(pid)

    def leave_to_owner(self, pid: int) -> None:
        """Never wait for child ``pid``: another component (e.g. ``subprocess``) does.

        A subreaper's ``waitpid(-1)`` would otherwise steal that child's exit status.
        """
        # A child already gone and reaped needs no protection.
        with contextlib.suppress(ProcessLookupError):
            self._owned_elsewhere[pid] = self._os.proc_stat(pid).start_time

    # -- recording -------------------------------------------------------------------

    def scan(self) -> bool:
        """Walk the worker's tree and record its live descendants.

        Entries stay recorded while their process lives, even if a racing walk missed
        them; they are dropped once the pid is gone or belongs to another process.
        Returns True when the recorded set changed.
        """
        before = self._recorded
        found = self._walk()
        kept = {key for key in before if key not in found and self._alive(key)}
        self._recorded = frozenset(found | kept)
        return self._recorded != before

    def _walk(self) -> set[ProcKey]:
        found: set[ProcKey] = set()
        visited = {self._own_pid}
        stack = [self._own_pid]
        while stack:
            parent = stack.pop()
            try:
                children = self._os.read_children(parent)
            except _UNSEEN:
                continue
            for pid in children:
                if pid in visited or pid <= 1:
                    continue
                visited.add(pid)
                try:
                    st = self._os.proc_stat(pid)
                except _UNSEEN:
                    continue
                if self._is_dead(st):
                    continue
                found.add((pid, st.start_time))
                stack.append(pid)
        return found

    def _is_dead(self, st: ProcStat) -> bool:
        if st.state not in _DEAD_STATES:
            return False
        # A leader that called pthread_exit shows "Z" while its other threads still run.
        try:
            states = self._os.task_states(st.pid)
        except _UNSEEN:
            return True
        return all(state in _DEAD_STATES for state in states)

    def _alive(self, key: ProcKey) -> bool:
        pid, start_time = key
        try:
            st = self._os.proc_stat(pid)
        except _UNSEEN:
            return False
        if st.start_time != start_time:
            return False
        if not self._is_dead(st):
            return True
        # Our own zombie still holds its pid and its exit status until we wait for it; a
        # zombie whose parent is someone else is dead and not ours to collect.
        return st.ppid == self._own_pid and pid not in self._owned_elsewhere

    # -- reaping ---------------------------------------------------------------------

    def reap(self) -> list[tuple[int, int]]:
        """Collect exited children without blocking: ``[(pid, raw wait status), ...]``.

        Includes the worker's program and every adopted orphan; at most ``REAP_GUARD``
        per call (the rest wait for the next call).
        """
        self._forget_stale_owned()
        if self._owned_elsewhere:
            return self._reap_each()
        reaped: list[tuple[int, int]] = []
        for _ in range(REAP_GUARD):
            try:
                pid, status = self._os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            except InterruptedError:
                continue
            if pid == 0:
                break
            self._note_reaped(pid, status)
            reaped.append((pid, status))
        return reaped

    def _reap_each(self) -> list[tuple[int, int]]:
        # waitpid(-1) cannot skip a child another component waits for, so wait per pid.
        reaped: list[tuple[int, int]] = []
        try:
            children = self._os.read_children(self._own_pid)
        except ProcessLookupError:
            return reaped
        for child in children[:REAP_GUARD]:
            if child in self._owned_elsewhere:
                continue
            try:
                pid, status = self._os.waitpid(child, os.WNOHANG)
            except (ChildProcessError, InterruptedError):
                continue
            if pid != 0:
                self._note_reaped(pid, status)
                reaped.append((pid, status))
        return reaped

    def _forget_stale_owned(self) -> None:
        for pid, start_time in list(self._owned_elsewhere.items()):
            try:
                current = self._os.proc_stat(pid).start_time
            except ProcessLookupError:
                current = None
            if current != start_time:
                del self._owned_elsewhere[pid]

    def _note_reaped(self, pid: int, status: int) -> None:
        if pid in self._spawned:
            self._spawned.discard(pid)
            _log.debug("reaped spawned pid %d (wait status %#x)", pid, status)
        else:
            _log.info("reaped adopted pid %d (wait status %#x)", pid, status)

    # -- killing ---------------------------------------------------------------------

    def kill_tree(self, session_id: int, grace_s: float = KILL_GRACE_S) -> KillResult:
        """Terminate the pane: its process group and session, and every descendant.

        SIGHUP, SIGTERM and SIGCONT (so stopped jobs act on them) go to the process group
        ``session_id``, every process in session ``session_id``, every recorded descendant
        still alive and every descendant a fresh scan finds. After ``grace_s`` whatever is
        alive gets SIGKILL; then up to ``KILL_WAIT_S`` more for it to disappear. Blocks
        for at most about ``grace_s + KILL_WAIT_S``; reaps children meanwhile.
        """
        reaped = self.reap()
        termed: set[ProcKey] = set()
        killed: set[ProcKey] = set()

        members, group_live = self._session_members(session_id)
        self.scan()
        targets = set(members) | set(self._recorded)
        group = session_id if group_live else None
        self._broadcast(group, targets, _SOFT_SIGNALS, termed)

        def soft(new: set[ProcKey]) -> None:
            self._broadcast(None, new, _SOFT_SIGNALS, termed)

        live = self._wait_gone(targets, time.monotonic() + max(grace_s, 0.0), soft, reaped)

        if live:
            _log.warning(
                "ignored SIGTERM for %.1f s, sending SIGKILL: %s", grace_s, self._describe(live)
            )
            # Anything that joined the session since the first pass gets the same treatment.
            members, group_live = self._session_members(session_id)
            fresh = {key for key in members - targets if self._alive(key)}
            targets |= fresh
            live |= fresh

            def hard(new: set[ProcKey]) -> None:
                self._broadcast(None, new, (signal.SIGKILL,), killed)

            group = session_id if group_live else None
            self._broadcast(group, live, (signal.SIGKILL,), killed)
            live = self._wait_gone(live, time.monotonic() + KILL_WAIT_S, hard, reaped)
            if live:
                _log.error("still alive after SIGKILL: %s", self._describe(live))

        reaped.extend(self.reap())
        self.scan()
        return KillResult(
            signalled=len(termed),
            killed_hard=len(killed),
            survivors=sorted(live),
            reaped=reaped,
        )

    def _wait_gone(
        self,
        targets: set[ProcKey],
        deadline: float,
        signal_new: Callable[[set[ProcKey]], None],
        reaped: list[tuple[int, int]],
    ) -> set[ProcKey]:
        """Poll until every target is gone or ``deadline`` passes; return what lives."""
        while True:
            reaped.extend(self.reap())
            live = {key for key in targets if self._alive(key)}
            # Walk only after the liveness check: an orphan re-parents before its parent
            # turns zombie, so a parent seen dead above has handed its children to us by now.
            self.scan()
            new = {key for key in self._recorded if key not in targets}
            if new:
                signal_new(new)
                targets |= new
                live |= new
            if not live:
                return live
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return live
            time.sleep(min(POLL_INTERVAL_S, remaining))

    def _session_members(self, session_id: int) -> tuple[set[ProcKey], bool]:
        """Live processes of session ``session_id`` (a full /proc scan), and whether any
        of them is in process group ``session_id``."""
        if not self._may_target_session(session_id):
            return set(), False
        members: set[ProcKey] = set()
        group_live = False
        for pid in self._os.list_pids():
            if pid <= 1 or pid == self._own_pid:
                continue
            try:
                st = self._os.proc_stat(pid)
            except _UNSEEN:
                continue
            if st.session != session_id or self._is_dead(st):
                continue
            members.add((pid, st.start_time))
            group_live = group_live or st.pgrp == session_id
        return members, group_live

    def _may_target_session(self, session_id: int) -> bool:
        if session_id <= 1 or session_id == self._own_pid:
            _log.error("refusing to kill session %d: not a pane's session", session_id)
            return False
        try:
            own = self._os.proc_stat(self._own_pid)
        except ProcessLookupError:
            return True
        if session_id in (own.session, own.pgrp):
            _log.error("refusing to kill session %d: the worker's own", session_id)
            return False
        return True

    def _broadcast(
        self,
        group: int | None,
        keys: Iterable[ProcKey],
        signals: Iterable[signal.Signals],
        delivered: set[ProcKey],
    ) -> None:
        """Send each signal in turn to the group (if any) and to every key.

        ``delivered`` collects the keys that were sent SIGTERM or SIGKILL.
        """
        ordered = sorted(keys)
        for sig in signals:
            if group is not None:
                self._signal_group(group, sig)
            for key in ordered:
                if self._signal(key, sig) and sig in _COUNTED_SIGNALS:
                    delivered.add(key)

    def _signal_group(self, pgid: int, sig: signal.Signals) -> None:
        # Only called when a live member of the group was just seen: while a group has a
        # member the kernel cannot hand its id to a new group.
        try:
            self._os.killpg(pgid, sig)
        except ProcessLookupError:
            pass
        except OSError as exc:
            _log.warning("killpg(%d, %s) failed: %s", pgid, sig.name, exc)

    def _signal(self, key: ProcKey, sig: signal.Signals) -> bool:
        """Signal the process ``key`` names, and no other; True if it was sent."""
        pid, start_time = key
        if pid <= 1 or pid == self._own_pid:
            return False
        pidfd: int | None
        try:
            pidfd = self._os.pidfd_open(pid)
        except ProcessLookupError:
            return False
        except OSError as exc:
            if exc.errno != errno.ENOSYS:
                _log.warning("pidfd_open(%d) failed: %s", pid, exc)
                return False
            # No pidfds (old kernel): check-then-kill leaves a tiny pid-reuse window.
            pidfd = None
        try:
            if self._os.proc_stat(pid).start_time != start_time:
                _log.debug("pid %d now names another process; not signalling", pid)
                return False
            if pidfd is None:
                self._os.kill(pid, sig)
            else:
                self._os.pidfd_send_signal(pidfd, sig)
        except ProcessLookupError:
            return False
        except OSError as exc:
            # One process refusing must not stop the kill of the others.
            _log.warning("cannot send %s to pid %d: %s", sig.name, pid, exc)
            return False
        finally:
            if pidfd is not None:
                self._os.close(pidfd)
        return True

    def _describe(self, keys: Iterable[ProcKey]) -> str:
        names = []
        for pid, _ in sorted(keys):
            try:
                names.append(f"{pid} ({self._os.proc_stat(pid).comm})")
            except _UNSEEN:
                names.append(str(pid))
        return ", ".join(names)
