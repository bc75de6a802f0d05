"""The pace of the worker's tree walk: often while the pane is busy, rarely when idle."""

from __future__ import annotations

from paneworker.loop.pacing import BUSY_FOR_S, BUSY_SCAN_S, IDLE_SCAN_S, ScanPacer
from protocol.timing import HEARTBEAT_S


def test_a_fresh_pane_walks_at_once_then_often() -> None:
    pacer = ScanPacer(now=100.0)
    assert pacer.due(100.0)
    pacer.scanned(100.0)
    assert pacer.next_at == 100.0 + BUSY_SCAN_S


def test_a_quiet_pane_walks_every_few_seconds() -> None:
    pacer = ScanPacer(now=0.0)
    at = BUSY_FOR_S + 0.01
    pacer.scanned(at)
    assert pacer.next_at == at + IDLE_SCAN_S
    assert not pacer.due(at + IDLE_SCAN_S - 0.01)
    assert IDLE_SCAN_S >= 1.0  # an idle worker's timers fire at most once a second


def test_activity_brings_the_next_walk_close_and_keeps_it_frequent() -> None:
    pacer = ScanPacer(now=0.0)
    pacer.scanned(10.0)
    assert pacer.next_at == 10.0 + IDLE_SCAN_S
    pacer.activity(11.0)
    assert pacer.next_at == 11.0 + BUSY_SCAN_S
    pacer.scanned(11.25)
    assert pacer.next_at == 11.25 + BUSY_SCAN_S
    # Activity never pushes a walk that is already due sooner further away.
    pacer.activity(11.3)
    assert pacer.next_at == 11.25 + BUSY_SCAN_S
    # Quiet for BUSY_FOR_S after the last activity: back to the idle pace.
    quiet = 11.3 + BUSY_FOR_S + 0.01
    pacer.scanned(quiet)
    assert pacer.next_at == quiet + IDLE_SCAN_S


def test_an_idle_walk_rides_on_the_heartbeat_that_comes_before_it() -> None:
    beat = HEARTBEAT_S
    pacer = ScanPacer(now=0.0)
    pacer.scanned(BUSY_FOR_S + 0.01)  # idle from here
    # Its own timer is a little over a period away: the supervisor's beat comes first.
    assert beat < IDLE_SCAN_S
    at = pacer.next_at - IDLE_SCAN_S + beat + 0.005  # the next beat, 5 ms late
    assert not pacer.due(at)
    assert pacer.may_ride(at, next_wake_in_s=beat)
    pacer.scanned(at)
    # From then on every beat (the supervisor's period plus a little lag) carries it.
    for n in range(1, 5):
        later = at + n * (beat + 0.005)
        assert not pacer.due(later) and pacer.may_ride(later, next_wake_in_s=beat)
        pacer.scanned(later)


def test_a_busy_walk_never_rides_and_a_far_walk_waits() -> None:
    pacer = ScanPacer(now=0.0)
    pacer.scanned(0.0)
    assert not pacer.may_ride(0.1, next_wake_in_s=HEARTBEAT_S)  # busy: its own 250 ms pace
    pacer.scanned(BUSY_FOR_S + 0.01)
    # A walk due later than the next wake-up stays where it is.
    assert not pacer.may_ride(BUSY_FOR_S + 0.02, next_wake_in_s=1.0)
