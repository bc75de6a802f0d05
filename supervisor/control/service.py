"""The coordination authority, wired: stores and their locks, controller leases, pane
leases and receipt-bound handoffs, over the pane core it governs."""

from __future__ import annotations

from typing import Any

from supervisor.config import ServiceConfig
from supervisor.control.context import ControlContext
from supervisor.control.controllers import ControllerAuthority
from supervisor.control.inventory import LeaseInventory
from supervisor.control.pane_leases import PaneLeases
from supervisor.control.receipts import Handoffs
from supervisor.control.stores import ControlStores
from supervisor.panes.service import PaneService


class ControlService:
    """Leases, fences and receipts for one state dir (see the modules it wires)."""

    def __init__(self, config: ServiceConfig, panes: PaneService) -> None:
        self.panes = panes
        self.stores = ControlStores(config.state_dir, lock_wait_s=config.store_lock_wait_s)
        self.authority = ControllerAuthority(self.stores, min_ttl_s=config.lease_ttl_min_s)
        self.leases = PaneLeases(self.stores, panes.registry)
        panes.registry.guard_directories(self.leases.writer_worktrees)
        self.context = ControlContext(
            self.stores,
            self.authority,
            self.leases,
            panes.registry,
            panes.lifecycle,
            panes.driver,
        )
        self.handoffs = Handoffs(self.context)
        self.inventory = LeaseInventory(self.context)

    def start(self) -> None:
        """Put the lease tags back on the panes that survived a restart, and close the
        leases whose close a crash interrupted after their pane was gone."""
        self.leases.restore_tags()
        self.leases.finish_interrupted_closes()

    def store_report(self) -> dict[str, Any]:
        """Each store's lock state and quarantined records (no pid, lock id or token)."""
        states = self.stores.locks.states()
        return {
            store.name: {
                "lock": states.get(store.name, "absent"),
                "quarantined": len(store.quarantined()),
            }
            for store in self.stores.all_stores()
        }
