"""The writer-lane and verification tools (tool group ``lanes``)."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context

from supervisor.control.records import PaneLease
from supervisor.control.stores import VerificationRecord
from supervisor.front.tools import writer_schemas as ws
from supervisor.front.tools.coordination_tools import creds_of, iso
from supervisor.front.tools.lane_tools import pane_lease_info
from supervisor.front.tools.pane_schemas import EmptyArgs
from supervisor.front.tools.tooling import ToolSpec, caller_identity, with_progress
from supervisor.lanes.recipes import DEFAULT_RECIPE_TIMEOUT_S
from supervisor.lanes.service import LaneService
from supervisor.lanes.verification import VerifyRequest
from supervisor.lanes.writer import ReleaseRequest, WriterRequest


def writer_lease_info(lease: PaneLease) -> dict[str, Any]:
    """A writer lease as lists show it: evidence and scopes, no content."""
    info = pane_lease_info(lease)
    terms = lease.writer
    assert terms is not None
    info.update(
        repository=terms.repository,
        worktree=terms.worktree,
        branch=terms.branch,
        base_commit=terms.base_commit,
        head=terms.head,
        status_sha256=terms.status_sha256,
        owned_scopes=terms.owned_scopes,
        locked_scopes=terms.locked_scopes,
        protected_branches=terms.protected_branches,
        ticket_ref=terms.ticket_ref,
        authority_ref=lease.authority_ref,
        checkpoint_ref=lease.checkpoint_ref,
        checkpoint_sha256=lease.checkpoint_sha256,
        release_head=terms.release_head,
        release_status_sha256=terms.release_status_sha256,
        imported_objects=terms.imported_objects,
        close_reason=terms.close_reason,
    )
    return info


def verification_info(record: VerificationRecord) -> dict[str, Any]:
    """A verification record (content-free)."""
    return {
        "verification_id": record.verification_id,
        "lease_id": record.lease_id,
        "controller_id": record.controller_id,
        "recipe": record.recipe,
        "state": record.state,
        "base_commit": record.base_commit,
        "head": record.head,
        "worktree_sha256": record.worktree_sha256,
        "started_at": iso(record.started_at),
        "duration_s": record.duration_s,
        "exit_code": record.exit_code,
        "stdout_sha256": record.stdout_sha256,
        "stderr_sha256": record.stderr_sha256,
        "reason": record.reason,
    }


def writer_tool_specs(lanes: LaneService) -> list[ToolSpec]:
    """writer_start/list/release/close and verification_snapshot/verify/list."""
    writers, verifications = lanes.writers, lanes.verifications

    async def writer_start(a: ws.WriterStartArgs, _ctx: Context) -> dict[str, Any]:
        request = WriterRequest(
            name=a.name,
            profile=a.profile,
            purpose=a.purpose,
            ticket_ref=a.ticket_ref,
            authority_ref=a.authority_ref,
            authority_sha256=a.authority_sha256,
            worktree=a.worktree,
            branch=a.branch,
            base_commit=a.base_commit,
            expected_head=a.expected_head,
            expected_status_sha256=a.expected_status_sha256,
            owned_scopes=a.owned_scopes,
            locked_scopes=a.locked_scopes,
            protected_branches=a.protected_branches,
        )
        return writer_lease_info(await writers.start(caller_identity(), creds_of(a), request))

    async def writer_list(_a: EmptyArgs, _ctx: Context) -> dict[str, Any]:
        return {"leases": [writer_lease_info(lease) for lease in writers.leases()]}

    async def writer_release(a: ws.WriterReleaseArgs, ctx: Context) -> dict[str, Any]:
        request = ReleaseRequest(
            lease_id=a.lease_id,
            expected_seq=a.expected_seq,
            expected_head=a.expected_head,
            expected_status_sha256=a.expected_status_sha256,
            checkpoint_ref=a.checkpoint_ref,
            checkpoint_sha256=a.checkpoint_sha256,
        )
        work = writers.release(caller_identity(), creds_of(a), request)
        # No bound of its own: Git's evidence, then the pane's stop, each bounded inside.
        said = f"waiting for writer lease {a.lease_id} to release (Git evidence, pane stop)"
        return writer_lease_info(await with_progress(ctx, work, None, said))

    async def writer_close(a: ws.WriterCloseArgs, _ctx: Context) -> dict[str, Any]:
        lease = await writers.close(caller_identity(), creds_of(a), a.lease_id, a.reason)
        return writer_lease_info(lease)

    async def verification_snapshot(a: ws.SnapshotArgs, _ctx: Context) -> dict[str, Any]:
        return await verifications.snapshot(a.lease_id, a.expected_head, a.expected_status_sha256)

    async def verify(a: ws.VerifyArgs, ctx: Context) -> dict[str, Any]:
        request = VerifyRequest(a.lease_id, a.expected_worktree_sha256, a.recipe, a.timeout_s)
        work = verifications.verify(caller_identity(), creds_of(a), request)
        said = f"waiting for recipe {a.recipe!r} to finish on writer lease {a.lease_id}"
        record = await with_progress(ctx, work, a.timeout_s or DEFAULT_RECIPE_TIMEOUT_S, said)
        return verification_info(record)

    async def verification_list(_a: EmptyArgs, _ctx: Context) -> dict[str, Any]:
        return {"verifications": [verification_info(r) for r in verifications.records()]}

    group = "lanes"
    return [
        ToolSpec(
            "writer_start",
            "Start a writer pane in a linked Git worktree under your controller lease, on "
            "exact Git evidence (branch, HEAD, base ancestry, status SHA-256) and literal "
            "owned/locked path scopes no other retained writer of the repository holds.",
            "lifecycle",
            ws.WriterStartArgs,
            ws.WriterLeaseInfo,
            writer_start,
            group=group,
        ),
        ToolSpec(
            "writer_list",
            "Every writer lease with its Git evidence, scopes and state (content-free).",
            "read",
            EmptyArgs,
            ws.WriterLeaseListResult,
            writer_list,
            group=group,
            read_only=True,
            idempotent=True,
        ),
        ToolSpec(
            "writer_release",
            "Release a writer lane: re-check HEAD and the status SHA-256 and re-hash its new "
            "objects, then capture and close its pane at expected_seq, recording your "
            "checkpoint, and import those objects into the repository's shared store. The "
            "worktree and branch are left exactly as they are.",
            "lifecycle",
            ws.WriterReleaseArgs,
            ws.WriterLeaseInfo,
            writer_release,
            group=group,
            destructive=True,
        ),
        ToolSpec(
            "writer_close",
            "End a writer lane by force when it cannot be released (its Git evidence "
            "unreadable, its release failed): kill its pane whatever it is doing and record "
            "the lease abandoned with your reason. Nothing is checked or imported; the "
            "branch and worktree are left as they are.",
            "lifecycle",
            ws.WriterCloseArgs,
            ws.WriterLeaseInfo,
            writer_close,
            group=group,
            destructive=True,
        ),
        ToolSpec(
            "verification_snapshot",
            "A writer lane's Git evidence and worktree_sha256 (diff from the base plus "
            "untracked files), read without running repository code.",
            "read",
            ws.SnapshotArgs,
            ws.SnapshotResult,
            verification_snapshot,
            group=group,
            read_only=True,
            idempotent=True,
        ),
        ToolSpec(
            "verify",
            "Run a recipe named in the repository's .panewarden/recipes.toml at the lane's "
            "base commit, in a Bubblewrap sandbox without network, if the worktree still "
            "has expected_worktree_sha256; returns the content-free run record.",
            "lifecycle",
            ws.VerifyArgs,
            ws.VerificationInfo,
            verify,
            group=group,
        ),
        ToolSpec(
            "verification_list",
            "Every verification record: state, exit status, duration, output digests.",
            "read",
            EmptyArgs,
            ws.VerificationListResult,
            verification_list,
            group=group,
            read_only=True,
            idempotent=True,
        ),
    ]
