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
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Literal

from protocol.messages import PaneStatusFields
from protocol.timing import STATUS_HISTORY_RECORDS
from supervisor.panes.workers import WorkerHandle
from supervisor.profiles.policy import WatchdogConfig

SETTLED: frozenset[str] = frozenset(
    {"idle", "done", "blocked", "error", "cancelled", "exited", "lost"}
)
TERMINAL_LIFECYCLES: frozenset[str] = frozenset({"exited", "lost"})


PaneLeaseType = Literal["reviewer", "writer", "adopted"]


@dataclass(frozen=True)
class LeaseTag:
    """The lease a pane is driven through (reviewer, writer or adopted)."""

    lease_id: str
    lease_type: PaneLeaseType
    controller_id: str


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
        gone = old.state in ("working", "blocked")
        self._record(
            PaneStatusFields(
                lifecycle="lost",
                state="unknown" if gone else old.state,
                kind=None if gone else old.kind,
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

    def find(self, until: Collection[str], after_seq: int | None) -> PaneStatusFields | None:
        """The first record after ``after_seq`` matching ``until`` (or a terminal one)."""
        if after_seq is None:
            return self.status if _matches(self.status, until) else None
        for record in self.history:
            if record.seq > after_seq and _matches(record, until):
                return record
        if self.status.seq > after_seq and _matches(self.status, until):
            return self.status
        return None


def _matches(status: PaneStatusFields, until: Collection[str]) -> bool:
    # A pane whose program or worker is gone will never reach another state.
    return (
        status.state in until
        or status.lifecycle in until
        or status.lifecycle in TERMINAL_LIFECYCLES
    )


async def wait_for_status(
    pane: Pane, until: Collection[str], after_seq: int | None, timeout_s: float
) -> tuple[PaneStatusFields, bool]:
    """Wait until ``pane`` records a matching status; returns (status, timed_out)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = pane.find(until, after_seq)
        if found is not None:
            return found, False
        if pane.removed:
            return pane.status, False
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return pane.status, True
        event = pane.changed
        try:
            await asyncio.wait_for(event.wait(), remaining)
        except TimeoutError:
            return pane.status, True
