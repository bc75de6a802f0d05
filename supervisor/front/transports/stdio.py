"""The stdio transport: one MCP client on stdin/stdout.

A stop signal ends the client's session at once (the stdin relay gives the SDK EOF),
then every pane is closed, whether or not the client keeps stdin open. Without an
explicit state dir the server runs in a private session directory of its own. Every
line gets an answer: one the SDK cannot read gets ``-32700`` or ``-32600``
(:mod:`supervisor.front.transports.unreadable`) instead of the SDK's silence.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server

from supervisor.auth.access import SingleClientAccess
from supervisor.config import ServiceConfig
from supervisor.front.mcp_server import build_server
from supervisor.front.runtime import running_service, serve_until_signalled
from supervisor.front.transports.stdin_relay import StdinRelay
from supervisor.front.transports.stdio_sessions import new_session_dir, remove_session_dir
from supervisor.front.transports.unreadable import AnsweringReader


async def run_answering_stdio(server: MCPServer) -> None:
    """``MCPServer.run_stdio_async`` with ``AnsweringReader`` between transport and server."""
    async with stdio_server() as (read_stream, write_stream):
        # The SDK offers no public hook between its stdio transport and the server
        # loop; run_stdio_async itself is these three lines on the same attribute.
        lowlevel = server._lowlevel_server
        await lowlevel.run(
            AnsweringReader(read_stream, write_stream),
            write_stream,
            lowlevel.create_initialization_options(),
        )


async def serve_stdio(config: ServiceConfig, keep_panes: bool) -> None:
    """Serve one MCP client until it leaves or a signal stops us."""
    relay = StdinRelay()
    relay.install()
    try:
        async with running_service(config, keep_panes=keep_panes) as services:
            server = build_server(services, SingleClientAccess("stdio", transport="stdio"))
            await serve_until_signalled(
                services.panes,
                config,
                lambda: run_answering_stdio(server),
                on_stop=relay.end,
                notifier=services.notifier,
            )
    finally:
        relay.end()


def run_stdio(config: ServiceConfig, keep_panes: bool) -> None:
    """Run ``serve_stdio`` to the end, in a private session dir unless one was given.

    Raises:
        PanewardenError: configuration refused, or the state dir is served already.
    """
    if config.state_dir_explicit:
        asyncio.run(serve_stdio(config, keep_panes))
        return
    session = new_session_dir(config.state_dir)
    try:
        asyncio.run(serve_stdio(replace(config, state_dir=session), keep_panes))
    finally:
        if not keep_panes:
            remove_session_dir(session)
