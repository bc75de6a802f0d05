"""Closing a leased pane: capture its output and close it in one worker step.

The close is conditional on ``expected_seq``: the supervisor refuses a pane that is
working or blocked, and the worker refuses (``cursor_mismatch``) if the pane's seq is
no longer the expected one — so nothing the pane did after the caller looked is lost
unseen. The lease records the SHA-256 of the captured text (never the text) and the
seq it was captured at.

A crash must not lose the capture of a pane it closed: before the worker is asked to
close, the screen is captured at ``expected_seq`` and the lease is written ``closing``
with that capture's digest. The worker's own capture, taken in the closing step, then
replaces it (it is the same unless the screen changed without a status change). A
refused close puts the lease back as it was. A lease a crash left ``closing`` is
finished by the next close: closed with its recorded capture if the pane is gone (the
worker closed it), closed again if it still runs; at a restart, one whose pane did not
survive is closed at once (see ``PaneLeases.finish_interrupted_closes``).
"""

from __future__ import annotations

import hashlib
from typing import Any

from protocol.errors import ErrorCode, PanewardenError
from protocol.messages import ReadScreen, ScreenText
from supervisor.control.pane_leases import PaneLeases
from supervisor.control.records import PaneLease, PaneLeaseState
from supervisor.panes.driving import PaneDriver
from supervisor.panes.lifecycle import PaneLifecycle
from supervisor.panes.pane import Pane

CAPTURE_LINES = 10_000
BUSY_STATES = frozenset({"working", "blocked"})
# What a close writes on the lease before the worker closes the pane (cleared if the
# close is refused).
CLOSE_FIELDS = ("closed_seq", "capture_sha256", "checkpoint_ref", "checkpoint_sha256")


def check_closable(pane: Pane, expected_seq: int) -> None:
    """Refuse a pane that moved past ``expected_seq`` or is working or blocked."""
    status = pane.status
    if status.seq != expected_seq:
        raise PanewardenError(
            ErrorCode.CURSOR_MISMATCH,
            f"pane {pane.name!r} is at seq {status.seq}, not {expected_seq}; nothing was closed",
        )
    if status.lifecycle == "running" and status.state in BUSY_STATES:
        raise PanewardenError(
            ErrorCode.PANE_BUSY,
            f"pane {pane.name!r} is {status.state}; close it once it is idle or done",
        )


def digest(text: str | None) -> str:
    """The SHA-256 a lease records for a captured text."""
    return hashlib.sha256((text or "").encode()).hexdigest()


async def close_leased(
    leases: PaneLeases,
    lifecycle: PaneLifecycle,
    driver: PaneDriver,
    lease: PaneLease,
    expected_seq: int,
    final_state: PaneLeaseState,
    **record: Any,
) -> PaneLease:
    """Capture and close ``lease``'s pane at ``expected_seq``; returns the closed lease.

    Raises:
        PanewardenError: ``lease_state`` when the pane is gone (reconcile the lease),
            ``cursor_mismatch``, ``pane_busy``, ``worker_lost``.
    """
    pane = leases.pane_of(lease)
    if pane is None:
        if lease.state == "closing" and lease.capture_sha256 is not None:
            # A close a crash interrupted after the worker closed the pane.
            return leases.save(lease, state=final_state)
        raise PanewardenError(
            ErrorCode.LEASE_STATE,
            f"the pane of lease {lease.lease_id} is gone; reconcile the lease",
        )
    check_closable(pane, expected_seq)
    # A refused close leaves the lease as it was; an interrupted one, active again.
    interrupted = lease.state == "closing"
    previous: PaneLeaseState = "active" if interrupted else lease.state
    before = {name: None if interrupted else getattr(lease, name) for name in CLOSE_FIELDS}
    screen = await driver.rpc(
        pane,
        lambda rid: ReadScreen(
            rid=rid, lines=CAPTURE_LINES, scrollback=True, expected_seq=expected_seq
        ),
    )
    assert isinstance(screen, ScreenText)
    closing = leases.save(
        lease,
        state="closing",
        closed_seq=expected_seq,
        capture_sha256=digest(screen.text),
        **record,
    )
    try:
        closed, _killed = await lifecycle.close_at(pane, expected_seq, CAPTURE_LINES)
    except PanewardenError:
        if leases.pane_of(closing) is not None:
            leases.save(closing, state=previous, **before)
        raise
    return leases.save(
        closing, state=final_state, closed_seq=closed.seq, capture_sha256=digest(closed.captured)
    )
