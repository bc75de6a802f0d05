"""``panewarden stdio-proxy``: a stdio MCP server in front of the running HTTP service.

Clients that can only launch stdio servers start this instead of their own
supervisor, so they all share the one long-running ``serve --http`` process and
its panes. It is the SDK's low-level ``Server`` with two handlers: ``tools/list``
returns the service's listing as it came (names, schemas, annotations) and
``tools/call`` forwards the call over the SDK's streamable HTTP client and returns
the service's result unchanged, error results included. Progress notifications
from the service are relayed when the caller asked for progress; a caller's
cancel cancels the forwarded call. The proxy authenticates with the token file
(the ``operator`` client). It serves one service instance: if that service
restarts, the proxy's calls fail and the client restarts the proxy.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any

from mcp import Client
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.types import (
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
)

from protocol.errors import ErrorCode, PanewardenError
from supervisor.config import ServiceConfig
from supervisor.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from supervisor.front.transports.http_client import connection_failure, service_client

log = logging.getLogger(__name__)


def build_proxy(upstream: Client) -> Server[Any]:
    """A low-level server whose tools are ``upstream``'s, forwarded one call at a time."""

    async def list_tools(
        _ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        cursor = params.cursor if params is not None else None
        # cache_mode="refresh": the service is the authority, the proxy keeps no copy.
        return await upstream.list_tools(cursor=cursor, cache_mode="refresh")

    async def call_tool(
        ctx: ServerRequestContext[Any], params: CallToolRequestParams
    ) -> CallToolResult:
        async def relay_progress(progress: float, total: float | None, message: str | None) -> None:
            await ctx.session.report_progress(progress, total, message)

        wants_progress = bool(ctx.meta and ctx.meta.get("progress_token") is not None)
        result = await upstream.session.call_tool(
            params.name,
            params.arguments,
            progress_callback=relay_progress if wants_progress else None,
        )
        return result

    info = upstream.server_info
    return Server(
        info.name if info is not None else "panewarden",
        version=(info.version if info is not None else "") or "",
        instructions=upstream.instructions,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def run_proxy(config: ServiceConfig) -> None:
    """Connect to the service, then serve stdio until the client closes stdin."""
    async with service_client(config) as upstream:
        # Fail at start, not at the first call, when the token or service is wrong.
        await upstream.list_tools(cache_mode="refresh")
        proxy = build_proxy(upstream)
        async with stdio_server() as (read_stream, write_stream):
            await proxy.run(read_stream, write_stream, proxy.create_initialization_options())


def stdio_proxy_command(config: ServiceConfig) -> int:
    """Run the proxy; returns the exit status (1 when no service answers)."""
    # A log line per forwarded HTTP request is noise on the client's stderr.
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    try:
        asyncio.run(run_proxy(config))
    except PanewardenError as exc:
        print(f"panewarden stdio-proxy: {exc.message}", file=sys.stderr)
        return EXIT_USAGE if exc.code is ErrorCode.CONFIG_INVALID else EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_OK
    except Exception as exc:  # top-level CLI boundary: a transport failure becomes a message
        reason = connection_failure(exc)
        if reason is None:
            raise
        print(
            f"panewarden stdio-proxy: the HTTP service is unreachable ({reason})", file=sys.stderr
        )
        return EXIT_FAILED
    return EXIT_OK
