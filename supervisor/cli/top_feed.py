"""The panes of one service for ``panewarden top``, over MCP with the SDK client.

A ``Feed`` lists the panes (``list_panes``: status, lease, usage) and then waits for the
next change with ``wait_any`` over every pane, from each pane's last ``seq`` on, for at
most ``REFRESH_S``: the screen follows events as they happen, and CPU/memory (which
only the service can measure) are refreshed at that slow period. No busy polling.

What a service answers is data: each field is kept only with the type it should have
(else it shows ``-``), every string is cleaned by ``terminal_safe`` and cut to
``FIELD_CHARS``, and each answer is read to ``capped_http.MAX_BODY_BYTES`` at most. A
failure, whatever it is (an exception group of the SDK's included), is one error row
naming its cause in one clean line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent

from protocol.errors import ErrorCode, PanewardenError
from protocol.terminal_text import terminal_safe
from supervisor.auth.clients import read_token_file
from supervisor.cli.capped_http import IDENTITY, CappedTransport
from supervisor.cli.top_targets import Target
from supervisor.front.transports.http_client import connection_failure

REFRESH_S = 5.0
RETRY_S = 5.0
CONNECT_TIMEOUT_S = 5.0
CALL_TIMEOUT_S = 15.0
# wait_any takes at most 16 panes a call; more panes wait in several calls at once.
WAIT_ANY_MAX = 16
# How much of one field, or of a failure's reason, is shown.
FIELD_CHARS = 120
REASON_CHARS = 300
EVERY_STATE = [
    "unknown",
    "idle",
    "working",
    "blocked",
    "done",
    "error",
    "cancelled",
    "exited",
    "lost",
]


def _text(value: Any) -> str | None:
    return terminal_safe(value)[:FIELD_CHARS] if isinstance(value, str) else None


def _number(value: Any) -> int | float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def pane_row(service: str, pane: dict[str, Any]) -> dict[str, Any]:
    """One pane as ``top`` shows it (and ``--once --json`` prints it); a field of the
    wrong type is None."""
    lease = _dict(pane.get("lease"))
    usage = _dict(pane.get("usage"))
    started = _text(pane.get("started_at"))
    age_s: int | None = None
    if started is not None:
        with contextlib.suppress(ValueError, OverflowError, OSError):
            age_s = max(0, int(datetime.now().astimezone().timestamp() - _epoch(started)))
    confined = pane.get("confined")
    return {
        "service": terminal_safe(service),
        "name": _text(pane.get("name")),
        "profile": _text(pane.get("profile")),
        "agent": _text(pane.get("agent")),
        "lifecycle": _text(pane.get("lifecycle")),
        "state": _text(pane.get("state")),
        "kind": _text(pane.get("kind")),
        "turn": _number(pane.get("turn")),
        "seq": _number(pane.get("seq")),
        "started_at": started,
        "age_s": age_s,
        "lease": _text(lease.get("lease_type")),
        "confined": confined if isinstance(confined, bool) else None,
        "worker_pid": _number(pane.get("worker_pid")),
        "pid": _number(pane.get("pid")),
        "cpu_percent": _number(usage.get("cpu_percent")),
        "rss_bytes": _number(usage.get("rss_bytes")),
        "processes": _number(usage.get("processes")),
        # The agent's own count (ACP panes whose agent reports it), else None.
        "tokens": _number(_dict(pane.get("tokens")).get("total_tokens")),
    }


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def error_row(target: Target, reason: str) -> dict[str, Any]:
    """A service that did not answer, as one row."""
    return {
        "service": terminal_safe(target.name),
        "url": terminal_safe(target.url),
        "error": terminal_safe(reason)[:REASON_CHARS],
    }


def root_cause(exc: BaseException) -> BaseException:
    """The first exception an exception group (the SDK's task groups) holds, unwrapped."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def failure_reason(exc: BaseException) -> str:
    """One clean line saying why a call to a service failed."""
    cause = root_cause(exc)
    if isinstance(cause, PanewardenError):
        reason = cause.message
    else:
        reason = connection_failure(exc) or f"{type(cause).__name__}: {cause}"
    return terminal_safe(reason)[:REASON_CHARS]


def _tool_error(result: CallToolResult) -> str:
    text = next((c.text for c in result.content if isinstance(c, TextContent)), "")
    try:
        body = json.loads(text)
        return terminal_safe(f"{body['code']}: {body['message']}")[:REASON_CHARS]
    except (ValueError, KeyError, TypeError):
        return terminal_safe(text)[:REASON_CHARS]


@contextlib.asynccontextmanager
async def connect(target: Target) -> AsyncIterator[Client]:
    """An SDK client of ``target`` with its token."""
    if target.token_file is None:
        raise PanewardenError(
            ErrorCode.CONFIG_INVALID, "PANEWARDEN_TOKEN_FILE is needed to call the service"
        )
    token = read_token_file(target.token_file)
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}", **IDENTITY},
        timeout=httpx2.Timeout(CONNECT_TIMEOUT_S, read=REFRESH_S + CALL_TIMEOUT_S),
        # An HTTP(S)_PROXY from the environment must never see the token.
        trust_env=False,
        transport=CappedTransport(),
    )
    async with http, Client(streamable_http_client(target.url, http_client=http)) as client:
        yield client


