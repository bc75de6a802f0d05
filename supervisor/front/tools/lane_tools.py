"""The lane tools (reviewer lanes, adopted panes) and the lease inventory, reconcile and
service status tools."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver import Context

from supervisor.control.records import PaneLease
from supervisor.control.service import ControlService
from supervisor.front.tools import coordination_schemas as cs
from supervisor.front.tools.coordination_tools import creds_of, iso
from supervisor.front.tools.pane_schemas import EmptyArgs
from supervisor.front.tools.tooling import ToolSpec, caller_identity
from supervisor.lanes.service import LaneService
from supervisor.version import __version__

CAPABILITIES = [
    "panes",
    "controller_leases",
    "receipts",
    "reviewer_lanes",
    "adopted_panes",
    "lease_inventory",
    "writer_lanes",
    "verification",
]


def pane_lease_info(lease: PaneLease) -> dict[str, Any]:
    """A pane lease as lists show it: content-free."""
    return {
        "lease_id": lease.lease_id,
        "lease_type": lease.lease_type,
        "state": lease.state,
        "name": lease.name,
        "controller_id": lease.controller_id,
        "purpose": lease.purpose,
        "profile": lease.profile,
        "created_at": iso(lease.created_at),
        "updated_at": iso(lease.updated_at),
        "closed_seq": lease.closed_seq,
        "capture_sha256": lease.capture_sha256,
        "failure": lease.failure,
        "confined": lease.confined,
    }


def lane_tool_specs(
    control: ControlService,
    lanes: LaneService,
    notifications: Callable[[], dict[str, Any]] | None = None,
) -> list[ToolSpec]:
    """Reviewer and adopted-pane tools, the inventory and the service status
    (``notifications``: the notifier's figures)."""
    reviewers, adopted, inventory = lanes.reviewers, lanes.adopted, control.inventory

    async def reviewer_start(a: cs.ReviewerStartArgs, _ctx: Context) -> dict[str, Any]:
        lease = await reviewers.start(
            caller_identity(),
            creds_of(a),
            a.name,
            a.profile,
            a.cwd,
            a.purpose,
            a.model,
            a.effort,
        )
        return pane_lease_info(lease)

    async def reviewer_list(_a: EmptyArgs, _ctx: Context) -> dict[str, Any]:
        return {"leases": [pane_lease_info(lease) for lease in reviewers.leases()]}

    async def reviewer_close(a: cs.LeaseCloseArgs, _ctx: Context) -> dict[str, Any]:
        lease = await reviewers.close(caller_identity(), creds_of(a), a.lease_id, a.expected_seq)
        return pane_lease_info(lease)

    async def reviewer_cleanup(a: cs.CleanupArgs, _ctx: Context) -> dict[str, Any]:
        report = await reviewers.cleanup(caller_identity(), creds_of(a), a.dry_run)
        return report.as_result()

    async def pane_adopt(a: cs.AdoptArgs, _ctx: Context) -> dict[str, Any]:
        lease = await adopted.adopt(
            caller_identity(),
            creds_of(a),
            a.name,
            a.expected_seq,
            a.authority_ref,
            a.authority_sha256,
        )
        return pane_lease_info(lease)

    async def adopted_list(_a: EmptyArgs, _ctx: Context) -> dict[str, Any]:
        return {"leases": [pane_lease_info(lease) for lease in adopted.leases()]}

    async def adopted_close(a: cs.AdoptedCloseArgs, _ctx: Context) -> dict[str, Any]:
        lease = await adopted.close(
            caller_identity(),
            creds_of(a),
            a.lease_id,
            a.expected_seq,
            a.checkpoint_ref,
            a.checkpoint_sha256,
        )
        return pane_lease_info(lease)

    async def lease_inventory(_a: EmptyArgs, _ctx: Context) -> dict[str, Any]:
        return {"panes": inventory.inventory()}

    async def lease_reconcile(a: cs.ReconcileArgs, _ctx: Context) -> dict[str, Any]:
        return await inventory.reconcile(
            caller_identity(), creds_of(a), a.lease_type, a.lease_id, a.dry_run
        )

    async def service_status(_a: EmptyArgs, _ctx: Context) -> dict[str, Any]:
        panes = control.panes.registry.running()
        return {
            "version": __version__,
            "capabilities": CAPABILITIES,
            "panes": len(panes),
            "leased_panes": sum(1 for p in panes if p.lease is not None),
            "stores": control.store_report(),
            "startup": None if control.startup is None else control.startup.as_result(),
            "notifications": None if notifications is None else notifications(),
        }

    lanes_group, coordination = "lanes", "coordination"
    return [
        ToolSpec(
            "reviewer_start",
            "Start a reviewer pane from a profile under your controller lease; it takes "
            "prompts only through relay/handoff and closes with reviewer_close.",
            "lifecycle",
            cs.ReviewerStartArgs,
            cs.PaneLeaseInfo,
            reviewer_start,
            group=lanes_group,
        ),
        ToolSpec(
            "reviewer_list",
            "Every reviewer lease with its state (content-free).",
            "read",
            EmptyArgs,
            cs.PaneLeaseListResult,
            reviewer_list,
            group=lanes_group,
            read_only=True,
            idempotent=True,
        ),
        ToolSpec(
            "reviewer_close",
            "Capture a reviewer pane's output and close it in one step, only if the pane is "
            "still at expected_seq and idle or done; records the capture's SHA-256.",
            "lifecycle",
            cs.LeaseCloseArgs,
            cs.PaneLeaseInfo,
            reviewer_close,
            group=lanes_group,
            destructive=True,
        ),
        ToolSpec(
            "reviewer_cleanup",
            "Close every settled reviewer pane of your controller (dry run by default); "
            "working, blocked or mismatched panes are kept, with the reason.",
            "lifecycle",
            cs.CleanupArgs,
            cs.CleanupResult,
            reviewer_cleanup,
            group=lanes_group,
            destructive=True,
        ),
        ToolSpec(
            "pane_adopt",
            "Take a cleanup-only lease on an unleased, settled pane at expected_seq (never "
            "your own pane).",
            "admin",
            cs.AdoptArgs,
            cs.PaneLeaseInfo,
            pane_adopt,
            group=lanes_group,
        ),
        ToolSpec(
            "adopted_list",
            "Every adopted-pane lease (content-free).",
            "read",
            EmptyArgs,
            cs.PaneLeaseListResult,
            adopted_list,
            group=lanes_group,
            read_only=True,
            idempotent=True,
        ),
        ToolSpec(
            "adopted_close",
            "Capture and close an adopted pane at expected_seq, with a durable checkpoint.",
            "admin",
            cs.AdoptedCloseArgs,
            cs.PaneLeaseInfo,
            adopted_close,
            group=lanes_group,
            destructive=True,
        ),
        ToolSpec(
            "lease_inventory",
            "Every live pane as unleased, matched or drifted, and every retained lease whose "
            "pane is gone as missing.",
            "read",
            EmptyArgs,
            cs.InventoryResult,
            lease_inventory,
            group=coordination,
            read_only=True,
            idempotent=True,
        ),
        ToolSpec(
            "lease_reconcile",
            "Terminalise one of your leases whose pane is confirmed gone (dry run by "
            "default); a lease whose pane lives is preserved.",
            "admin",
            cs.ReconcileArgs,
            cs.ReconcileResult,
            lease_reconcile,
            group=coordination,
        ),
        ToolSpec(
            "service_status",
            "Version, capabilities, pane counts, each store's lock state "
            "(absent, active, stale, indeterminate) and what the start-up reconciliation "
            "of retained leases with the re-adopted panes did, and the notifications' figures "
            "(targets, sent, failed, dropped, timeouts, queued).",
            "read",
            EmptyArgs,
            cs.ServiceStatusResult,
            service_status,
            group=coordination,
            read_only=True,
            idempotent=True,
        ),
    ]
