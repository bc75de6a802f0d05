"""The pane tools (design tool table "Panes"): start, drive, read, wait, answer, remove."""

from datetime import UTC, datetime
from typing import Any

import msgspec
from mcp.server.mcpserver import Context

from protocol.errors import ErrorCode, PanewardenError
from protocol.messages import PaneStatusFields
from protocol.status import SETTLED
from supervisor.front.tools import pane_schemas as ts
from supervisor.front.tools.tooling import ToolSpec, with_progress
from supervisor.panes.driving import WaitTarget
from supervisor.panes.pane import Pane
from supervisor.panes.service import PaneService
from supervisor.panes.usage import UsageMeter


def status_dict(name: str, s: PaneStatusFields, confined: bool) -> dict[str, Any]:
    """PaneStatus as a tool result."""
    return {
        "name": name,
        "confined": confined,
        "lifecycle": s.lifecycle,
        "state": s.state,
        "kind": s.kind,
        "turn": s.turn,
        "seq": s.seq,
        "source": s.source,
        "exit_code": s.exit_code,
    }


def reported_status(name: str, s: PaneStatusFields, confined: bool) -> dict[str, Any]:
    """PaneStatus as get_status and the waits return it: with the agent's token ``usage``
    when it reported one (ACP panes; list_panes' ``usage`` is the process tree's)."""
    body = status_dict(name, s, confined)
    if s.usage is not None:
        body["usage"] = msgspec.to_builtins(s.usage)
    return body


def network_fields(pane: Pane) -> dict[str, str]:
    """get_status' ``network`` and ``network_exposes`` of a confined pane (what an
    unconfined one reaches is the host's, as ``confined: false`` says)."""
    if not pane.confined or not pane.network:
        return {}
    return {"network": pane.network, "network_exposes": pane.network_exposes}


def _tokens(pane: Pane) -> dict[str, Any]:
    """list_panes' ``tokens``: the agent's reported token usage, when there is one."""
    usage = pane.status.usage
    return {} if usage is None else {"tokens": msgspec.to_builtins(usage)}


def pane_info(pane: Pane) -> dict[str, Any]:
    """PaneInfo (docs/design.md §7): PaneStatus plus who and where."""
    return status_dict(pane.name, pane.status, pane.confined) | {
        "profile": pane.profile,
        "agent": pane.agent,
        "cwd": pane.cwd,
        "pid": pane.pid,
        "worker_pid": pane.handle.pid,
        "started_at": datetime.fromtimestamp(pane.started_at, UTC).isoformat(),
        "lease": lease_info(pane),
    }


def lease_info(pane: Pane) -> dict[str, str] | None:
    """The lease that tags ``pane``, as a result's ``lease`` (None without one)."""
    if pane.lease is None:
        return None
    return {
        "lease_id": pane.lease.lease_id,
        "lease_type": pane.lease.lease_type,
        "controller_id": pane.lease.controller_id,
    }


