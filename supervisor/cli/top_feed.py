"""The panes of one service for ``panewarden top``, over MCP with the SDK client.

A ``Feed`` lists the panes (``list_panes``: status, lease, usage) and then waits for the
next change with ``wait_any`` over every pane, from each pane's last ``seq`` on, for at
most ``REFRESH_S``: the screen follows events as they happen, and CPU/memory (which
only the service can measure) are refreshed at that slow period. No busy polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent

from protocol.errors import ErrorCode, PanewardenError
from supervisor.auth.clients import read_token_file
from supervisor.cli.top_targets import Target
from supervisor.front.transports.http_client import connection_failure

REFRESH_S = 5.0
RETRY_S = 5.0
CONNECT_TIMEOUT_S = 5.0
CALL_TIMEOUT_S = 15.0
# wait_any takes at most 16 panes a call; more panes wait in several calls at once.
WAIT_ANY_MAX = 16
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


def pane_row(service: str, pane: dict[str, Any]) -> dict[str, Any]:
    """One pane as ``top`` shows it (and ``--once --json`` prints it)."""
    lease = pane.get("lease")
    usage = pane.get("usage") or {}
    started = pane.get("started_at")
    age_s: int | None = None
    if isinstance(started, str):
        with contextlib.suppress(ValueError):
            age_s = max(0, int(datetime.now().astimezone().timestamp() - _epoch(started)))
    return {
        "service": service,
        "name": pane.get("name"),
        "profile": pane.get("profile"),
        "agent": pane.get("agent"),
        "lifecycle": pane.get("lifecycle"),
        "state": pane.get("state"),
        "kind": pane.get("kind"),
        "turn": pane.get("turn"),
        "seq": pane.get("seq"),
        "started_at": started,
        "age_s": age_s,
        "lease": lease.get("lease_type") if isinstance(lease, dict) else None,
        "confined": pane.get("confined"),
        "worker_pid": pane.get("worker_pid"),
        "pid": pane.get("pid"),
        "cpu_percent": usage.get("cpu_percent"),
        "rss_bytes": usage.get("rss_bytes"),
        "processes": usage.get("processes"),
        # The agent's own count (ACP panes whose agent reports it), else None.
        "tokens": (pane.get("tokens") or {}).get("total_tokens"),
    }


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def error_row(target: Target, reason: str) -> dict[str, Any]:
    """A service that did not answer, as one row."""
    return {"service": target.name, "url": target.url, "error": reason}


def failure_reason(exc: BaseException) -> str:
    """One line saying why a call to a service failed."""
    if isinstance(exc, PanewardenError):
        return exc.message
    return connection_failure(exc) or f"{type(exc).__name__}: {exc}"


def _tool_error(result: CallToolResult) -> str:
    text = next((c.text for c in result.content if isinstance(c, TextContent)), "")
    try:
        body = json.loads(text)
        return f"{body['code']}: {body['message']}"
    except (ValueError, KeyError, TypeError):
        return text[:200]


@contextlib.asynccontextmanager
async def connect(target: Target) -> AsyncIterator[Client]:
    """An SDK client of ``target`` with its token."""
    if target.token_file is None:
        raise PanewardenError(
            ErrorCode.CONFIG_INVALID, "PANEWARDEN_TOKEN_FILE is needed to call the service"
        )
    token = read_token_file(target.token_file)
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"},
        timeout=httpx2.Timeout(CONNECT_TIMEOUT_S, read=REFRESH_S + CALL_TIMEOUT_S),
        # An HTTP(S)_PROXY from the environment must never see the token.
        trust_env=False,
    )
    async with http, Client(streamable_http_client(target.url, http_client=http)) as client:
        yield client


async def list_panes(client: Client) -> list[dict[str, Any]]:
    """``list_panes``' panes; a tool error is a ``PanewardenError``."""
    result = await client.call_tool("list_panes", {}, read_timeout_seconds=CALL_TIMEOUT_S)
    if result.is_error:
        raise PanewardenError(ErrorCode.INTERNAL, f"list_panes failed: {_tool_error(result)}")
    panes = (result.structured_content or {}).get("panes", [])
    return [p for p in panes if isinstance(p, dict)]


async def fetch_once(target: Target) -> list[dict[str, Any]]:
    """The rows of ``target`` now: its panes, or one error row."""
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_S + CALL_TIMEOUT_S):
            async with connect(target) as client:
                panes = await list_panes(client)
    except Exception as exc:
        return [error_row(target, failure_reason(exc))]
    return [pane_row(target.name, p) for p in panes]


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