async def list_panes(client: Client) -> list[dict[str, Any]]:
    """``list_panes``' panes; a tool error is a ``PanewardenError``."""
    result = await client.call_tool("list_panes", {}, read_timeout_seconds=CALL_TIMEOUT_S)
    if result.is_error:
        raise PanewardenError(ErrorCode.INTERNAL, f"list_panes failed: {_tool_error(result)}")
    panes = _dict(result.structured_content).get("panes", [])
    if not isinstance(panes, list):
        raise PanewardenError(ErrorCode.INTERNAL, "list_panes answered no list of panes")
    return [p for p in panes if isinstance(p, dict)]


async def fetch_once(target: Target) -> list[dict[str, Any]]:
    """The rows of ``target`` now: its panes, or one error row."""
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_S + CALL_TIMEOUT_S):
            async with connect(target) as client:
                panes = await list_panes(client)
            return [pane_row(target.name, p) for p in panes]
    except Exception as exc:
        return [error_row(target, failure_reason(exc))]


async def _wait_any(client: Client, chunk: list[dict[str, Any]], timeout_s: float) -> None:
    targets = [{"name": p["name"], "after_seq": p["seq"]} for p in chunk]
    # A tool error (a pane removed meanwhile) is a change too: the caller lists again.
    await client.call_tool(
        "wait_any",
        {"panes": targets, "until": EVERY_STATE, "timeout_s": timeout_s},
        read_timeout_seconds=timeout_s + CALL_TIMEOUT_S,
    )


async def wait_for_change(client: Client, panes: list[dict[str, Any]], timeout_s: float) -> None:
    """Return when a pane's status moves past the ``seq`` listed, or after ``timeout_s``."""
    waitable = [
        p for p in panes if isinstance(p.get("name"), str) and isinstance(p.get("seq"), int)
    ]
    if not waitable:
        # Nothing to wait on: a new pane shows at the next periodic listing.
        await asyncio.sleep(timeout_s)
        return
    chunks = [waitable[i : i + WAIT_ANY_MAX] for i in range(0, len(waitable), WAIT_ANY_MAX)]
    tasks = [asyncio.ensure_future(_wait_any(client, c, timeout_s)) for c in chunks]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@dataclass
class Feed:
    """Keeps the rows of one service current, calling ``changed`` after each listing."""

    target: Target
    changed: Callable[[str, list[dict[str, Any]]], None]

    async def run(self) -> None:
        """List, wait for a change, list again; on a failure show an error row and retry."""
        while True:
            try:
                async with connect(self.target) as client:
                    while True:
                        panes = await list_panes(client)
                        rows = [pane_row(self.target.name, p) for p in panes]
                        self.changed(self.target.name, rows)
                        await wait_for_change(client, panes, REFRESH_S)
            except Exception as exc:
                self.changed(self.target.name, [error_row(self.target, failure_reason(exc))])
            await asyncio.sleep(RETRY_S)
