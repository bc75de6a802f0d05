"""The pane registry and its status cursors.

Each pane keeps its latest status and a bounded history of status records (one
per ``seq``), so a wait with ``after_seq`` returns the first matching record
recorded *after* that cursor even if the pane has moved on since. Waiters sleep
on an event that is replaced on every change: no polling.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass, field

from protocol.messages import PaneStatusFields
from supervisor.profiles import WatchdogConfig
from supervisor.workers import WorkerHandle

HISTORY_RECORDS = 512
SETTLED: frozenset[str] = frozenset(
    {"idle", "done", "blocked", "error", "cancelled", "exited", "lost"}
)
TERMINAL_LIFECYCLES: frozenset[str] = frozenset({"exited", "lost"})


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
    status: PaneStatusFields = field(
        default_factory=lambda: PaneStatusFields(
            lifecycle="starting", state="unknown", kind=None, turn=0, seq=0, source="none"
        )
    )
    history: deque[PaneStatusFields] = field(default_factory=lambda: deque(maxlen=HISTORY_RECORDS))
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    removed: bool = False
    closing: bool = False
    lease: str | None = None
    watchdog: WatchdogConfig | None = None

    def record(self, status: PaneStatusFields) -> None:
        """Accept a status record if it is newer than what we have; wake waiters."""
        if status.seq <= self.status.seq and self.history:
            return
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
