"""``panewarden status``: the running HTTP service's panes, as a table.

It finds the service through ``$STATE/run/http``, authenticates with the token
file and calls ``list_panes`` with the SDK client, like any other MCP client.
Exit status 1 (with a message on stderr) when no HTTP service answers. What the service
answers is cleaned (``terminal_safe``) before it is printed, and no failure is a
traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Sequence
from typing import Any

from mcp.types import TextContent

from protocol.errors import ErrorCode, PanewardenError
from protocol.terminal_text import terminal_safe
from supervisor.config import ServiceConfig
from supervisor.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from supervisor.front.transports.http_client import (
    connection_failure,
    read_service_url,
    service_client,
)

CALL_TIMEOUT_S = 15.0
COLUMNS = ("name", "lifecycle", "state", "turn", "seq", "agent", "pid", "worker_pid", "cwd")


def format_table(panes: Sequence[dict[str, Any]]) -> str:
    """Left-aligned columns, one pane per line; ``-`` for an absent value."""
    rows = [list(COLUMNS)] + [
        ["-" if p.get(c) is None else terminal_safe(p.get(c))[:200] for c in COLUMNS] for p in panes
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
    return "\n".join(lines)


async def _list_panes(config: ServiceConfig) -> list[dict[str, Any]]:
    async with service_client(config) as client:
        result = await client.call_tool("list_panes", {}, read_timeout_seconds=CALL_TIMEOUT_S)
    if result.is_error:
        text = next((c.text for c in result.content if isinstance(c, TextContent)), "")
        try:
            body = json.loads(text)
            message = f"{body['code']}: {body['message']}"
        except (ValueError, KeyError, TypeError):
            message = text[:200]
        raise PanewardenError(ErrorCode.INTERNAL, f"list_panes failed: {message}")
    content = result.structured_content
    panes = content.get("panes", []) if isinstance(content, dict) else []
    if not isinstance(panes, list):
        raise PanewardenError(ErrorCode.INTERNAL, "list_panes answered no list of panes")
    return [p for p in panes if isinstance(p, dict)]


def status_command(config: ServiceConfig) -> int:
    """Print the panes of the running HTTP service; returns the exit status."""
    # One line per HTTP request at INFO would bury the table's error messages.
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    url = read_service_url(config)
    if url is None:
        print(
            f"panewarden: no HTTP service is running for {config.state_dir} "
            "(start one with: panewarden serve --http)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    try:
        panes = asyncio.run(_list_panes(config))
    except PanewardenError as exc:
        print(f"panewarden: {terminal_safe(exc.message)}", file=sys.stderr)
        return EXIT_USAGE if exc.code is ErrorCode.CONFIG_INVALID else EXIT_FAILED
    except Exception as exc:  # top-level CLI boundary: one clean line, never a traceback
        reason = connection_failure(exc)
        if reason is None:
            from supervisor.cli.top_feed import failure_reason

            print(f"panewarden: {failure_reason(exc)}", file=sys.stderr)
            return EXIT_FAILED
        print(
            f"panewarden: the HTTP service at {terminal_safe(url)} did not answer "
            f"({terminal_safe(reason)[:300]}); "
            "is `panewarden serve --http` running, and is PANEWARDEN_TOKEN_FILE its token?",
            file=sys.stderr,
        )
        return EXIT_FAILED
    print(f"service: {url}")
    print(format_table(panes) if panes else "no panes")
    return EXIT_OK
