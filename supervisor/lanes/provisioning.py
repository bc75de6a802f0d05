"""Starting the pane of a lane: from a claimed ``provisioning`` lease to ``active``.

Reviewer and writer starts admit under the store locks, record a ``provisioning`` lease
and claim it, then start the pane without the locks: the claim holds the name (and a
writer's scopes), and nothing else changes the lease meanwhile. The lease records the
pane instance as soon as the worker is spawned, becomes ``active`` once the pane is
ready (recording whether it runs confined), or ``failed_closed`` with the reason
(``cancelled`` when the call was cancelled); the claim is released either way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from protocol.errors import PanewardenError
from supervisor.control.context import ControlContext
from supervisor.control.records import PaneLease
from supervisor.panes.pane import LeaseTag, Pane

OnSpawn = Callable[[str], None]
Launch = Callable[[LeaseTag, OnSpawn], Awaitable[Pane]]


async def start_leased_pane(ctx: ControlContext, lease: PaneLease, launch: Launch) -> PaneLease:
    """Run ``launch`` (a ``start_pane`` under ``lease``'s tag) for a claimed lease; the
    lease as it ended: ``active``, or saved ``failed_closed`` before the error is raised."""
    tag = LeaseTag(
        lease.lease_id, lease.lease_type, lease.controller_id, lease.started_by is not None
    )

    def spawned(instance: str) -> None:
        nonlocal lease
        lease = ctx.leases.save(lease, instance=instance)

    try:
        pane = await launch(tag, spawned)
        return ctx.leases.save(
            lease, state="active", instance=pane.handle.instance, confined=pane.confined
        )
    except PanewardenError as exc:
        ctx.leases.save(lease, state="failed_closed", failure=exc.code.value)
        raise
    except BaseException:
        ctx.leases.save(lease, state="failed_closed", failure="cancelled")
        raise
    finally:
        ctx.leases.unclaim(lease.lease_id)
