"""Arguments and results of the coordination and lane tools.

Every mutation takes ``creds``: an object ``{controller_id, lease_id, fence_token}`` —
what ``controller_acquire`` returned. A tool that names a pane lease takes it as its own
``lease_id`` beside ``creds``. Results never contain a fence token except the one a
lease-creating call returns to its caller.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from typing_extensions import TypedDict

from supervisor.front.tools.arguments import (
    DEFAULT_TIMEOUT_S,
    MAX_TEXT_BYTES,
    Args,
    PaneName,
    Timeout,
)
from supervisor.front.tools.pane_schemas import SettledStatusResult

ControllerId = Annotated[
    str,
    msgspec.Meta(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
        description="the controller's stable name (one active lease per controller)",
    ),
]
RecordId = Annotated[str, msgspec.Meta(pattern=r"^[a-z]{3}-[0-9a-f]{32}$", max_length=36)]
FenceToken = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
Ref = Annotated[
    str,
    msgspec.Meta(
        min_length=1, max_length=512, description="a durable reference (issue, doc, commit)"
    ),
]
Sha256 = Annotated[
    str, msgspec.Meta(pattern=r"^[0-9a-f]{64}$", description="lowercase hex SHA-256")
]
# Validated against PANEWARDEN_LEASE_TTL_MIN_S (60 unless lowered for tests) at run time.
TtlS = Annotated[
    int,
    msgspec.Meta(
        ge=1,
        le=1800,
        extra_json_schema={"minimum": 60},
        description="lease lifetime in seconds, 60..1800 (default 900)",
    ),
]
Lines = Annotated[int, msgspec.Meta(ge=1, le=10000, description="last N lines of output")]
Mode = Literal["all", "first"]


class CredsArg(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A controller lease's credentials."""

    controller_id: ControllerId
    lease_id: RecordId
    fence_token: FenceToken


class _Creds(Args):
    creds: CredsArg


class AcquireArgs(Args):
    controller_id: ControllerId
    authority_ref: Ref
    authority_sha256: Sha256
    ttl_s: TtlS | None = None


class TakeoverArgs(Args):
    controller_id: ControllerId
    expected_predecessor_lease_id: RecordId
    authority_ref: Ref
    authority_sha256: Sha256
    ttl_s: TtlS | None = None


class RenewArgs(_Creds):
    ttl_s: TtlS | None = None


class ReleaseArgs(_Creds):
    checkpoint_ref: Ref
    checkpoint_sha256: Sha256


class RelayArgs(_Creds):
    name: PaneName
    text: Annotated[str, msgspec.Meta(max_length=MAX_TEXT_BYTES)]


class HandoffArgs(RelayArgs):
    timeout_s: Timeout = DEFAULT_TIMEOUT_S
    lines: Lines | None = None


