"""Closing a leased pane: capture its output and close it in one worker step.

The close is conditional on ``expected_seq``: the supervisor refuses a pane that is
working or blocked, and the worker refuses (``cursor_mismatch``) if the pane's seq is
no longer the expected one — so nothing the pane did after the caller looked is lost
unseen. The lease records the SHA-256 of the captured text (never the text) and the
seq it was captured at.

A close has two halves. ``begin_close`` runs under the lease's store lock, after the
fence check: it checks the pane, writes the lease ``closing`` (``releasing`` for a
writer's release) and claims it (see ``PaneLeases.claim``). ``finish_close`` runs
without the store locks, so a slow close never holds up other calls: it captures the
screen at ``expected_seq`` and records that capture's digest on the lease *before* the
worker is asked to close, so a crash never loses the capture of a pane it closed; the
worker's own capture, taken in the closing step, then replaces it (the same unless the
screen changed without a status change). Both follow the capture rule of receipts
(``protocol.messages.CAPTURE_QUIET_S``): taken once the program is quiet, since a CLI may
report its settle before it draws the reply. A refused close puts the lease back as it was.
A lease a crash left ``closing`` is finished by the next close: closed with its recorded
capture if the pane is gone (the worker closed it), closed again if it still runs; at a
restart, one whose pane did not survive is closed at once
(:mod:`supervisor.control.startup`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from protocol.errors import ErrorCode, PanewardenError
from protocol.messages import CAPTURE_QUIET_S, ReadScreen, ScreenText
from supervisor.control.pane_leases import PaneLeases
from supervisor.control.records import PaneLease, PaneLeaseState
from supervisor.panes.driving import PaneDriver
from supervisor.panes.lifecycle import PaneLifecycle
from supervisor.panes.pane import Pane

CAPTURE_LINES = 10_000
BUSY_STATES = frozenset({"working", "blocked"})
# What a close writes on the lease (cleared again if the close is refused).
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


@dataclass
class CloseJob:
    """A close admitted by ``begin_close`` and run by ``finish_close``."""

    lease: PaneLease
    # None: the pane is gone after a close a crash interrupted; only the record is left.
    pane: Pane | None
    expected_seq: int
    final_state: PaneLeaseState
    previous: PaneLeaseState
    before: dict[str, Any] = field(default_factory=dict)


def begin_close(
    leases: PaneLeases,
    lease: PaneLease,
    expected_seq: int,
    final_state: PaneLeaseState,
    *,
    interim: PaneLeaseState = "closing",
    **record: Any,
) -> CloseJob:
    """Check and admit a close of ``lease``'s pane at ``expected_seq``: the lease reads
    ``closing`` (with ``record``) and is claimed. Call under the lease's store lock.

    Raises:
        PanewardenError: ``lease_state`` when the pane is gone (reconcile the lease),
            ``cursor_mismatch``, ``pane_busy`` (working, blocked, or being started or
            closed already).
    """
    if leases.claimed(lease.lease_id):
        raise PanewardenError(
            ErrorCode.PANE_BUSY, f"lease {lease.lease_id} is being started or closed"
        )
    # An interrupted close (`closing`/`releasing` after a crash) goes back to active if
    # refused.
    interrupted = lease.state in ("closing", "releasing")
    previous: PaneLeaseState = "active" if interrupted else lease.state
    before = {name: None if interrupted else getattr(lease, name) for name in CLOSE_FIELDS}
    pane = leases.pane_of(lease)
    if pane is None and not (interrupted and lease.capture_sha256 is not None):
        raise PanewardenError(
            ErrorCode.LEASE_STATE,
            f"the pane of lease {lease.lease_id} is gone; reconcile the lease",
        )
    if pane is not None:
        check_closable(pane, expected_seq)
        lease = leases.save(lease, state=interim, closed_seq=expected_seq, **record)
    leases.claim(lease)
    return CloseJob(lease, pane, expected_seq, final_state, previous, before)


async def finish_close(
    leases: PaneLeases, lifecycle: PaneLifecycle, driver: PaneDriver, job: CloseJob
) -> PaneLease:
    """Capture and close the pane of an admitted close, without the store locks (the
    lease is claimed); returns the closed lease and releases the claim.

    A worker that dies in the closing step leaves the lease ``closed`` with the capture
    taken at ``expected_seq`` (its pane is gone either way).

    Raises:
        PanewardenError: ``cursor_mismatch`` (the pane moved: left untouched),
            ``worker_lost`` (before the capture), ``timeout``; the lease is then put
            back as it was.
    """
    lease, pane = job.lease, job.pane
    try:
        if pane is None:
            # The worker closed the pane before a crash; its capture is recorded.
            return leases.save(lease, state=job.final_state)
        try:
            screen = await driver.rpc(
                pane,
                lambda rid: ReadScreen(
                    rid=rid,
                    lines=CAPTURE_LINES,
                    scrollback=True,
                    expected_seq=job.expected_seq,
                    quiet_s=CAPTURE_QUIET_S,
                ),
            )
            assert isinstance(screen, ScreenText)
        except PanewardenError:
            leases.save(lease, state=job.previous, **job.before)
            raise
        lease = leases.save(lease, capture_sha256=digest(screen.text))
        try:
            closed, _killed = await lifecycle.close_at(pane, job.expected_seq, CAPTURE_LINES)
        # Only a refused close is undone. Cancelled, the worker may be closing the pane:
        # the lease stays `closing` with its capture, and the next close finishes it.
        except PanewardenError as exc:
            if exc.code is ErrorCode.WORKER_LOST and pane.handle.dead:
                # The worker died in the closing step (its reply can lose the race with
                # its exit): the pane is gone either way, its processes killed, and its
                # capture at expected_seq is recorded.
                await lifecycle.remove(pane)
                return leases.save(lease, state=job.final_state)
            if leases.pane_of(lease) is not None:
                leases.save(lease, state=job.previous, **job.before)
            raise
        return leases.save(
            lease,
            state=job.final_state,
            closed_seq=closed.seq,
            capture_sha256=digest(closed.captured),
        )
    finally:
        leases.unclaim(lease.lease_id)
