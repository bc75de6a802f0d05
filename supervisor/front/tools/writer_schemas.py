"""Arguments and results of the writer-lane and verification tools.

Commits are full hexadecimal object ids (40 characters, or 64 in a SHA-256
repository), never a ref name or an abbreviation: the evidence must name exactly one
commit. Scopes are checked and normalised by :mod:`supervisor.lanes.scopes`; the schema
only bounds them.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from typing_extensions import TypedDict

from supervisor.front.tools.arguments import Args, PaneName, Timeout
from supervisor.front.tools.coordination_schemas import (
    CredsArg,
    PaneLeaseInfo,
    Purpose,
    RecordId,
    Ref,
    SeqArg,
    Sha256,
)
from supervisor.lanes.recipes import RECIPE_NAME_PATTERN

# No per-type descriptions: each type is used several times per tool, and tools/list
# size counts; the tool descriptions and docs/operations.md say what they are.
CommitId = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{40}([0-9a-f]{24})?$")]
BranchName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/+-]{0,254}$")]
Scope = Annotated[str, msgspec.Meta(min_length=1, max_length=1024)]
RecipeName = Annotated[
    str,
    msgspec.Meta(pattern=RECIPE_NAME_PATTERN, description="a recipe of .panewarden/recipes.toml"),
]
AbsolutePath = Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]


class _Creds(Args):
    creds: CredsArg


class WriterStartArgs(_Creds):
    name: PaneName
    profile: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    purpose: Purpose
    ticket_ref: Ref
    authority_ref: Ref
    authority_sha256: Sha256
    worktree: AbsolutePath
    branch: BranchName
    base_commit: CommitId
    expected_head: CommitId
    expected_status_sha256: Sha256
    owned_scopes: Annotated[list[Scope], msgspec.Meta(min_length=1, max_length=64)]
    locked_scopes: Annotated[list[Scope], msgspec.Meta(max_length=64)]
    protected_branches: Annotated[list[BranchName], msgspec.Meta(min_length=1, max_length=32)]


class WriterReleaseArgs(_Creds):
    lease_id: RecordId
    expected_seq: SeqArg
    expected_head: CommitId
    expected_status_sha256: Sha256
    checkpoint_ref: Ref
    checkpoint_sha256: Sha256


class WriterCloseArgs(_Creds):
    lease_id: RecordId
    reason: Purpose


class SnapshotArgs(Args):
    lease_id: RecordId
    expected_head: CommitId | None = None
    expected_status_sha256: Sha256 | None = None


class VerifyArgs(_Creds):
    lease_id: RecordId
    expected_worktree_sha256: Sha256
    recipe: RecipeName
    timeout_s: Timeout | None = None


class WriterLeaseInfo(PaneLeaseInfo):
    repository: str
    worktree: str
    branch: str
    base_commit: str
    head: str
    status_sha256: str
    owned_scopes: list[str]
    locked_scopes: list[str]
    protected_branches: list[str]
    ticket_ref: str
    authority_ref: str | None
    checkpoint_ref: str | None
    checkpoint_sha256: str | None
    release_head: str | None
    release_status_sha256: str | None
    imported_objects: int | None
    close_reason: str | None


class WriterLeaseListResult(TypedDict):
    leases: list[WriterLeaseInfo]


class SnapshotResult(TypedDict):
    lease_id: str
    lease_state: str
    worktree: str
    branch: str | None
    base_commit: str
    head: str
    status_sha256: str
    worktree_sha256: str
    diff_bytes: int
    untracked_files: int
    untracked_bytes: int
    pane_state: str | None


class VerificationInfo(TypedDict):
    verification_id: str
    lease_id: str
    controller_id: str
    recipe: str
    state: str
    base_commit: str
    head: str | None
    worktree_sha256: str
    started_at: str
    duration_s: float | None
    exit_code: int | None
    stdout_sha256: str | None
    stderr_sha256: str | None
    reason: str | None


class VerificationListResult(TypedDict):
    verifications: list[VerificationInfo]
