"""Delayed steps of the worker loop.

Request state machines (prompt delivery, dialog answering) never block: each
schedules its next look at the pane here, and the loop runs what is due after
every poll. The loop's poll timeout comes from ``next_deadline``.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

Step = Callable[[], None]
IDLE_HORIZON_S = 3600.0


class Scheduler:
    """A heap of (due time, order, step); steps due at the same time run in order."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._due: list[tuple[float, int, Step]] = []
        self._order = itertools.count()

    def later(self, delay_s: float, step: Step) -> None:
        """Run ``step`` once ``delay_s`` has passed (at the loop's next step after that)."""
        heapq.heappush(self._due, (self.clock() + delay_s, next(self._order), step))

    def next_deadline(self) -> float:
        """When the earliest step is due (far in the future when none is)."""
        return self._due[0][0] if self._due else self.clock() + IDLE_HORIZON_S

    def run_due(self, now: float) -> None:
        """Run every step whose time has come."""
        while self._due and self._due[0][0] <= now:
            _, _, step = heapq.heappop(self._due)
            step()
