"""The coordination authority, wired: stores and their locks, controller leases, pane
leases and receipt-bound handoffs, over the pane core it governs."""

from __future__ import annotations

import asyncio
from typing import Any

from supervisor.config import ServiceConfig
from supervisor.control.context import ControlContext
from supervisor.control.controllers import ControllerAuthority
from supervisor.control.inventory import LeaseInventory
from supervisor.control.pane_leases import PaneLeases
from supervisor.control.receipts import Handoffs
from supervisor.control.startup import StartupReport, reconcile_at_start
from supervisor.control.stores import ControlStores
from supervisor.panes.registry import ADOPTION_WAIT_S
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
        self.startup: StartupReport | None = None

    async def start(self) -> None:
        """Once every re-adoption has settled (bounded: a worker that never proves itself
        is dropped within ``ADOPTION_WAIT_S``), reconcile the retained leases with the
        panes that survived (see :mod:`supervisor.control.startup`)."""
        pending = self.panes.registry.adoptions()
        if pending:
            await asyncio.wait(pending, timeout=ADOPTION_WAIT_S)
        self.startup = await reconcile_at_start(self.leases, self.panes.registry, self.stores.locks)

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
