"""The plumbing every MCP tool shares: contract, validation, scope, audit, errors.

A tool is a ``ToolSpec``: its name, description, scope, argument Struct, result
TypedDict, annotations and the coroutine that runs it. ``make_tool`` turns a spec into
an SDK ``Tool`` whose input schema comes from the Struct (``additionalProperties:
false``) and whose output schema comes from the TypedDict. A call is validated,
authorised (scope), run and, if it mutates, audited (content-free). Failures are tool
results with ``isError`` whose text is exactly ``{"code": ..., "message": ...}``.
"""

import asyncio
import contextvars
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, ListToolsResult, TextContent, ToolAnnotations

from protocol.errors import ErrorCode, PanewardenError, echo
from supervisor.auth.access import Access, Caller, check_group, check_scope, visible
from supervisor.front.tools.arguments import (
    CLIENT_INJECTED_ARGS,
    check_size,
    input_schema,
    validation_message,
)

log = logging.getLogger(__name__)

# The caller of the tool call being run (set by make_tool around the handler).
_CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar(
    "panewarden_caller", default=None
)


def caller_identity() -> str:
    """The identity of the caller of the tool call being run (``http:alice``, …)."""
    caller = _CALLER.get()
    if caller is None:
        raise RuntimeError("caller_identity() outside a tool call")
    return caller.identity


PROGRESS_EVERY_S = 5.0

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
    # Which tool group lists it: "panes", "coordination" or "lanes".
    group: str = "panes"


def error_result(code: ErrorCode, message: str) -> CallToolResult:
    """A tool error whose text is exactly the JSON error object."""
    body = json.dumps({"code": code.value, "message": message})
    return CallToolResult(content=[TextContent(type="text", text=body)], is_error=True)


async def with_progress(
    ctx: Context,
    work: Awaitable[Any],
    timeout_s: float | None,
    message: str | Callable[[], str] = "waiting",
) -> Any:
    """Await ``work``, sending a progress notification every few seconds.

    ``message`` says what the call waits for (a callable is asked at each notification,
    so it can name the turn a pane is on by then); ``timeout_s`` is the total, or None
    when the call has no bound of its own to report.
    """
    task = asyncio.ensure_future(work)
    started = time.monotonic()
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=PROGRESS_EVERY_S)
            if done:
                return task.result()
            elapsed = time.monotonic() - started
            text = message() if callable(message) else message
            progress = elapsed if timeout_s is None else min(elapsed, timeout_s)
            await ctx.report_progress(progress, timeout_s, text)
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def _raw_arguments(ctx: Context) -> Any:
    params = ctx.request_context.params or {}
    args = params.get("arguments") or {}
    if isinstance(args, dict) and not CLIENT_INJECTED_ARGS.isdisjoint(args):
        args = {k: v for k, v in args.items() if k not in CLIENT_INJECTED_ARGS}
    return args


def make_tool(spec: ToolSpec, access: Access) -> Tool:
    """The SDK tool that validates, authorises, runs and audits ``spec``.

    The SDK derives the output schema from the handler's return annotation (this module
    has no ``from __future__ import annotations``, so the annotation below is the result
    type itself); the input schema is the Struct's, set on the tool's public ``parameters``.
    """
    result_type = spec.result

    async def call(ctx: Context) -> Annotated[CallToolResult, result_type]:
        caller: Caller | None = None
        pane: str | None = None
        try:
            caller = access.identify()
            check_scope(caller, spec.scope)
            check_group(caller, spec.group)
            raw = _raw_arguments(ctx)
            check_size(raw)
            try:
                args = msgspec.convert(raw, spec.args)
            except msgspec.ValidationError as exc:
                raise PanewardenError(ErrorCode.INVALID_ARGUMENT, validation_message(exc)) from None
            pane = getattr(args, "name", None)
            token = _CALLER.set(caller)
            try:
                result = await spec.handler(args, ctx)
            finally:
                _CALLER.reset(token)
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
    tool.parameters = input_schema(spec.args)
    # The output schema stays published; the SDK's check of each result against it is
    # dropped (its documented way: a schema without a model is advertised, not
    # validated). It re-validated what the handlers build: ~7 ms of a list_panes call
    # with 256 panes (py-spy). Clients validate what they get against the schema (the
    # SDK client does, so every e2e test checks each result it reads).
    tool.fn_metadata.output_model = None
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


def unknown_tool_guard(names: frozenset[str]) -> Any:
    """Middleware: a call to a tool that does not exist gets the JSON error object too."""

    async def guard(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "tools/call" and ctx.request_id is not None:
            name = (ctx.params or {}).get("name")
            if isinstance(name, str) and name not in names:
                return error_result(ErrorCode.NOT_FOUND, f"no tool named {echo(name)}")
        return await call_next(ctx)

    return guard


def without_titles(schema: Any) -> Any:
    """A JSON schema without its ``title`` annotations (pydantic adds one per property):
    the tool list every client sends to its model shrinks, the validation does not change.
    """
    if isinstance(schema, list):
        return [without_titles(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in ("properties", "$defs") and isinstance(value, dict):
            out[key] = {name: without_titles(sub) for name, sub in value.items()}
        else:
            out[key] = without_titles(value)
    return out


def tool_list_filter(specs: list[ToolSpec], access: Access) -> Any:
    """Middleware: ``tools/list`` shows only the tools the caller may call (its scopes and
    the tool groups the operator gave it), and their output schemas without the titles
    pydantic adds, which keeps the list cheap for the model."""
    allowed = {spec.name: (spec.scope, spec.group) for spec in specs}

    async def narrow(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.method != "tools/list":
            return result
        try:
            caller = access.identify()
        except PanewardenError:
            return result

        def shown(name: object) -> bool:
            return (
                not isinstance(name, str) or name not in allowed or visible(caller, *allowed[name])
            )

        # The SDK hands the result on as a model or already as its JSON-ready dict.
        if isinstance(result, ListToolsResult):
            result.tools = [tool for tool in result.tools if shown(tool.name)]
            for tool in result.tools:
                if tool.output_schema is not None:
                    tool.output_schema = without_titles(tool.output_schema)
        elif isinstance(result, dict) and isinstance(result.get("tools"), list):
            result["tools"] = [
                _untitled(tool)
                for tool in result["tools"]
                if not isinstance(tool, dict) or shown(tool.get("name"))
            ]
        return result

    return narrow


def _untitled(tool: Any) -> Any:
    """A JSON-ready tool of ``tools/list`` with its output schema's titles left out."""
    if not isinstance(tool, dict):
        return tool
    for key in ("outputSchema", "output_schema"):
        if isinstance(tool.get(key), dict):
            tool = {**tool, key: without_titles(tool[key])}
    return tool
