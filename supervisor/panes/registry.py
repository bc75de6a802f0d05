"""The pane registry: which panes exist, under which names, and what their workers say.

A name is reserved (and the pane limit counted) in one synchronous step before any
await of a start, so concurrent starts of one name get exactly one pane. A pane is
known by its worker's instance id from the moment its worker is spawned (so events
and deaths find it) and by its name once it is running. Panes re-adopted after a
restart are listed at once, but every lookup through ``ready`` waits (bounded) until
the worker has introduced itself, so no answer shows a re-adopted pane as
``starting`` with seq 0.

Where a start will run is recorded (``place``) in the same synchronous step as the check
that it may: a directory a lease holds exclusively (a writer's worktree, named by
``guard_directories``) takes only that lease's pane, and that one only while no other
pane is starting or running in it. A writer's admission looks at the same record
(``panes_inside``), so a plain ``start_pane`` and a ``writer_start`` into one worktree
can never both get in, whichever comes first.

Worker events reach panes here and only here: the registry is the single writer of
every pane's status (``Pane.observe`` for the worker's records, ``Pane.mark_lost``
when the worker died). So status listeners (``on_status_change``: the notifier) are
called here, once per new record, with the record before it; a pane's first record in
this supervisor (a fresh worker's Hello, or a re-adopted one's) is a baseline, not a
change, and a pane being removed reports nothing.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from protocol.errors import ErrorCode, PanewardenError
from protocol.messages import (
    Descendants,
    Exited,
    Hello,
    OutputMatch,
    PaneStatusFields,
    ScreenFrame,
    Status,
    ToSupervisor,
)
from supervisor.panes.pane import Pane
from supervisor.procfs import process_parent_and_start
from supervisor.workers.manager import WorkerHandle

log = logging.getLogger(__name__)

# How long a lookup waits for a re-adopted worker to introduce itself.
ADOPTION_WAIT_S = 8.0

OutputSink = Callable[[OutputMatch], None]
# (pane, the record before, the new record): called after the pane took the new one.
StatusListener = Callable[[Pane, PaneStatusFields, PaneStatusFields], None]
# Told of every pane whose status or presence changed (the screen feed's status events);
# ``introduced`` when its worker (re-)sent Hello.
ChangeSink = Callable[[Pane, bool], None]
FrameSink = Callable[[Pane, ScreenFrame], None]
# (directory, lease id) pairs: directories only that lease's pane may run in.
ExclusiveDirs = Callable[[], Iterable[tuple[str, str]]]


def _no_exclusive_dirs() -> list[tuple[str, str]]:
    return []


def inside(path: str, top: str) -> bool:
    """True when real path ``path`` is ``top`` or below it."""
    return path == top or path.startswith(top.rstrip("/") + "/")


class PaneRegistry:
    """Panes by name and by worker instance; see the module docstring."""

    def __init__(self) -> None:
        self.panes: dict[str, Pane] = {}
        self._by_instance: dict[str, Pane] = {}
        self._reserved: set[str] = set()
        # Reserved names whose start has been placed: the real directory it runs in.
        self._placed: dict[str, str] = {}
        self._exclusive: ExclusiveDirs = _no_exclusive_dirs
        self._adopting: dict[str, asyncio.Task[None]] = {}
        self._output_sinks: list[OutputSink] = []
        self._status_listeners: list[StatusListener] = []
        self._change_sinks: list[ChangeSink] = []
        self._frame_sinks: list[FrameSink] = []

    # ------------------------------------------------------------ names

    @contextmanager
    def reserve(self, name: str, limit: int) -> Iterator[None]:
        """Hold ``name`` (and a place under ``limit``) for a start; released on exit.

        Raises:
            PanewardenError: ``pane_exists`` or ``pane_limit``, checked in this one step.
        """
        if name in self.panes or name in self._reserved:
            raise PanewardenError(ErrorCode.PANE_EXISTS, f"a pane named {name!r} exists")
        if len(self.panes) + len(self._reserved) >= limit:
            raise PanewardenError(ErrorCode.PANE_LIMIT, f"the limit of {limit} panes is reached")
        self._reserved.add(name)
        try:
            yield
        finally:
            self._reserved.discard(name)
            self._placed.pop(name, None)

    def guard_directories(self, exclusive: ExclusiveDirs) -> None:
        """Keep starts out of the directories ``exclusive`` names (see the module doc)."""
        self._exclusive = exclusive

    def place(self, name: str, cwd: str, lease_id: str | None) -> None:
        """Record that the start reserved as ``name`` runs in ``cwd`` (started under
        ``lease_id``, if any), checked in this one step.

        Raises:
            PanewardenError: ``scope_conflict`` when ``cwd`` is in a directory another
                lease holds, or in its own lease's while another pane is there.
        """
        real = os.path.realpath(cwd)
        for top, owner in self._exclusive():
            if not inside(real, top):
                continue
            if owner != lease_id:
                raise PanewardenError(
                    ErrorCode.SCOPE_CONFLICT,
                    f"{top} is the worktree of writer lease {owner}; no other pane starts there",
                )
            others = self.panes_inside(top)
            if others:
                raise PanewardenError(
                    ErrorCode.SCOPE_CONFLICT, f"pane {others[0]!r} already runs in {top}"
                )
        self._placed[name] = real

    def panes_inside(self, top: str) -> list[str]:
        """Panes starting (placed) or running (not lost) in real directory ``top`` or
        below it, by name."""
        found = {name for name, where in self._placed.items() if inside(where, top)}
        for pane in self._by_instance.values():
            if pane.status.lifecycle != "lost" and inside(os.path.realpath(pane.cwd), top):
                found.add(pane.name)
        return sorted(found)

    def track(self, pane: Pane) -> None:
        """Know ``pane`` by its worker instance (events and death find it) before it runs."""
        self._by_instance[pane.handle.instance] = pane

    def publish(self, pane: Pane) -> None:
        """Make a running pane visible under its name."""
        self.panes[pane.name] = pane
        self.track(pane)
        self._changed(pane)

    def adopting(self, pane: Pane, task: asyncio.Task[None]) -> None:
        """A re-adopted pane, listed now, whose worker ``task`` waits to hear from."""
        self.publish(pane)
        self._adopting[pane.name] = task

    def adopted(self, pane: Pane) -> None:
        """The re-adoption of ``pane`` is settled (proven, or dropped)."""
        self._adopting.pop(pane.name, None)

    def adoptions(self) -> list[asyncio.Task[None]]:
        """Re-adoptions still waiting for their worker."""
        return list(self._adopting.values())

    def drop(self, pane: Pane) -> None:
        """Forget ``pane`` under its name and its instance; wake its waiters."""
        if self.panes.get(pane.name) is pane:
            del self.panes[pane.name]
        self._by_instance.pop(pane.handle.instance, None)
        pane.mark_removed()
        self._changed(pane)

    # ------------------------------------------------------------ lookup

    def get(self, name: str) -> Pane:
        """The pane called ``name``; raises not_found."""
        pane = self.panes.get(name)
        if pane is None:
            raise PanewardenError(ErrorCode.NOT_FOUND, f"no pane named {name!r}")
        return pane

    async def ready(self, name: str) -> Pane:
        """The pane called ``name`` once it is known (a re-adopted worker has introduced
        itself, bounded); raises not_found."""
        task = self._adopting.get(name)
        if task is not None:
            await asyncio.wait({task}, timeout=ADOPTION_WAIT_S)
        return self.get(name)

    async def ready_all(self) -> list[Pane]:
        """Every pane, by name, once pending re-adoptions are settled (bounded)."""
        if self._adopting:
            await asyncio.wait(set(self._adopting.values()), timeout=ADOPTION_WAIT_S)
        return self.running()

    def running(self) -> list[Pane]:
        """Every running pane, by name."""
        return [self.panes[n] for n in sorted(self.panes)]

    def every_worker_pane(self) -> list[Pane]:
        """Every pane that has a worker, starting ones included."""
        return list(self._by_instance.values())

    def by_instance(self, instance: str) -> Pane | None:
        """The pane whose worker has this instance id, if any."""
        return self._by_instance.get(instance)

    # ------------------------------------------------------------ worker events

    def on_output_match(self, sink: OutputSink) -> None:
        """Call ``sink`` with every ``OutputMatch`` a worker pushes."""
        self._output_sinks.append(sink)

    def on_status_change(self, listener: StatusListener) -> None:
        """Call ``listener`` with every new status record of a pane (see the module doc)."""
        self._status_listeners.append(listener)

    def _observed(self, pane: Pane, before: PaneStatusFields, had_history: bool) -> None:
        after = pane.status
        if after is before or not had_history or pane.closing or pane.removed:
            return
        for listener in self._status_listeners:
            try:
                listener(pane, before, after)
            except Exception:
                # A listener's fault must not stop a status from reaching its pane.
                log.exception("status listener failed", extra={"pane": pane.name})

    def on_change(self, sink: ChangeSink) -> None:
        """Call ``sink`` whenever a pane appears, changes status or leaves."""
        self._change_sinks.append(sink)

    def on_screen_frame(self, sink: FrameSink) -> None:
        """Call ``sink`` with every ``ScreenFrame`` a pane's worker pushes."""
        self._frame_sinks.append(sink)

    def _changed(self, pane: Pane, introduced: bool = False) -> None:
        for sink in self._change_sinks:
            sink(pane, introduced)

    def on_worker_event(self, handle: WorkerHandle, msg: ToSupervisor) -> None:
        """Route one pushed frame of a proven worker (Hello included) to its pane."""
        pane = self._by_instance.get(handle.instance)
        match msg:
            case Hello(status=status, child_pid=child_pid, history=history):
                if pane is not None:
                    if child_pid != pane.pid or pane.pid_start_ticks is None:
                        # Taken once: a later Hello may come after the program was reaped.
                        pane.pid_start_ticks = child_start_ticks(child_pid, handle.pid)
                    pane.pid = child_pid
                    before, had_history = pane.status, bool(pane.history)
                    pane.observe_history(history)
                    pane.observe(status)
                    self._observed(pane, before, had_history)
                    self._changed(pane, introduced=True)
            case Status(status=status):
                if pane is not None:
                    before, had_history = pane.status, bool(pane.history)
                    pane.observe(status)
                    self._observed(pane, before, had_history)
                    self._changed(pane)
            case ScreenFrame():
                if pane is not None:
                    for frame_sink in self._frame_sinks:
                        frame_sink(pane, msg)
            case Descendants(procs=procs, session_id=session_id):
                handle.descendants = frozenset((int(p), int(t)) for p, t in procs)
                handle.session_id = session_id
            case OutputMatch():
                for sink in self._output_sinks:
                    sink(msg)
            case Exited(exit_code=code, killed=killed):
                log.info(
                    "program exited (%s), %d leftovers killed",
                    code,
                    killed,
                    extra={"pane": handle.pane, "worker_pid": handle.pid},
                )
            case _:
                pass

    def worker_died(self, handle: WorkerHandle, killed: int) -> Pane | None:
        """Record a worker's death on its pane; returns a pane whose re-adopted worker
        died unproven (the caller forgets it), else None."""
        pane = self._by_instance.get(handle.instance)
        if pane is None or pane.closing:
            return None
        if not handle.proven:
            return pane
        log.error(
            "worker died (exit %s); pane lost, %d processes killed",
            handle.exit_code,
            killed,
            extra={"pane": pane.name, "worker_pid": handle.pid},
        )
        before, had_history = pane.status, bool(pane.history)
        pane.mark_lost()
        self._observed(pane, before, had_history)
        self._changed(pane)
        return None


def child_start_ticks(pid: int | None, parent: int) -> int | None:
    """The start time of ``pid`` if it is still ``parent``'s child (the worker's program,
    alive or not yet reaped by the worker); None otherwise: a reused pid is not named."""
    if pid is None:
        return None
    stat = process_parent_and_start(pid)
    return stat[1] if stat is not None and stat[0] == parent else None
