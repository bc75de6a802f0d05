"""The MCP front-end: the pane tools, built on the SDK's ``MCPServer``.

``build_server`` registers every tool with its input schema (from the msgspec
argument Struct, ``additionalProperties: false``), its output schema (from the
result TypedDict) and its annotations. A call is validated, authorised (scope),
run against the ``PaneService`` and, if it mutates, audited. Failures are tool
results with ``isError`` whose text is exactly ``{"code": ..., "message": ...}``.
"""

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

import msgspec
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, TextContent, ToolAnnotations

from protocol.errors import ErrorCode, PanewardenError
from protocol.messages import PaneStatusFields
from supervisor import tool_schemas as ts
from supervisor.access import Access, Caller, check_scope
from supervisor.panes import SETTLED, Pane
from supervisor.service import PaneService, WaitTarget
from supervisor.tool_schemas import CLIENT_INJECTED_ARGS

log = logging.getLogger(__name__)

PROGRESS_EVERY_S = 5.0
VERSION = "0.1.0"

INSTRUCTIONS = (
    "panewarden starts coding-agent CLIs in supervised terminal panes. Start a pane with "
    "start_pane (profile 'demo' is built in), type with send_input, wait with wait_status "
    "(pass after_seq from the last status you saw), read the screen with read_output, answer "
    "permission dialogs only with answer_dialog (allow_once or deny_once), and remove_pane "
    "when done. Errors are JSON objects with a stable 'code'."
)

