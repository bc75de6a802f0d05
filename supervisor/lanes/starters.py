"""Reviewers a pane started over ``panewarden ctl`` end with that pane.

A pane's authority over ctl lasts as long as the pane: once it is removed, or its
program exited or its worker was lost, every reviewer lease it started (its
``started_by``) is ended — the reviewer's pane removed, the lease ``failed_closed``
with ``failure`` ``starter_ended`` — and its controller leases still active are
released. A pane-started reviewer that the service's client removes with plain
``remove_pane`` (allowed for these: the client outranks the pane that started it) has
its lease ended the same way (``failure`` ``removed``). ``sweep`` does both for what a
restart left behind: leases whose starter is no live pane.

Leases being started or closed (claimed) are left to that call; a start that finishes
after its starter ended is swept as it completes (``ReviewerLanes.start`` calls
``end_if_gone``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine

import msgspec

from protocol.errors import PanewardenError
from supervisor.control.context import ControlContext
from supervisor.control.controllers import pane_identity, pane_of_identity
from supervisor.control.records import RETAINED_STATES, PaneLease
from supervisor.panes.pane import Pane

log = logging.getLogger(__name__)

STARTER_ENDED = "starter_ended"
REMOVED = "removed"
ENDED_LIFECYCLES = frozenset({"exited", "lost"})


def _ended(pane: Pane) -> bool:
    return pane.removed or pane.status.lifecycle in ENDED_LIFECYCLES


class StarterBound:
    """Ends pane-started reviewers with their starter; see the module docstring."""

    def __init__(self, ctx: ControlContext) -> None:
        self._ctx = ctx
        self._tasks: set[asyncio.Task[None]] = set()
        # Starter identities (and removed reviewer lease ids) whose ending is under way.
        self._ending: set[str] = set()

    def watch(self) -> None:
        """Follow every pane's changes from now on."""
        self._ctx.registry.on_change(self._changed)

    async def stop(self) -> None:
        """Cancel the endings under way (the service is stopping: it closes every pane)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _changed(self, pane: Pane, _introduced: bool) -> None:
        if not _ended(pane) or self._ctx.lifecycle.is_stopping():
            return
        identity = pane_identity(pane.name, pane.handle.instance)
        # Called inside the registry's change (a removal among them): a store that
        # cannot be read must not break it.
        try:
            started = self._started_by(identity)
            own = self._own_lease(pane)
            if started or own is not None or self._holds_controller(identity):
                self._spawn(self._end(identity, started, own))
        except Exception:
            log.exception("cannot end a pane's reviewers", extra={"pane": pane.name})

    def _holds_controller(self, identity: str) -> bool:
        return any(
            lease.identity == identity and lease.state == "active"
            for lease in self._ctx.authority.leases()
        )

    def _spawn(self, work: Coroutine[None, None, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _started_by(self, identity: str) -> list[PaneLease]:
        return [
            lease
            for lease in self._ctx.leases.all("reviewer")
            if lease.started_by == identity and lease.state in RETAINED_STATES
        ]

    def _own_lease(self, pane: Pane) -> PaneLease | None:
        """The retained pane-started lease of a removed reviewer pane, if any."""
        tag = pane.lease
        if not pane.removed or tag is None or not tag.started_by_pane:
            return None
        try:
            lease = self._ctx.leases.get(tag.lease_type, tag.lease_id)
        except PanewardenError:
            return None
        if lease.state not in RETAINED_STATES or lease.instance != pane.handle.instance:
            return None
        return lease

    async def end_if_gone(self, identity: str) -> None:
        """End ``identity``'s reviewers if that pane is no live pane (any more)."""
        pane = self._ctx.registry.panes.get(pane_of_identity(identity) or "")
        alive = pane is not None and pane_identity(pane.name, pane.handle.instance) == identity
        if not alive or (pane is not None and _ended(pane)):
            await self._end(identity, self._started_by(identity), None)

    async def sweep(self) -> None:
        """End the reviewers whose starter is no live pane (after a restart)."""
        starters = {
            lease.started_by
            for lease in self._ctx.leases.all("reviewer")
            if lease.started_by is not None and lease.state in RETAINED_STATES
        }
        for identity in sorted(s for s in starters if s is not None):
            await self.end_if_gone(identity)

    async def _end(self, identity: str, started: list[PaneLease], own: PaneLease | None) -> None:
        key = identity if own is None else own.lease_id
        if key in self._ending:
            return
        self._ending.add(key)
        try:
            if own is not None:
                await self._end_leases([own], REMOVED)
            if started:
                await self._end_leases(started, STARTER_ENDED)
            if own is None:
                await self._release_controllers(identity)
        except Exception:
            log.exception("ending a pane's reviewers failed", extra={"pane": identity})
        finally:
            self._ending.discard(key)

    async def _end_leases(self, found: list[PaneLease], why: str) -> None:
        leases = self._ctx.leases
        taken: list[PaneLease] = []
        async with self._ctx.stores.locks.hold("reviewer"):
            for lease in found:
                try:
                    current = leases.get("reviewer", lease.lease_id)
                except PanewardenError:
                    continue  # gone meanwhile (a corrupt record is quarantined)
                if current.state not in RETAINED_STATES or leases.claimed(current.lease_id):
                    continue
                leases.claim(current)
                taken.append(current)
        for lease in taken:
            try:
                pane = leases.pane_of(lease)
                if pane is not None and not pane.closing:
                    await self._ctx.lifecycle.remove(pane)
                async with self._ctx.stores.locks.hold("reviewer"):
                    leases.save(lease, state="failed_closed", failure=why)
                log.info(
                    "reviewer lease %s ended: %s", lease.lease_id, why, extra={"pane": lease.name}
                )
            finally:
                leases.unclaim(lease.lease_id)

    async def _release_controllers(self, identity: str) -> None:
        """Release the controller leases the gone pane still holds: no one else may
        present them, and its namespace's ids are free for a pane of that name."""
        authority, store = self._ctx.authority, self._ctx.stores.controller
        async with self._ctx.stores.locks.hold("controller"):
            for lease in authority.leases():
                if lease.identity == identity and lease.state == "active":
                    ended = msgspec.structs.replace(
                        lease, state="released", ended_at=self._ctx.leases.now()
                    )
                    with contextlib.suppress(PanewardenError):
                        store.save(lease.lease_id, ended)
