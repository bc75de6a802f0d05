"""The lease inventory, and reconciling leases whose panes are gone.

Inventory classifies every live pane — ``unleased``, ``matched`` (a retained lease names
this very instance) or ``drifted`` (a retained lease names the pane, but another
instance: it was re-created) — and every retained lease whose pane is gone as
``missing``. A pane whose worker died (lifecycle ``lost``: its processes were killed)
counts as gone. ``reconcile`` terminalises a lease (``failed_closed``) only when its
pane is confirmed gone, and forgets a lost pane with it; a lease whose pane lives is
preserved. Dry run by default.
"""

from __future__ import annotations

from typing import Any

from protocol.errors import ErrorCode, PanewardenError
from supervisor.control.context import ControlContext
from supervisor.control.controllers import Credentials
from supervisor.control.records import RETAINED_STATES
from supervisor.panes.pane import PaneLeaseType


class LeaseInventory:
    """lease_inventory and lease_reconcile."""

    def __init__(self, ctx: ControlContext) -> None:
        self._ctx = ctx

    def inventory(self) -> list[dict[str, Any]]:
        """One entry per live pane and per retained lease whose pane is gone."""
        retained = [lease for lease in self._ctx.leases.all() if lease.state in RETAINED_STATES]
        by_name = {lease.name: lease for lease in retained}
        entries: list[dict[str, Any]] = []
        for pane in self._ctx.registry.running():
            lease = by_name.pop(pane.name, None)
            if lease is None:
                status = "unleased"
            elif pane.status.lifecycle == "lost":
                status = "missing"
            elif lease.instance == pane.handle.instance:
                status = "matched"
            else:
                status = "drifted"
            entries.append(
                {
                    "name": pane.name,
                    "status": status,
                    "lease_id": None if lease is None else lease.lease_id,
                    "lease_type": None if lease is None else lease.lease_type,
                    "controller_id": None if lease is None else lease.controller_id,
                    "lease_state": None if lease is None else lease.state,
                    "lifecycle": pane.status.lifecycle,
                }
            )
        for lease in by_name.values():
            entries.append(
                {
                    "name": lease.name,
                    "status": "missing",
                    "lease_id": lease.lease_id,
                    "lease_type": lease.lease_type,
                    "controller_id": lease.controller_id,
                    "lease_state": lease.state,
                    "lifecycle": None,
                }
            )
        return sorted(entries, key=lambda e: (e["name"], e["status"]))

    async def reconcile(
        self,
        identity: str,
        creds: Credentials,
        lease_type: PaneLeaseType,
        lease_id: str,
        dry_run: bool,
    ) -> dict[str, Any]:
        """Terminalise one of this controller's leases if its pane is confirmed gone."""
        async with self._ctx.stores.locks.hold("controller", lease_type):
            ctl = self._ctx.authority.check(identity, creds)
            lease = self._ctx.leases.get(lease_type, lease_id)
            if lease.controller_id != ctl.controller_id:
                raise PanewardenError(
                    ErrorCode.LEASE_CONFLICT, f"lease {lease_id} is another controller's"
                )
            if lease.state not in RETAINED_STATES:
                return {"lease_id": lease_id, "action": "none", "state": lease.state}
            if self._ctx.leases.claimed(lease_id):
                # Its pane is being started or closed right now: not gone, not yet.
                return {"lease_id": lease_id, "action": "preserved", "state": lease.state}
            pane = self._ctx.registry.panes.get(lease.name)
            gone = (
                pane is None
                or pane.status.lifecycle == "lost"
                or (lease.instance is not None and pane.handle.instance != lease.instance)
            )
            if not gone:
                return {"lease_id": lease_id, "action": "preserved", "state": lease.state}
            if dry_run:
                return {"lease_id": lease_id, "action": "would_terminalise", "state": lease.state}
            done = self._ctx.leases.save(
                lease, state="failed_closed", failure="reconciled: its pane is gone"
            )
            if pane is not None and pane.status.lifecycle == "lost":
                self._ctx.leases.untag(pane, lease)
                await self._ctx.lifecycle.remove(pane)
            return {"lease_id": lease_id, "action": "terminalised", "state": done.state}
