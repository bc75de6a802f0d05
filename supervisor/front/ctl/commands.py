"""The commands of ``panewarden ctl``, run for a pane the ctl socket attested.

They are the coordination tools without credentials: the controller lease is held by
the calling pane's identity and the service finds it (a pane holds one live controller
lease at a time; ``controller_id`` picks one explicitly, in the pane's own namespace:
``--controller-id boss`` in pane ``coord`` is ``pane:coord/boss``), so no fence token
is ever sent, returned or stored by the client. Results never contain a fence token.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from protocol.errors import ErrorCode, PanewardenError
from supervisor.control.controllers import Attested, controller_id_for, pane_of_identity
from supervisor.control.receipts import HandoffRequest
from supervisor.control.records import OUTSTANDING_RECEIPTS, RETAINED_STATES, ControllerLease
from supervisor.control.service import ControlService
from supervisor.front.ctl.server import CtlCommand
from supervisor.front.tools.arguments import DEFAULT_TIMEOUT_S, Args, PaneName, Seq, Timeout
from supervisor.front.tools.coordination_schemas import (
    ControllerId,
    HandoffItem,
    Lines,
    Mode,
    RecordId,
    Ref,
    Sha256,
    TtlS,
)
from supervisor.front.tools.coordination_tools import controller_lease_info, receipt_info
from supervisor.front.tools.lane_tools import pane_lease_info
from supervisor.lanes.service import LaneService

Text = Annotated[str, msgspec.Meta(min_length=1, max_length=512)]


class HeldArgs(Args, kw_only=True):
    """Every command that acts under the pane's lease may name its controller."""

    controller_id: ControllerId | None = None


class AcquireArgs(Args):
    controller_id: ControllerId
    authority_ref: Ref
    authority_sha256: Sha256
    ttl_s: TtlS | None = None


class RenewArgs(HeldArgs):
    ttl_s: TtlS | None = None


class ReleaseArgs(HeldArgs):
    checkpoint_ref: Ref
    checkpoint_sha256: Sha256


class AskArgs(HeldArgs):
    name: PaneName
    text: Annotated[str, msgspec.Meta(min_length=1, max_length=65536)]
    timeout_s: Timeout = DEFAULT_TIMEOUT_S
    lines: Lines | None = None


class AskManyArgs(HeldArgs):
    requests: Annotated[list[HandoffItem], msgspec.Meta(min_length=1, max_length=8)]
    mode: Mode
    timeout_s: Timeout = DEFAULT_TIMEOUT_S
    lines: Lines | None = None


class CollectArgs(HeldArgs):
    receipts: Annotated[list[RecordId], msgspec.Meta(min_length=1, max_length=8)]
    mode: Mode = "all"
    timeout_s: Timeout = DEFAULT_TIMEOUT_S
    lines: Lines | None = None


class AbandonArgs(HeldArgs):
    receipt: RecordId


class ReviewerStartArgs(HeldArgs):
    name: PaneName
    profile: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    cwd: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]
    purpose: Text
    model: Annotated[str, msgspec.Meta(min_length=1, max_length=128)] | None = None
    effort: Annotated[str, msgspec.Meta(min_length=1, max_length=64)] | None = None


class ReviewerCloseArgs(HeldArgs):
    lease_id: RecordId
    expected_seq: Seq


