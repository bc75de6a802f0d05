"""One pane as the supervisor sees it, its status history and the waits on it.

Each pane keeps its latest status and a bounded history of status records (one
per ``seq``), so a wait with ``after_seq`` returns the first matching record
recorded *after* that cursor even if the pane has moved on since. Waiters sleep
on an event that is replaced on every change: no polling.

The status has two writers only, both here and both called by the registry alone:
``observe`` takes a record the worker made (Hello or Status; seq is the worker's),
and ``mark_lost`` makes the one record the supervisor itself must make, when the
worker is dead and cannot (seq +1 from the last one seen).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass, field
from typing import Literal

from protocol.messages import PaneStatusFields
from protocol.status import has_ended, state_after_death
from protocol.timing import STATUS_HISTORY_RECORDS
from supervisor.profiles.confinement import ConfineSettings
from supervisor.profiles.policy import WatchdogConfig
from supervisor.workers.manager import WorkerHandle

PaneLeaseType = Literal["reviewer", "writer", "adopted"]


@dataclass(frozen=True)
class LeaseTag:
    """The lease a pane is driven through (reviewer, writer or adopted)."""

    lease_id: str
    lease_type: PaneLeaseType
    controller_id: str
    # Started by another pane over ctl: plain ``remove_pane`` may end it (the service's
    # client outranks the pane that started it), and it ends with its starter.
    started_by_pane: bool = False


@dataclass
class Pane:
    """One pane as the supervisor sees it."""

    name: str
    profile: str
    agent: str
    cwd: str
    handle: WorkerHandle
    started_at: float
    pid: int | None = None
    # The program's start time (clock ticks), taken when its worker named it: with
    # ``pid`` it identifies the program even after the pid is reused.
    pid_start_ticks: int | None = None
    status: PaneStatusFields = field(
        default_factory=lambda: PaneStatusFields(
            lifecycle="starting", state="unknown", kind=None, turn=0, seq=0, source="none"
        )
    )
    history: deque[PaneStatusFields] = field(
        default_factory=lambda: deque(maxlen=STATUS_HISTORY_RECORDS)
    )
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    removed: bool = False
    closing: bool = False
    lease: LeaseTag | None = None
    watchdog: WatchdogConfig | None = None
    # Its program runs in a sandbox (supervisor.confinement); its own files are here.
    confined: bool = False
    sandbox_dir: str | None = None
    # A confined pane's `network` ("host", "none" or "list") and what it reaches, in
    # words (get_status says both).
    network: str = ""
    network_exposes: str = ""
    # The confinement it was started with (None: unconfined, or re-adopted after a
    # restart): what a reviewer it starts over ctl may not exceed.
    confinement: ConfineSettings | None = None
    # What its sandbox lets it write, and read-only again inside that (resolved): no
    # later pane or writer worktree is admitted there (supervisor.confinement.nesting).
    sandbox_writable: tuple[str, ...] = ()
    sandbox_read_only: tuple[str, ...] = ()
    # The cursor of the last dialog answer delivered: a `blocked` status at or before it
    # was answered, even while the program has not reported what it did next.
    answered_seq: int = -1

    def observe(self, status: PaneStatusFields) -> None:
        """Take a record the worker made, if it is newer than what we have; wake waiters."""
        if status.seq <= self.status.seq and self.history:
            return
        self._record(status)

    def observe_history(self, records: list[PaneStatusFields]) -> None:
        """Take the worker's own history (with its Hello): every record newer than ours,
        so a cursor from before a supervisor restart still finds what followed it."""
        newer = [r for r in records if r.seq > self.status.seq or not self.history]
        for record in sorted(newer, key=lambda r: r.seq):
            if not self.history or record.seq > self.status.seq:
                self.status = record
                self.history.append(record)
        if newer:
            self._wake()

    def mark_lost(self) -> None:
        """The worker died: record lifecycle ``lost`` (a dead program is neither working
        nor waiting on a dialog any more)."""
        old = self.status
        state, kind = state_after_death(old.state, old.kind)
        self._record(
            PaneStatusFields(
                lifecycle="lost",
                state=state,
                kind=kind,
                turn=old.turn,
                seq=old.seq + 1,
                source=old.source,
                exit_code=None,
            )
        )

    def _record(self, status: PaneStatusFields) -> None:
        self.status = status
        self.history.append(status)
        self._wake()

    def mark_removed(self) -> None:
        """Leave the registry; waiters wake and see ``removed``."""
        self.removed = True
        self._wake()

    def _wake(self) -> None:
        event, self.changed = self.changed, asyncio.Event()
        event.set()

    def next_after(self, seq: int) -> PaneStatusFields | None:
        """The first record after ``seq`` still known (history, else the latest), or None."""
        for record in self.history:
            if record.seq > seq:
                return record
        return self.status if self.status.seq > seq else None

    async def history_after(self, seq: int, deadline: float) -> AsyncIterator[PaneStatusFields]:
        """Every record after ``seq``, oldest first, each as soon as it is recorded, until
        ``deadline`` (monotonic) passes or the pane leaves the registry.

        The one way to wait on a pane's history: status waits and the receipts' turn waits
        all read it, so a quick ``working → done → working`` never hides the ``done``.
        """
        while True:
            record = self.next_after(seq)
            if record is not None:
                seq = record.seq
                yield record
                continue
            if self.removed:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                await asyncio.wait_for(self.changed.wait(), remaining)
            except TimeoutError:
                return


def _matches(status: PaneStatusFields, until: Collection[str]) -> bool:
    # A pane whose program or worker is gone will never reach another state.
    return status.state in until or status.lifecycle in until or has_ended(status)


async def wait_for_status(
    pane: Pane, until: Collection[str], after_seq: int | None, timeout_s: float
) -> tuple[PaneStatusFields, bool]:
    """Wait until ``pane`` records a matching status after ``after_seq`` (without one: the
    latest status, or any later one); returns (status, timed_out)."""
    deadline = time.monotonic() + timeout_s
    if after_seq is None:
        if _matches(pane.status, until):
            return pane.status, False
        after_seq = pane.status.seq
    async for record in pane.history_after(after_seq, deadline):
        if _matches(record, until):
            return record, False
    return pane.status, not pane.removed
