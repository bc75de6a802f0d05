"""Closing a leased pane: capture its output and close it in one worker step.

The close is conditional on ``expected_seq``: the supervisor refuses a pane that is
working or blocked, and the worker refuses (``cursor_mismatch``) if the pane's seq is
no longer the expected one — so nothing the pane did after the caller looked is lost
unseen. The lease records the SHA-256 of the captured text (never the text) and the
seq it was captured at. While the close runs the lease reads ``closing`` (a writer's
``releasing``); a refused close puts it back as it was.
"""

from __future__ import annotations

import hashlib
from typing import Any

from protocol.errors import ErrorCode, PanewardenError
from supervisor.control.pane_leases import PaneLeases
from supervisor.control.records import PaneLease, PaneLeaseState
from supervisor.panes.lifecycle import PaneLifecycle
from supervisor.panes.pane import Pane

CAPTURE_LINES = 10_000
BUSY_STATES = frozenset({"working", "blocked"})


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


async def close_leased(
    leases: PaneLeases,
    lifecycle: PaneLifecycle,
    lease: PaneLease,
    expected_seq: int,
    final_state: PaneLeaseState,
    *,
    interim: PaneLeaseState = "closing",
    **record: Any,
) -> PaneLease:
    """Capture and close ``lease``'s pane at ``expected_seq``; returns the closed lease.

    Raises:
        PanewardenError: ``lease_state`` when the pane is gone (reconcile the lease),
            ``cursor_mismatch``, ``pane_busy``, ``worker_lost``.
    """
    pane = leases.pane_of(lease)
    if pane is None:
        raise PanewardenError(
            ErrorCode.LEASE_STATE,
            f"the pane of lease {lease.lease_id} is gone; reconcile the lease",
        )
    check_closable(pane, expected_seq)
    previous = lease.state
    closing = leases.save(lease, state=interim)
    try:
        closed, _killed = await lifecycle.close_at(pane, expected_seq, CAPTURE_LINES)
    except PanewardenError:
        if leases.pane_of(closing) is not None:
            leases.save(closing, state=previous)
        raise
    captured = closed.captured or ""
    return leases.save(
        closing,
        state=final_state,
        closed_seq=closed.seq,
        capture_sha256=hashlib.sha256(captured.encode()).hexdigest(),
        **record,
    )