class HandoffItem(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    name: PaneName
    text: Annotated[str, msgspec.Meta(max_length=MAX_TEXT_BYTES)]


class BatchHandoffArgs(_Creds):
    requests: Annotated[list[HandoffItem], msgspec.Meta(min_length=1, max_length=8)]
    mode: Mode
    timeout_s: Timeout = DEFAULT_TIMEOUT_S
    lines: Lines | None = None


class CollectArgs(_Creds):
    receipts: Annotated[list[RecordId], msgspec.Meta(min_length=1, max_length=8)]
    mode: Mode = "all"
    timeout_s: Timeout = DEFAULT_TIMEOUT_S
    lines: Lines | None = None


class ReceiptListArgs(Args):
    controller_id: ControllerId | None = None


class AbandonArgs(_Creds):
    receipt: RecordId


# ---------------------------------------------------------------- results


class ControllerResult(TypedDict):
    lease_id: str
    controller_id: str
    generation: int
    expires_at: str
    fence_token: str | None


class ControllerLeaseInfo(TypedDict):
    lease_id: str
    lease_type: Literal["controller"]
    controller_id: str
    state: Literal["active", "expired", "released", "superseded"]
    generation: int
    holder: str
    name: str | None
    created_at: str
    expires_at: str
    predecessor_lease_id: str | None


class ControllerListResult(TypedDict):
    leases: list[ControllerLeaseInfo]


class ReceiptResult(TypedDict):
    receipt: str


class CompletedItem(TypedDict):
    receipt: str
    name: str
    status: SettledStatusResult
    output: str | None
    # "turn": the output of exactly this turn; "newest": no mark of the turn was left
    # (the newest lines, earlier turns' text may be among them); null with no output.
    cut: Literal["turn", "newest"] | None


class FailedItem(TypedDict):
    receipt: str
    name: str
    stage: str
    code: str


class HandoffResult(TypedDict):
    completed: list[CompletedItem]
    failed: list[FailedItem]
    pending: list[str]


class ReceiptInfo(TypedDict):
    receipt: str
    controller_id: str
    lease_id: str
    lease_type: str
    name: str
    state: Literal["reserved", "pending", "completed", "failed", "abandoned"]
    turn: int | None
    cursor: int | None
    created_at: str
    updated_at: str
    result_state: str | None
    failure_stage: str | None
    failure_code: str | None


class ReceiptListResult(TypedDict):
    receipts: list[ReceiptInfo]


# ---------------------------------------------------------------- lanes and inventory

Purpose = Annotated[str, msgspec.Meta(min_length=1, max_length=512)]
Word = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")]
SeqArg = Annotated[int, msgspec.Meta(ge=0, le=2**53 - 1)]
LeaseType = Literal["reviewer", "writer", "adopted"]


class ReviewerStartArgs(_Creds):
    name: PaneName
    profile: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    cwd: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]
    purpose: Purpose
    model: Word | None = None
    effort: Word | None = None


class LeaseCloseArgs(_Creds):
    lease_id: RecordId
    expected_seq: SeqArg


class CleanupArgs(_Creds):
    dry_run: bool = True


class AdoptArgs(_Creds):
    name: PaneName
    expected_seq: SeqArg
    authority_ref: Ref
    authority_sha256: Sha256


class AdoptedCloseArgs(LeaseCloseArgs):
    checkpoint_ref: Ref
    checkpoint_sha256: Sha256


class ReconcileArgs(_Creds):
    lease_type: LeaseType
    lease_id: RecordId
    dry_run: bool = True


class PaneLeaseInfo(TypedDict):
    lease_id: str
    lease_type: LeaseType
    state: str
    name: str
    controller_id: str
    purpose: str
    profile: str | None
    created_at: str
    updated_at: str
    closed_seq: int | None
    capture_sha256: str | None
    failure: str | None


class PaneLeaseListResult(TypedDict):
    leases: list[PaneLeaseInfo]


class PreservedItem(TypedDict):
    lease_id: str
    reason: str


class CleanupResult(TypedDict):
    dry_run: bool
    closed: list[str]
    preserved: list[PreservedItem]


class InventoryItem(TypedDict):
    name: str
    status: Literal["unleased", "matched", "drifted", "missing"]
    lease_id: str | None
    lease_type: str | None
    controller_id: str | None
    lease_state: str | None
    lifecycle: str | None


class InventoryResult(TypedDict):
    panes: list[InventoryItem]


class ReconcileResult(TypedDict):
    lease_id: str
    action: Literal["none", "preserved", "would_terminalise", "terminalised"]
    state: str


class StoreState(TypedDict):
    lock: Literal["absent", "active", "stale", "indeterminate"]
    quarantined: int


class LeaseChangeInfo(TypedDict):
    lease_id: str
    lease_type: str
    name: str
    previous: str
    state: str
    reason: str


class StartupInfo(TypedDict):
    """The start-up reconciliation of retained leases with the re-adopted panes."""

    at: float
    panes: int
    matched: int
    changed: list[LeaseChangeInfo]
    kept: list[LeaseChangeInfo]


class NotifyTargetFigures(TypedDict):
    kind: Literal["webhook", "command"]
    target: str
    events: list[str]
    sent: int
    failed: int
    dropped: int
    timeouts: int
    queued: int


class NotificationFigures(TypedDict):
    targets: int
    sent: int
    failed: int
    dropped: int
    timeouts: int
    queued: int
    by_target: list[NotifyTargetFigures]


class ServiceStatusResult(TypedDict):
    version: str
    capabilities: list[str]
    panes: int
    leased_panes: int
    stores: dict[str, StoreState]
    startup: StartupInfo | None
    notifications: NotificationFigures | None
