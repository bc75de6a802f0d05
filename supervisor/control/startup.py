"""Start-up reconciliation: every retained pane lease against the panes re-adopted.

Run once when the service starts, after the re-adoption of surviving workers has
settled and before the first call is served, under the pane lease stores' locks. A
retained lease whose pane (its name *and* its instance) was re-adopted is kept and its
pane tagged again. One whose pane is not there — its worker died with the supervisor,
its start was interrupted, the name now runs another instance, or the pane is ``lost`` —
moves by the lease rules, with the reason recorded in its ``failure``:

- ``closing``/``releasing`` with the capture recorded: ``closed``/``released`` (the
  capture was taken before the worker was asked to close; the pane is gone either way);
- ``provisioning``, ``active``, and ``closing``/``releasing`` without a capture:
  ``orphaned`` (still retained: it blocks conflicting leases until ``lease_reconcile``);
- ``release_failed`` and ``orphaned``: kept as they are (they already say so).

What was done is logged and kept for ``service_status`` (``StartupReport``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import msgspec

from supervisor.control.pane_leases import PaneLeases
from supervisor.control.records import RETAINED_STATES, PaneLease, PaneLeaseState
from supervisor.panes.pane import Pane
from supervisor.panes.registry import PaneRegistry
from supervisor.store.locks import StoreLocks

log = logging.getLogger(__name__)

# A close that had recorded its capture, whose pane is gone: the state it ends in.
FINISHED_BY_CAPTURE: dict[str, PaneLeaseState] = {"closing": "closed", "releasing": "released"}
# Retained states that already say their pane needs the controller's attention.
LEFT_AS_THEY_ARE = frozenset({"release_failed", "orphaned"})


class LeaseChange(msgspec.Struct, frozen=True):
    """One lease the reconciliation moved, or kept though its pane is gone."""

    lease_id: str
    lease_type: str
    name: str
    previous: str
    state: str
    reason: str


class StartupReport(msgspec.Struct, frozen=True):
    """What the start-up reconciliation found and did."""

    at: float
    panes: int  # panes re-adopted (running when the service began to serve)
    matched: int  # retained leases whose pane was re-adopted (tagged again)
    changed: list[LeaseChange]
    kept: list[LeaseChange]

    def as_result(self) -> dict[str, Any]:
        """The ``service_status`` shape."""
        return msgspec.to_builtins(self)  # type: ignore[no-any-return]


def _gone_because(lease: PaneLease, pane: Pane | None) -> str | None:
    """Why ``lease``'s pane is not there after the restart; None when it is."""
    if pane is None:
        if lease.instance is None:
            return "its start was interrupted before its pane existed"
        return f"pane {lease.name!r} did not survive the restart (not re-adopted)"
    if lease.instance is None or pane.handle.instance != lease.instance:
        return f"pane {lease.name!r} runs another instance than the lease's"
    if pane.status.lifecycle == "lost":
        return f"pane {lease.name!r} was lost"
    return None


async def reconcile_at_start(
    leases: PaneLeases, registry: PaneRegistry, locks: StoreLocks
) -> StartupReport:
    """Reconcile every retained lease with the re-adopted panes; see the module docstring."""
    changed: list[LeaseChange] = []
    kept: list[LeaseChange] = []
    matched = 0
    async with locks.hold("reviewer", "writer", "adopted"):
        for lease in leases.all():
            if lease.state not in RETAINED_STATES:
                continue
            pane = registry.panes.get(lease.name)
            reason = _gone_because(lease, pane)
            if pane is not None and pane.handle.instance == lease.instance:
                # Its own pane, even lost: tagged, so only its lease's tools touch it.
                leases.tag(pane, lease)
            if reason is None:
                matched += 1
                continue
            target: PaneLeaseState = "orphaned"
            if lease.state in LEFT_AS_THEY_ARE:
                kept.append(_change(lease, lease.state, reason))
                continue
            if lease.state in FINISHED_BY_CAPTURE and lease.capture_sha256 is not None:
                target = FINISHED_BY_CAPTURE[lease.state]
                reason += "; its close had recorded the capture"
                done = leases.save(lease, state=target)
            else:
                done = leases.save(lease, state=target, failure=f"at the restart: {reason}")
            changed.append(_change(lease, done.state, reason))
            log.warning(
                "%s lease %s: %s -> %s at the restart: %s",
                lease.lease_type,
                lease.lease_id,
                lease.state,
                done.state,
                reason,
                extra={"pane": lease.name},
            )
    report = StartupReport(
        at=time.time(),
        panes=len(registry.running()),
        matched=matched,
        changed=changed,
        kept=kept,
    )
    log.info(
        "start-up reconciliation: %d panes re-adopted, %d retained leases matched, "
        "%d changed (%s), %d kept with their pane gone",
        report.panes,
        matched,
        len(changed),
        ", ".join(f"{c.lease_id} {c.previous}->{c.state}" for c in changed) or "none",
        len(kept),
    )
    return report


def _change(lease: PaneLease, state: str, reason: str) -> LeaseChange:
    return LeaseChange(
        lease_id=lease.lease_id,
        lease_type=lease.lease_type,
        name=lease.name,
        previous=lease.state,
        state=state,
        reason=reason,
    )
