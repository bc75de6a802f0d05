"""Who is calling over the ctl socket: a pane, proven by the caller's process ancestry.

The kernel names the peer of an AF_UNIX connection (``SO_PEERCRED``: pid and uid; and,
where the kernel has it, ``SO_PEERPIDFD``: a pidfd of that very process). From the
peer, the parent chain is walked through ``/proc/<pid>/stat`` (at most
``MAX_ANCESTRY_DEPTH`` processes) until a process is one of a live pane's *anchors*:

- the pane's program (pid and start time as recorded when its worker named it), or
- the pane's worker (pid and start time as recorded at spawn or re-adoption). The
  worker is a child subreaper, so whatever the program left behind (a detached
  grandchild) is re-parented to it and still belongs to its pane.

A pid alone proves nothing (pids are reused): a process is an anchor only if its start
time equals the recorded one, every parent in the chain must have started no later
than its child (a reused parent pid would be younger), and the peer must have started
no later than the connection was accepted. After the match the chain's start times are
read again and the peer's pidfd is asked whether it still lives: any change refuses.

The identity is ``pane:<name>:<instance>``; a caller in no pane is refused with
``forbidden``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from protocol.errors import ErrorCode, PanewardenError
from supervisor.control.controllers import pane_identity
from supervisor.panes.pane import Pane
from supervisor.panes.registry import PaneRegistry
from supervisor.procfs import process_parent_and_start

MAX_ANCESTRY_DEPTH = 32
# Not in Python 3.11's socket module; Linux >= 6.5 answers it, older kernels refuse it.
SO_PEERPIDFD = getattr(socket, "SO_PEERPIDFD", 77)
_UCRED = struct.Struct("3i")

StatReader = Callable[[int], tuple[int, int] | None]


@dataclass(frozen=True)
class ProcessKey:
    """One process: its pid and start time (clock ticks since boot)."""

    pid: int
    start_ticks: int


@dataclass(frozen=True)
class PaneAnchor:
    """The processes that prove a caller belongs to one pane."""

    name: str
    instance: str
    worker: ProcessKey
    program: ProcessKey | None

    @property
    def identity(self) -> str:
        """The caller identity of processes in this pane."""
        return pane_identity(self.name, self.instance)


def anchors_of(panes: Iterable[Pane]) -> list[PaneAnchor]:
    """The anchors of every pane whose worker is proven ours and alive."""
    anchors = []
    for pane in panes:
        handle = pane.handle
        if pane.removed or handle.dead or not handle.proven or handle.start_ticks is None:
            continue
        program = None
        if pane.pid is not None and pane.pid_start_ticks is not None:
            program = ProcessKey(pane.pid, pane.pid_start_ticks)
        worker = ProcessKey(handle.pid, handle.start_ticks)
        anchors.append(PaneAnchor(pane.name, handle.instance, worker, program))
    return anchors


def _refused(why: str) -> PanewardenError:
    return PanewardenError(ErrorCode.FORBIDDEN, f"the caller is not attested as a pane: {why}")


def match_ancestry(
    peer_pid: int,
    anchors: Iterable[PaneAnchor],
    *,
    started_by_ticks: int | None = None,
    read_stat: StatReader = process_parent_and_start,
    max_depth: int = MAX_ANCESTRY_DEPTH,
) -> PaneAnchor:
    """The pane whose program or worker is ``peer_pid`` or one of its ancestors.

    ``started_by_ticks``: the peer must have started no later (the connection's accept
    time), so a process that took a dead peer's pid is never the peer.

    Raises:
        PanewardenError: ``forbidden`` — no pane in the ancestry, the chain too deep, or
            a process changed (exited, pid reused) while it was read.
    """
    by_key: dict[ProcessKey, PaneAnchor] = {}
    for anchor in anchors:
        by_key[anchor.worker] = anchor
        if anchor.program is not None:
            by_key[anchor.program] = anchor
    chain: list[ProcessKey] = []
    pid = peer_pid
    found: PaneAnchor | None = None
    while found is None:
        if len(chain) >= max_depth:
            raise _refused(f"no pane within {max_depth} ancestors")
        stat = read_stat(pid)
        if stat is None:
            raise _refused("a process of its ancestry is gone")
        parent, ticks = stat
        if not chain and started_by_ticks is not None and ticks > started_by_ticks:
            raise _refused("its pid belongs to a process that started after it connected")
        if chain and ticks > chain[-1].start_ticks:
            raise _refused("its ancestry changed while it was read")
        key = ProcessKey(pid, ticks)
        chain.append(key)
        found = by_key.get(key)
        if found is None and parent <= 0:
            raise _refused("it runs in no pane")
        pid = parent
    # Read again: a chain that changed under the walk proves nothing.
    for key in chain:
        stat = read_stat(key.pid)
        if stat is None or stat[1] != key.start_ticks:
            raise _refused("its ancestry changed while it was read")
    return found


def boot_ticks_now() -> int:
    """Clock ticks since boot, on the clock ``/proc/<pid>/stat`` start times use."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))


def peer_credentials(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process that connected ``sock`` (``SO_PEERCRED``)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, _gid = _UCRED.unpack(raw)
    return pid, uid


def peer_pidfd(sock: socket.socket) -> int | None:
    """A pidfd of the very process that connected (``SO_PEERPIDFD``), if the kernel has it."""
    try:
        fd = sock.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD)
    except OSError:
        return None
    return fd if fd >= 0 else None


def _alive(pidfd: int) -> bool:
    try:
        signal.pidfd_send_signal(pidfd, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Attestor:
    """Attests the peer of a ctl connection against the registry's live panes."""

    def __init__(self, registry: PaneRegistry) -> None:
        self._registry = registry

    async def identify(self, sock: socket.socket, accepted_ticks: int) -> str:
        """The identity of the pane the peer runs in.

        Raises:
            PanewardenError: ``forbidden`` when it runs in no pane, or as another user.
        """
        pid, uid = peer_credentials(sock)
        if uid != os.getuid():
            raise _refused("it runs as another user")
        if pid <= 0:
            raise _refused("the kernel named no peer process")
        pidfd = peer_pidfd(sock)
        try:
            # Re-adopted panes first prove their workers (bounded) before they count.
            panes = await self._registry.ready_all()
            anchor = match_ancestry(pid, anchors_of(panes), started_by_ticks=accepted_ticks)
            if pidfd is not None and not _alive(pidfd):
                raise _refused("it exited while it was attested")
            return anchor.identity
        finally:
            if pidfd is not None:
                with contextlib.suppress(OSError):
                    os.close(pidfd)
