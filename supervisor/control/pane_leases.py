"""Pane leases as the rest of the layer sees them: find, check, tag and restore.

A pane with a retained lease carries a ``LeaseTag`` (lease id, type, controller): plain
``send_input`` and ``remove_pane`` refuse it (``pane_leased``), the watchdog leaves it
alone, and ``list_panes`` shows it. The lease record names the pane *instance*: a pane
re-created under the same name is not that lease's pane. After a restart the tags are
put back from the records (:mod:`supervisor.control.startup`). A lease whose pane is
being started or closed is *claimed* for that time: the store locks are not held across
the worker step, and the claim keeps every other change off the lease meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec

from protocol.errors import ErrorCode, PanewardenError, echo
from supervisor.control.records import RETAINED_STATES, PaneLease
from supervisor.control.stores import ControlStores
from supervisor.panes.pane import LeaseTag, Pane, PaneLeaseType
from supervisor.panes.registry import PaneRegistry

LEASE_TYPES: tuple[PaneLeaseType, ...] = ("reviewer", "writer", "adopted")


class PaneLeases:
    """Reads and writes pane lease records and keeps pane tags in step with them."""

    def __init__(
        self,
        stores: ControlStores,
        registry: PaneRegistry,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._stores = stores
        self._registry = registry
        self._clock = clock
        # Leases whose pane is being started or closed by this service right now.
        self._claimed: set[str] = set()

    def now(self) -> float:
        """The wall clock the records use."""
        return self._clock()

    def all(self, lease_type: PaneLeaseType | None = None) -> list[PaneLease]:
        """Every lease record (of one type), oldest first."""
        types = LEASE_TYPES if lease_type is None else (lease_type,)
        found: list[PaneLease] = []
        for kind in types:
            found.extend(self._stores.pane_leases[kind].load_all()[0].values())
        return sorted(found, key=lambda lease: (lease.created_at, lease.lease_id))

    def get(self, lease_type: PaneLeaseType, lease_id: str) -> PaneLease:
        """One lease; ``not_found`` when there is none of that type and id."""
        try:
            lease = self._stores.pane_leases[lease_type].load(lease_id)
        except PanewardenError:
            lease = None
        if lease is None:
            raise PanewardenError(ErrorCode.NOT_FOUND, f"no {lease_type} lease {echo(lease_id)}")
        return lease

    def save(self, lease: PaneLease, **changes: object) -> PaneLease:
        """Write ``lease`` with ``changes`` (and a new ``updated_at``); returns it."""
        updated = msgspec.structs.replace(lease, updated_at=self._clock(), **changes)
        self._stores.pane_leases[lease.lease_type].save(updated.lease_id, updated)
        return updated

    def claim(self, lease: PaneLease) -> None:
        """Mark ``lease``'s pane start or close as under way (call under the lease's
        store lock). The worker step then runs without the store locks, so one slow
        pane never holds up other calls; every other change of a lease checks
        ``claimed`` first. Raises ``pane_busy`` if one is under way already."""
        if lease.lease_id in self._claimed:
            raise PanewardenError(
                ErrorCode.PANE_BUSY, f"lease {lease.lease_id} is being started or closed"
            )
        self._claimed.add(lease.lease_id)

    def unclaim(self, lease_id: str) -> None:
        """The start or close of ``lease_id`` is over (done, refused or failed)."""
        self._claimed.discard(lease_id)

    def claimed(self, lease_id: str) -> bool:
        """True while a start or close of ``lease_id`` is under way."""
        return lease_id in self._claimed

    def retained_for(self, name: str) -> PaneLease | None:
        """The retained lease naming pane ``name``, if any."""
        for lease in self.all():
            if lease.name == name and lease.state in RETAINED_STATES:
                return lease
        return None

    def writer_worktrees(self) -> list[tuple[str, str]]:
        """(worktree, lease id) of every retained writer lease: only its pane may run
        there (the registry's ``guard_directories``)."""
        return [
            (lease.writer.worktree, lease.lease_id)
            for lease in self.all("writer")
            if lease.state in RETAINED_STATES and lease.writer is not None
        ]

    def tag(self, pane: Pane, lease: PaneLease) -> None:
        """Mark ``pane`` as driven through ``lease``."""
        pane.lease = LeaseTag(
            lease.lease_id, lease.lease_type, lease.controller_id, lease.started_by is not None
        )

    def untag(self, pane: Pane | None, lease: PaneLease) -> None:
        """Clear ``pane``'s tag if it is ``lease``'s."""
        if pane is not None and pane.lease is not None and pane.lease.lease_id == lease.lease_id:
            pane.lease = None

    def pane_of(self, lease: PaneLease) -> Pane | None:
        """The live pane of ``lease``: the same name *and* the same instance."""
        pane = self._registry.panes.get(lease.name)
        if pane is None or lease.instance is None or pane.handle.instance != lease.instance:
            return None
        return pane

    def held(self, controller_id: str, name: str) -> tuple[Pane, PaneLease]:
        """Pane ``name`` and its active lease, which ``controller_id`` must hold.

        Raises:
            PanewardenError: ``not_found`` (no such pane), ``lease_state`` (unleased, or
                the lease is not active), ``lease_conflict`` (another controller's).
        """
        pane = self._registry.get(name)
        if pane.lease is None:
            raise PanewardenError(
                ErrorCode.LEASE_STATE,
                f"pane {name!r} has no lease; lease it (reviewer_start, writer_start) first",
            )
        lease = self.get(pane.lease.lease_type, pane.lease.lease_id)
        if lease.controller_id != controller_id:
            raise PanewardenError(
                ErrorCode.LEASE_CONFLICT, f"pane {name!r} is leased by another controller"
            )
        if lease.state != "active" or lease.instance != pane.handle.instance:
            raise PanewardenError(
                ErrorCode.LEASE_STATE,
                f"pane {name!r}'s {lease.lease_type} lease is {lease.state}; no new prompts",
            )
        if lease.lease_type == "adopted":
            raise PanewardenError(
                ErrorCode.LEASE_STATE,
                f"pane {name!r} is adopted for cleanup only; it takes no prompts",
            )
        return pane, lease
