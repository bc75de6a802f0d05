"""Adopted panes: a cleanup-only lease on a pane started without one.

``adopt`` takes an unleased, settled pane (idle, done, cancelled or error — not working
or blocked) at exactly ``expected_seq``, never the caller's own pane (``ctl`` in a pane
cannot adopt itself), and grants no prompt and no Git authority: the only thing a
controller can do with it is ``close`` it (capture + close at ``expected_seq``, with a
durable checkpoint).
"""

from __future__ import annotations

from protocol.errors import ErrorCode, PanewardenError
from supervisor.control.context import ControlContext
from supervisor.control.controllers import Credentials, pane_of_identity
from supervisor.control.fences import new_id
from supervisor.control.records import RECORD_VERSION, PaneLease
from supervisor.lanes.closing import begin_close, check_closable, finish_close


class AdoptedPanes:
    """pane_adopt, adopted_list, adopted_close."""

    def __init__(self, ctx: ControlContext) -> None:
        self._ctx = ctx

    def leases(self) -> list[PaneLease]:
        """Every adopted-pane lease, oldest first."""
        return self._ctx.leases.all("adopted")

    async def adopt(
        self,
        identity: str,
        creds: Credentials,
        name: str,
        expected_seq: int,
        authority_ref: str,
        authority_sha256: str,
    ) -> PaneLease:
        """Lease an unleased settled pane for cleanup only."""
        async with self._ctx.stores.locks.hold("controller", "reviewer", "writer", "adopted"):
            ctl = self._ctx.authority.check(identity, creds)
            pane = self._ctx.registry.get(name)
            if pane_of_identity(identity) == name:
                raise PanewardenError(ErrorCode.FORBIDDEN, "a controller cannot adopt its own pane")
            if pane.lease is not None or self._ctx.leases.retained_for(name) is not None:
                raise PanewardenError(ErrorCode.PANE_LEASED, f"pane {name!r} already has a lease")
            check_closable(pane, expected_seq)
            now = self._ctx.leases.now()
            lease = PaneLease(
                version=RECORD_VERSION,
                lease_id=new_id("adp"),
                lease_type="adopted",
                controller_id=ctl.controller_id,
                name=name,
                state="active",
                created_at=now,
                updated_at=now,
                purpose="cleanup",
                instance=pane.handle.instance,
                profile=pane.profile,
                cwd=pane.cwd,
                authority_ref=authority_ref,
                authority_sha256=authority_sha256,
            )
            self._ctx.stores.pane_leases["adopted"].save(lease.lease_id, lease)
            self._ctx.leases.tag(pane, lease)
            return lease

    async def close(
        self,
        identity: str,
        creds: Credentials,
        lease_id: str,
        expected_seq: int,
        checkpoint_ref: str,
        checkpoint_sha256: str,
    ) -> PaneLease:
        """Capture and close an adopted pane at ``expected_seq``, with a checkpoint."""
        async with self._ctx.stores.locks.hold("controller", "adopted"):
            ctl = self._ctx.authority.check(identity, creds)
            lease = self._ctx.leases.get("adopted", lease_id)
            if lease.controller_id != ctl.controller_id:
                raise PanewardenError(
                    ErrorCode.LEASE_CONFLICT, f"adopted lease {lease_id} is another controller's"
                )
            # `closing`: a close a crash interrupted, finished now.
            if lease.state not in ("active", "closing"):
                raise PanewardenError(
                    ErrorCode.LEASE_STATE, f"adopted lease {lease_id} is {lease.state}"
                )
            job = begin_close(
                self._ctx.leases,
                lease,
                expected_seq,
                "closed",
                checkpoint_ref=checkpoint_ref,
                checkpoint_sha256=checkpoint_sha256,
            )
        return await finish_close(self._ctx.leases, self._ctx.lifecycle, self._ctx.driver, job)
