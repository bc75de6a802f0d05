"""The coordination tools: controller leases and receipt-bound handoffs.

Every mutation names the caller's identity (HTTP client, ``stdio``): a lease is held by
that identity, and credentials presented by another one are refused. Fence tokens
appear only in the result of the call that created a lease. Prompt text is held to the
rule of ``send_input`` (no control characters but newline and tab): an Enter inside it
would start a second turn under one receipt.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from mcp.server.mcpserver import Context

from supervisor.control.controllers import Creds, Granted
from supervisor.control.receipts import HandoffRequest
from supervisor.control.records import ControllerLease, Receipt
from supervisor.control.service import ControlService
from supervisor.front.tools import coordination_schemas as cs
from supervisor.front.tools.pane_schemas import EmptyArgs
from supervisor.front.tools.progress_messages import turns_message
from supervisor.front.tools.tooling import ToolSpec, caller_identity, with_progress


def iso(ts: float) -> str:
    """A wall-clock time as ISO 8601 UTC."""
    return datetime.fromtimestamp(ts, UTC).isoformat()


def creds_of(a: Any) -> Creds:
    """The controller credentials a tool call passed."""
    c = a.creds
    return Creds(c.controller_id, c.lease_id, c.fence_token)


def controller_result(lease: ControllerLease, token: str | None) -> dict[str, Any]:
    """The result of a controller tool (the token only for a lease just created)."""
    return {
        "lease_id": lease.lease_id,
        "controller_id": lease.controller_id,
        "generation": lease.generation,
        "expires_at": iso(lease.expires_at),
        "fence_token": token,
    }


def _granted(granted: Granted) -> dict[str, Any]:
    return controller_result(granted.lease, granted.fence_token)


def receipt_info(receipt: Receipt) -> dict[str, Any]:
    """A receipt as lists show it: content-free."""
    return {
        "receipt": receipt.receipt_id,
        "controller_id": receipt.controller_id,
        "lease_id": receipt.lease_id,
        "lease_type": receipt.lease_type,
        "name": receipt.name,
        "state": receipt.state,
        "turn": receipt.turn,
        "cursor": receipt.cursor,
        "created_at": iso(receipt.created_at),
        "updated_at": iso(receipt.updated_at),
        "result_state": None if receipt.result is None else receipt.result.state,
        "failure_stage": receipt.failure_stage,
        "failure_code": receipt.failure_code,
    }


def controller_lease_info(lease: ControllerLease, expired: bool) -> dict[str, Any]:
    """A controller lease as lists show it (never a token)."""
    return {
        "lease_id": lease.lease_id,
        "lease_type": "controller",
        "controller_id": lease.controller_id,
        "state": "expired" if expired else lease.state,
        "generation": lease.generation,
        "holder": lease.identity,
        "name": None,
        "created_at": iso(lease.created_at),
        "expires_at": iso(lease.expires_at),
        "predecessor_lease_id": lease.predecessor_lease_id,
    }


def coordination_tool_specs(control: ControlService) -> list[ToolSpec]:
    """The controller and handoff tools, run against ``control``."""
    authority, handoffs = control.authority, control.handoffs
    registry = control.panes.registry

    def lease_info(lease: ControllerLease) -> dict[str, Any]:
        return controller_lease_info(lease, authority.expired(lease))

    async def acquire(a: cs.AcquireArgs, _ctx: Context) -> dict[str, Any]:
        return _granted(
            await authority.acquire(
                caller_identity(), a.controller_id, a.authority_ref, a.authority_sha256, a.ttl_s
            )
        )

    async def resume(a: cs.AcquireArgs, _ctx: Context) -> dict[str, Any]:
        return _granted(
            await authority.resume(
                caller_identity(), a.controller_id, a.authority_ref, a.authority_sha256, a.ttl_s
            )
        )

    async def takeover(a: cs.TakeoverArgs, _ctx: Context) -> dict[str, Any]:
        return _granted(
            await authority.takeover(
                caller_identity(),
                a.controller_id,
                a.expected_predecessor_lease_id,
                a.authority_ref,
                a.authority_sha256,
                a.ttl_s,
            )
        )

    async def renew(a: cs.RenewArgs, _ctx: Context) -> dict[str, Any]:
        lease = await authority.renew(caller_identity(), creds_of(a), a.ttl_s)
        return controller_result(lease, None)

    async def release(a: cs.ReleaseArgs, _ctx: Context) -> dict[str, Any]:
        lease = await authority.release(
            caller_identity(), creds_of(a), a.checkpoint_ref, a.checkpoint_sha256
        )
        return controller_result(lease, None)

    async def list_controllers(_a: Any, _ctx: Context) -> dict[str, Any]:
        return {"leases": [lease_info(lease) for lease in authority.leases()]}

    async def relay(a: cs.RelayArgs, _ctx: Context) -> dict[str, Any]:
        receipt = await handoffs.relay(caller_identity(), creds_of(a), a.name, a.text)
        return {"receipt": receipt}

    async def handoff(a: cs.HandoffArgs, ctx: Context) -> dict[str, Any]:
        work = handoffs.batch(
            caller_identity(),
            creds_of(a),
            [HandoffRequest(a.name, a.text)],
            "all",
            a.timeout_s,
            a.lines,
        )
        said = turns_message(registry, [a.name])
        return (await with_progress(ctx, work, a.timeout_s, said)).as_result()  # type: ignore[no-any-return]

    async def batch_handoff(a: cs.BatchHandoffArgs, ctx: Context) -> dict[str, Any]:
        requests = [HandoffRequest(r.name, r.text) for r in a.requests]
        work = handoffs.batch(
            caller_identity(), creds_of(a), requests, a.mode, a.timeout_s, a.lines
        )
        said = turns_message(registry, [r.name for r in a.requests])
        return (await with_progress(ctx, work, a.timeout_s, said)).as_result()  # type: ignore[no-any-return]

    async def collect(a: cs.CollectArgs, ctx: Context) -> dict[str, Any]:
        work = handoffs.collect(
            caller_identity(), creds_of(a), a.receipts, a.mode, a.timeout_s, a.lines
        )
        wanted = set(a.receipts)
        names = [r.name for r in handoffs.receipts() if r.receipt_id in wanted]
        said = turns_message(registry, names)
        return (await with_progress(ctx, work, a.timeout_s, said)).as_result()  # type: ignore[no-any-return]

    async def receipt_list(a: cs.ReceiptListArgs, _ctx: Context) -> dict[str, Any]:
        return {"receipts": [receipt_info(r) for r in handoffs.receipts(a.controller_id)]}

    async def abandon(a: cs.AbandonArgs, _ctx: Context) -> dict[str, Any]:
        return receipt_info(await handoffs.abandon(caller_identity(), creds_of(a), a.receipt))

    group = "coordination"
    return [
        ToolSpec(
            "controller_acquire",
            "Acquire a controller lease (generation 1, or the next after a release); returns "
            "the lease id and the fence token that every coordination mutation needs. Keep the "
            "token secret; it is shown only here.",
            "control",
            cs.AcquireArgs,
            cs.ControllerResult,
            acquire,
            group=group,
        ),
        ToolSpec(
            "controller_resume",
            "Rotate your own controller lease (same caller identity): a new lease id and fence "
            "token, generation + 1; the old credentials stop working.",
            "control",
            cs.AcquireArgs,
            cs.ControllerResult,
            resume,
            group=group,
        ),
        ToolSpec(
            "controller_takeover",
            "Take over another caller's controller lease once it has expired, naming the lease "
            "you expect to replace.",
            "control",
            cs.TakeoverArgs,
            cs.ControllerResult,
            takeover,
            group=group,
        ),
        ToolSpec(
            "controller_renew",
            "Extend your controller lease by ttl_s seconds from now.",
            "control",
            cs.RenewArgs,
            cs.ControllerResult,
            renew,
            group=group,
        ),
        ToolSpec(
            "controller_release",
            "End your controller lease's generation with a durable checkpoint reference and "
            "digest; leased panes stay.",
            "control",
            cs.ReleaseArgs,
            cs.ControllerResult,
            release,
            group=group,
        ),
        ToolSpec(
            "controller_list",
            "Every controller's current lease: holder, generation, state, expiry (never a "
            "fence token).",
            "read",
            EmptyArgs,
            cs.ControllerListResult,
            list_controllers,
            group=group,
            read_only=True,
            idempotent=True,
        ),
        ToolSpec(
            "relay",
            "Hand a prompt to a pane you lease; returns a receipt once the pane started the "
            "prompt's turn. Refused while the pane has an outstanding receipt.",
            "input",
            cs.RelayArgs,
            cs.ReceiptResult,
            relay,
            group=group,
        ),
        ToolSpec(
            "handoff",
            "relay, then wait for that turn to settle and return its status and output.",
            "input",
            cs.HandoffArgs,
            cs.HandoffResult,
            handoff,
            group=group,
        ),
        ToolSpec(
            "batch_handoff",
            "Hand up to 8 prompts to panes you lease (admitted all or none), then collect all "
            "results in request order (mode all) or the first to settle (mode first).",
            "input",
            cs.BatchHandoffArgs,
            cs.HandoffResult,
            batch_handoff,
            group=group,
        ),
        ToolSpec(
            "collect_handoffs",
            "Collect receipts: each one's turn status and output, never a later turn's.",
            "input",
            cs.CollectArgs,
            cs.HandoffResult,
            collect,
            group=group,
        ),
        ToolSpec(
            "receipt_list",
            "Receipts (of one controller) with their states; content-free.",
            "read",
            cs.ReceiptListArgs,
            cs.ReceiptListResult,
            receipt_list,
            group=group,
            read_only=True,
            idempotent=True,
        ),
        ToolSpec(
            "receipt_abandon",
            "Release an outstanding (ambiguous) receipt once its pane is seen settled.",
            "control",
            cs.AbandonArgs,
            cs.ReceiptInfo,
            abandon,
            group=group,
        ),
    ]