Handler = Callable[[Any, Context], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its contract and the coroutine that runs it."""

    name: str
    description: str
    scope: str
    args: type[msgspec.Struct]
    result: type
    handler: Handler
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False


def error_result(code: ErrorCode, message: str) -> CallToolResult:
    """A tool error whose text is exactly the JSON error object."""
    body = json.dumps({"code": code.value, "message": message})
    return CallToolResult(content=[TextContent(type="text", text=body)], is_error=True)


def _status(name: str, s: PaneStatusFields) -> dict[str, Any]:
    return {
        "name": name,
        "lifecycle": s.lifecycle,
        "state": s.state,
        "kind": s.kind,
        "turn": s.turn,
        "seq": s.seq,
        "source": s.source,
        "exit_code": s.exit_code,
    }


def pane_info(pane: Pane) -> dict[str, Any]:
    """PaneInfo (design §7): PaneStatus plus who and where."""
    return _status(pane.name, pane.status) | {
        "profile": pane.profile,
        "agent": pane.agent,
        "cwd": pane.cwd,
        "pid": pane.pid,
        "worker_pid": pane.handle.pid,
        "started_at": datetime.fromtimestamp(pane.started_at, UTC).isoformat(),
        "lease": pane.lease,
    }


def _check_text(text: str) -> None:
    for ch in text:
        code = ord(ch)
        if (code < 0x20 and ch not in "\n\t") or 0x7F <= code <= 0x9F:
            raise PanewardenError(
                ErrorCode.INVALID_ARGUMENT,
                f"text contains control character U+{code:04X}; only newline and tab are allowed",
            )


async def _with_progress(ctx: Context, work: Awaitable[Any], timeout_s: float) -> Any:
    """Await ``work``, sending a progress notification every few seconds."""
    task = asyncio.ensure_future(work)
    started = time.monotonic()
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=PROGRESS_EVERY_S)
            if done:
                return task.result()
            elapsed = time.monotonic() - started
            await ctx.report_progress(min(elapsed, timeout_s), timeout_s, "waiting")
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def _tool_specs(service: PaneService) -> list[ToolSpec]:
    async def start_pane(a: ts.StartPaneArgs, _ctx: Context) -> dict[str, Any]:
        pane = await service.start_pane(
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
        _check_text(a.text)
        seq, turn = await service.send_input(a.name, a.text, a.submit, a.expect_turn)
        return {"seq": seq, "turn": turn}

    async def read_output(a: ts.ReadOutputArgs, _ctx: Context) -> dict[str, Any]:
        shot = await service.read_output(a.name, a.lines, a.scrollback)
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
        pane = await service.ready_pane(a.name)
        return _status(pane.name, pane.status)

    async def wait_status(a: ts.WaitStatusArgs, ctx: Context) -> dict[str, Any]:
        until = set(a.until) if a.until else SETTLED
        status, timed_out = await _with_progress(
            ctx, service.wait_status(a.name, until, a.after_seq, a.timeout_s), a.timeout_s
        )
        return {"status": _status(a.name, status), "timed_out": timed_out}

    async def wait_any(a: ts.WaitAnyArgs, ctx: Context) -> dict[str, Any]:
        names = [p.name for p in a.panes]
        if len(set(names)) != len(names):
            raise PanewardenError(ErrorCode.INVALID_ARGUMENT, "a pane is listed twice")
        until = set(a.until) if a.until else SETTLED
        targets = [WaitTarget(p.name, p.after_seq) for p in a.panes]
        first = await _with_progress(
            ctx, service.wait_any(targets, until, a.timeout_s), a.timeout_s
        )
        if first is None:
            return {"name": None, "status": None, "timed_out": True}
        name, status = first
        return {"name": name, "status": _status(name, status), "timed_out": False}

    async def wait_output(a: ts.WaitOutputArgs, ctx: Context) -> dict[str, Any]:
        match = await _with_progress(
            ctx, service.wait_output(a.name, a.pattern, a.regex, a.timeout_s), a.timeout_s
        )
        if match is None:
            return {
                "matched": False,
                "line": None,
                "seq": (await service.ready_pane(a.name)).status.seq,
            }
        return {"matched": True, "line": match.line, "seq": match.seq}

    async def list_panes(_a: ts.EmptyArgs, _ctx: Context) -> dict[str, Any]:
        return {"panes": [pane_info(p) for p in await service.ready_panes()]}

    async def interrupt_pane(a: ts.NameArgs, _ctx: Context) -> dict[str, Any]:
        return {"seq": await service.interrupt(a.name)}

    async def answer_dialog(a: ts.AnswerDialogArgs, _ctx: Context) -> dict[str, Any]:
        seq, turn = await service.answer_dialog(a.name, a.answer, a.expect_turn)
        return {"seq": seq, "turn": turn}

    async def remove_pane(a: ts.NameArgs, _ctx: Context) -> dict[str, Any]:
        exit_code, killed = await service.remove_pane(a.name)
        return {"exit_code": exit_code, "killed": killed}

    ro = {"read_only": True, "idempotent": True}
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
            **ro,
        ),
        ToolSpec(
            "get_status",
            "The pane's status: lifecycle, agent state, blocked kind, turn, seq, source.",
            "read",
            ts.NameArgs,
            ts.PaneStatusResult,
            get_status,
            **ro,
        ),
        ToolSpec(
            "wait_status",
            "Wait until the pane records a status in `until` (default: settled) with seq greater "
            "than after_seq; returns the first such record, or timed_out.",
            "read",
            ts.WaitStatusArgs,
            ts.WaitStatusResult,
            wait_status,
            **ro,
        ),
        ToolSpec(
            "wait_any",
            "Wait for the first of up to 16 panes (each with its own after_seq) to record a "
            "status in `until` (default: settled).",
            "read",
            ts.WaitAnyArgs,
            ts.WaitAnyResult,
            wait_any,
            **ro,
        ),
        ToolSpec(
            "wait_output",
            "Wait until a line on the pane's screen contains pattern (or matches it as a regular "
            "expression with regex=true).",
            "read",
            ts.WaitOutputArgs,
            ts.WaitOutputResult,
            wait_output,
            **ro,
        ),
        ToolSpec(
            "list_panes",
            "Every pane with its status, profile, agent, cwd, program pid and worker pid.",
            "read",
            ts.EmptyArgs,
            ts.ListPanesResult,
            list_panes,
            **ro,
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


def _raw_arguments(ctx: Context) -> Any:
    params = ctx.request_context.params or {}
    args = params.get("arguments") or {}
    if isinstance(args, dict) and not CLIENT_INJECTED_ARGS.isdisjoint(args):
        args = {k: v for k, v in args.items() if k not in CLIENT_INJECTED_ARGS}
    return args


def _make_tool(spec: ToolSpec, access: Access) -> Tool:
    async def call(ctx: Context) -> CallToolResult:
        caller: Caller | None = None
        pane: str | None = None
        try:
            caller = access.identify()
            check_scope(caller, spec.scope)
            try:
                args = msgspec.convert(_raw_arguments(ctx), spec.args)
            except msgspec.ValidationError as exc:
                raise PanewardenError(ErrorCode.INVALID_ARGUMENT, str(exc)) from None
            pane = getattr(args, "name", None)
            result = await spec.handler(args, ctx)
        except PanewardenError as exc:
            _audit(access, spec, caller, pane, "error", exc.code.value)
            return error_result(exc.code, exc.message)
        except Exception:
            log.exception("tool failed", extra={"tool": spec.name, "pane": pane})
            _audit(access, spec, caller, pane, "error", ErrorCode.INTERNAL.value)
            return error_result(ErrorCode.INTERNAL, "internal error; see the service log")
        _audit(access, spec, caller, pane, "ok", None)
        text = json.dumps(result)
        return CallToolResult(
            content=[TextContent(type="text", text=text)], structured_content=result
        )

    call.__annotations__ = {"ctx": Context, "return": Annotated[CallToolResult, spec.result]}
    tool = Tool.from_function(
        call,
        name=spec.name,
        description=spec.description,
        annotations=ToolAnnotations(
            read_only_hint=spec.read_only,
            destructive_hint=spec.destructive,
            idempotent_hint=spec.idempotent,
            open_world_hint=False,
        ),
        structured_output=True,
    )
    tool.parameters = ts.input_schema(spec.args)
    return tool


def _audit(
    access: Access,
    spec: ToolSpec,
    caller: Caller | None,
    pane: str | None,
    outcome: str,
    code: str | None,
) -> None:
    """Log every call (content-free, stable keys) and audit the mutating ones."""
    level = logging.DEBUG if spec.read_only and code is None else logging.INFO
    log.log(
        level,
        "tool call %s",
        outcome,
        extra={
            "client": caller.name if caller else None,
            "tool": spec.name,
            "pane": pane,
            "code": code,
        },
    )
    if spec.read_only or caller is None:
        return
    access.audit(caller, spec.name, pane, outcome, code)


def _unknown_tool_guard(names: frozenset[str]) -> Any:
    """Middleware: a call to a tool that does not exist gets the JSON error object too."""

    async def guard(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "tools/call" and ctx.request_id is not None:
            name = (ctx.params or {}).get("name")
            if isinstance(name, str) and name not in names:
                return error_result(ErrorCode.NOT_FOUND, f"no tool named {name[:64]!r}")
        return await call_next(ctx)

    return guard


def build_server(service: PaneService, access: Access, **server_kwargs: Any) -> MCPServer:
    """The MCP server for ``service``; extra keyword arguments go to ``MCPServer``."""
    tools = [_make_tool(spec, access) for spec in _tool_specs(service)]
    return MCPServer(
        "panewarden",
        version=VERSION,
        instructions=INSTRUCTIONS,
        tools=tools,
        middleware=[_unknown_tool_guard(frozenset(t.name for t in tools))],
        **server_kwargs,
    )
