"""How often the worker walks its pane's process tree: often while things happen, rarely
when the pane is idle.

The walk records the pane's descendants for the kill list the supervisor keeps. A
process can only appear after something happened in the pane: the program wrote, read
input, a child exited (SIGCHLD) or the program was just spawned. So for
``BUSY_FOR_S`` after any of these the tree is walked every ``BUSY_SCAN_S``, and
otherwise every ``IDLE_SCAN_S`` (an idle worker walks it on the wake-up the
supervisor's heartbeat causes: :meth:`ScanPacer.may_ride`). The worker is a subreaper
either way: an orphan it never saw still re-parents to it, and the scan never decides
whether one is caught.
"""

from __future__ import annotations

from protocol.timing import HEARTBEAT_S

BUSY_SCAN_S = 0.25
# A little longer than the heartbeat period: the supervisor's beat then always comes
# before the walk is due and carries it (``may_ride``). At exactly one period the walk's
# own timer fired a few ms before each beat (the supervisor's period is 5 s plus its
# loop's lag): two wake-ups per period for an idle worker instead of one.
IDLE_SCAN_S = 1.1 * HEARTBEAT_S
BUSY_FOR_S = 3.0


class ScanPacer:
    """When the next tree walk is due, given the pane's recent activity."""

    def __init__(self, now: float) -> None:
        """Start busy: the program was just spawned at ``now``."""
        self.busy_until = now + BUSY_FOR_S
        self.next_at = now

    def activity(self, now: float) -> None:
        """Something happened in the pane: walk soon, and often for a while."""
        self.busy_until = now + BUSY_FOR_S
        self.next_at = min(self.next_at, now + BUSY_SCAN_S)

    def due(self, now: float) -> bool:
        """True when a walk is due now."""
        return now >= self.next_at

    def may_ride(self, now: float, next_wake_in_s: float) -> bool:
        """True when an idle-paced walk would be due before the next expected wake-up:
        done on this one instead, the walk moves onto the heartbeat's phase (rather than
        waking the worker a fixed phase away from it, period after period)."""
        return now >= self.busy_until and self.next_at <= now + next_wake_in_s

    def scanned(self, now: float) -> None:
        """A walk just ran: schedule the next one."""
        period = BUSY_SCAN_S if now < self.busy_until else IDLE_SCAN_S
        self.next_at = now + period