def ctl_commands(control: ControlService, lanes: LaneService) -> dict[str, CtlCommand]:
    """Every ``panewarden ctl`` command, by the name the client sends."""
    authority, handoffs, reviewers = control.authority, control.handoffs, lanes.reviewers

    def info(lease: ControllerLease) -> dict[str, Any]:
        return controller_lease_info(lease, authority.expired(lease))

    def held(identity: str, controller_id: str | None) -> ControllerLease | None:
        """The controller lease this pane holds (a live one first), if any."""
        if controller_id is not None:
            controller_id = controller_id_for(identity, controller_id)
        mine = [
            lease
            for lease in authority.leases()
            if lease.identity == identity
            and (controller_id is None or lease.controller_id == controller_id)
        ]
        active = [lease for lease in mine if lease.state == "active"]
        live = [lease for lease in active if not authority.expired(lease)]
        for pool in (live, active):
            if len(pool) > 1:
                ids = ", ".join(sorted(lease.controller_id for lease in pool))
                raise PanewardenError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"this pane holds the leases of several controllers ({ids}); "
                    "name one with --controller-id",
                )
            if pool:
                return pool[0]
        return max(mine, key=lambda lease: lease.ended_at or lease.created_at, default=None)

    def creds(identity: str, controller_id: str | None) -> Attested:
        lease = held(identity, controller_id)
        if lease is None:
            raise PanewardenError(
                ErrorCode.FENCE_INVALID,
                "this pane holds no controller lease; run `panewarden ctl acquire` first",
            )
        return Attested(lease.controller_id)

    async def acquire(identity: str, a: AcquireArgs) -> dict[str, Any]:
        granted = await authority.acquire(
            identity, a.controller_id, a.authority_ref, a.authority_sha256, a.ttl_s
        )
        return info(granted.lease)  # the fence token stays in the service

    async def resume(identity: str, a: AcquireArgs) -> dict[str, Any]:
        granted = await authority.resume(
            identity, a.controller_id, a.authority_ref, a.authority_sha256, a.ttl_s
        )
        return info(granted.lease)

    async def renew(identity: str, a: RenewArgs) -> dict[str, Any]:
        return info(await authority.renew(identity, creds(identity, a.controller_id), a.ttl_s))

    async def release(identity: str, a: ReleaseArgs) -> dict[str, Any]:
        lease = await authority.release(
            identity, creds(identity, a.controller_id), a.checkpoint_ref, a.checkpoint_sha256
        )
        return info(lease)

    async def status(identity: str, a: HeldArgs) -> dict[str, Any]:
        lease = held(identity, a.controller_id)
        receipts, lanes_held = [], []
        if lease is not None:
            receipts = [
                receipt_info(r)
                for r in handoffs.receipts(lease.controller_id)
                if r.state in OUTSTANDING_RECEIPTS
            ]
            lanes_held = [
                pane_lease_info(p)
                for p in reviewers.leases()
                if p.controller_id == lease.controller_id and p.state in RETAINED_STATES
            ]
        return {
            "identity": identity,
            "pane": pane_of_identity(identity),
            "controller": None if lease is None else info(lease),
            "receipts": receipts,
            "reviewers": lanes_held,
        }

    async def receipts(identity: str, a: HeldArgs) -> dict[str, Any]:
        lease = held(identity, a.controller_id)
        found = [] if lease is None else handoffs.receipts(lease.controller_id)
        return {"receipts": [receipt_info(r) for r in found]}

    async def ask(identity: str, a: AskArgs) -> dict[str, Any]:
        outcome = await handoffs.batch(
            identity,
            creds(identity, a.controller_id),
            [HandoffRequest(a.name, a.text)],
            "all",
            a.timeout_s,
            a.lines,
        )
        return outcome.as_result()

    async def ask_many(identity: str, a: AskManyArgs) -> dict[str, Any]:
        outcome = await handoffs.batch(
            identity,
            creds(identity, a.controller_id),
            [HandoffRequest(r.name, r.text) for r in a.requests],
            a.mode,
            a.timeout_s,
            a.lines,
        )
        return outcome.as_result()

    async def collect(identity: str, a: CollectArgs) -> dict[str, Any]:
        outcome = await handoffs.collect(
            identity, creds(identity, a.controller_id), a.receipts, a.mode, a.timeout_s, a.lines
        )
        return outcome.as_result()

    async def abandon(identity: str, a: AbandonArgs) -> dict[str, Any]:
        return receipt_info(
            await handoffs.abandon(identity, creds(identity, a.controller_id), a.receipt)
        )

    async def reviewer_start(identity: str, a: ReviewerStartArgs) -> dict[str, Any]:
        lease = await reviewers.start(
            identity,
            creds(identity, a.controller_id),
            a.name,
            a.profile,
            a.cwd,
            a.purpose,
            a.model,
            a.effort,
        )
        return pane_lease_info(lease)

    async def reviewer_close(identity: str, a: ReviewerCloseArgs) -> dict[str, Any]:
        lease = await reviewers.close(
            identity, creds(identity, a.controller_id), a.lease_id, a.expected_seq
        )
        return pane_lease_info(lease)

    return {
        "acquire": CtlCommand(AcquireArgs, acquire),
        "resume": CtlCommand(AcquireArgs, resume),
        "renew": CtlCommand(RenewArgs, renew),
        "release": CtlCommand(ReleaseArgs, release),
        "status": CtlCommand(HeldArgs, status),
        "receipts": CtlCommand(HeldArgs, receipts),
        "ask": CtlCommand(AskArgs, ask),
        "ask-many": CtlCommand(AskManyArgs, ask_many),
        "collect": CtlCommand(CollectArgs, collect),
        "abandon": CtlCommand(AbandonArgs, abandon),
        "reviewer-start": CtlCommand(ReviewerStartArgs, reviewer_start),
        "reviewer-close": CtlCommand(ReviewerCloseArgs, reviewer_close),
    }