def pane_tool_specs(service: PaneService) -> list[ToolSpec]:
    """The pane tools, run against ``service``."""
    # list_panes' CPU% is a delta between calls: the previous sample lives here.
    meter = UsageMeter()

    def _confined(name: str) -> bool:
        pane = service.registry.panes.get(name)
        return pane is not None and pane.confined

    async def start_pane(a: ts.StartPaneArgs, _ctx: Context) -> dict[str, Any]:
        pane = await service.lifecycle.start_pane(
            a.name,
            a.profile,
            cwd=a.cwd,
            extra_args=a.extra_args,
            argv=a.argv,
            cols=a.cols,
            rows=a.rows,
        )
        return {"pane": pane_info(pane)}

    async def send_input(a: ts.SendInputArgs, _ctx: Context) -> dict[str, Any]:
        seq, turn = await service.driver.send_input(a.name, a.text, a.submit, a.expect_turn)
        return {"seq": seq, "turn": turn}

    async def read_output(a: ts.ReadOutputArgs, _ctx: Context) -> dict[str, Any]:
        shot = await service.driver.read_output(a.name, a.lines, a.scrollback)
        return {
            "text": shot.text,
            "cursor": list(shot.cursor),
            "cols": shot.cols,
            "rows": shot.rows,
            "seq": shot.seq,
            "turn": shot.turn,
            "state": shot.state,
        }

    async def get_status(a: ts.NameArgs, _ctx: Context) -> dict[str, Any]:
        pane = await service.registry.ready(a.name)
        return reported_status(pane.name, pane.status, pane.confined) | network_fields(pane)

    async def wait_status(a: ts.WaitStatusArgs, ctx: Context) -> dict[str, Any]:
        until = set(a.until) if a.until else SETTLED
        status, timed_out = await with_progress(
            ctx, service.driver.wait_status(a.name, until, a.after_seq, a.timeout_s), a.timeout_s
        )
        return {
            "status": reported_status(a.name, status, _confined(a.name)),
            "timed_out": timed_out,
        }

    async def wait_any(a: ts.WaitAnyArgs, ctx: Context) -> dict[str, Any]:
        names = [p.name for p in a.panes]
        if len(set(names)) != len(names):
            raise PanewardenError(ErrorCode.INVALID_ARGUMENT, "a pane is listed twice")
        until = set(a.until) if a.until else SETTLED
        targets = [WaitTarget(p.name, p.after_seq) for p in a.panes]
        first = await with_progress(
            ctx, service.driver.wait_any(targets, until, a.timeout_s), a.timeout_s
        )
        if first is None:
            return {"name": None, "status": None, "timed_out": True}
        name, status = first
        return {
            "name": name,
            "status": reported_status(name, status, _confined(name)),
            "timed_out": False,
        }

    async def wait_output(a: ts.WaitOutputArgs, ctx: Context) -> dict[str, Any]:
        match = await with_progress(
            ctx, service.driver.wait_output(a.name, a.pattern, a.regex, a.timeout_s), a.timeout_s
        )
        if match is None:
            return {
                "matched": False,
                "line": None,
                "seq": (await service.registry.ready(a.name)).status.seq,
            }
        return {"matched": True, "line": match.line, "seq": match.seq}

    async def list_panes(_a: ts.EmptyArgs, _ctx: Context) -> dict[str, Any]:
        panes = await service.registry.ready_all()
        meter.forget_except({p.name for p in panes})
        return {
            "panes": [
                pane_info(p) | {"usage": meter.measure(p.name, p.handle.pid)} | _tokens(p)
                for p in panes
            ]
        }

    async def interrupt_pane(a: ts.NameArgs, _ctx: Context) -> dict[str, Any]:
        return {"seq": await service.driver.interrupt(a.name)}

    async def answer_dialog(a: ts.AnswerDialogArgs, _ctx: Context) -> dict[str, Any]:
        seq, turn = await service.driver.answer_dialog(a.name, a.answer, a.expect_turn)
        return {"seq": seq, "turn": turn}

    async def remove_pane(a: ts.NameArgs, _ctx: Context) -> dict[str, Any]:
        exit_code, killed = await service.lifecycle.remove_pane(a.name)
        return {"exit_code": exit_code, "killed": killed}

    return [
        ToolSpec(
            "start_pane",
            "Start a pane running a launch profile's program (optionally in cwd, with allowed "
            "extra_args, or a caller argv when the operator allows arbitrary commands).",
            "lifecycle",
            ts.StartPaneArgs,
            ts.StartPaneResult,
            start_pane,
        ),
        ToolSpec(
            "send_input",
            "Type text into a pane and, with submit=true, press Enter separately. Refused with "
            "pane_blocked while the pane waits on a dialog; control characters are refused.",
            "input",
            ts.SendInputArgs,
            ts.SeqTurnResult,
            send_input,
        ),
        ToolSpec(
            "read_output",
            "Read the pane's screen as plain text (no escape sequences); lines keeps the last N "
            "lines; scrollback includes earlier output.",
            "read",
            ts.ReadOutputArgs,
            ts.ReadOutputResult,
            read_output,
            read_only=True,
            idempotent=True,
        ),
        ToolSpec(
            "get_status",
            "The pane's status: lifecycle, agent state, blocked kind, turn, seq, source, and "
            "whether its program is confined (and, confined, its network and what it reaches).",
            "read",
            ts.NameArgs,
            ts.GetStatusResult,
            get_status,
            read_only=True,
            idempotent=True,
        ),
        ToolSpec(
            "wait_status",
            "Wait until the pane records a status in `until` (default: settled) with seq greater "
            "than after_seq; returns the first such record, or timed_out.",
            "read",
            ts.WaitStatusArgs,
            ts.WaitStatusResult,
            wait_status,
            read_only=True,
            idempotent=True,
        ),
        ToolSpec(
            "wait_any",
            "Wait for the first of up to 16 panes (each with its own after_seq) to record a "
            "status in `until` (default: settled).",
            "read",
            ts.WaitAnyArgs,
            ts.WaitAnyResult,
            wait_any,
            read_only=True,
            idempotent=True,
        ),
        ToolSpec(
            "wait_output",
            "Wait until a line on the pane's screen contains pattern (or matches it as a regular "
            "expression with regex=true).",
            "read",
            ts.WaitOutputArgs,
            ts.WaitOutputResult,
            wait_output,
            read_only=True,
            idempotent=True,
        ),
        ToolSpec(
            "list_panes",
            "Every pane with its status, profile, agent, cwd, program pid, worker pid and the "
            "CPU and memory of its process tree.",
            "read",
            ts.EmptyArgs,
            ts.ListPanesResult,
            list_panes,
            read_only=True,
            idempotent=True,
        ),
        ToolSpec(
            "interrupt_pane",
            "Send Ctrl-C to the pane's terminal.",
            "input",
            ts.NameArgs,
            ts.SeqResult,
            interrupt_pane,
            destructive=True,
        ),
        ToolSpec(
            "answer_dialog",
            "Answer the permission dialog the pane is blocked on with allow_once or deny_once. "
            "Rule-creating options are never selected; an unrecognised dialog gets no key.",
            "dialog",
            ts.AnswerDialogArgs,
            ts.SeqTurnResult,
            answer_dialog,
        ),
        ToolSpec(
            "remove_pane",
            "Stop the pane's program and every process it started, then forget the pane.",
            "lifecycle",
            ts.NameArgs,
            ts.RemovePaneResult,
            remove_pane,
            destructive=True,
        ),
    ]
