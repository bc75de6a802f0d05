"""The stdio transport: one MCP client on stdin/stdout.

A stop signal ends the client's session at once (the stdin relay gives the SDK EOF),
then every pane is closed, whether or not the client keeps stdin open. Without an
explicit state dir the server runs in a private session directory of its own. Every
line gets an answer: one the SDK cannot read gets ``-32700`` or ``-32600``
(:mod:`supervisor.front.transports.unreadable`) instead of the SDK's silence.

``initialize`` is answered by the server shell (:mod:`supervisor.front.mcp_shell`)
before the service is loaded: this module imports only the SDK and the shell; the
service's modules are loaded once ``initialize`` has been answered, off the event loop,
then the service starts and the tools are installed. ``tools/list`` and ``tools/call``
wait for that at the shell's gate. A service that cannot start (the state dir served
already) still exits 2 with its message, after the session ends.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server

from protocol.errors import PanewardenError
from supervisor.auth.access import SingleClientAccess
from supervisor.config import ServiceConfig
from supervisor.front.mcp_shell import StartGate, server_shell
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


# How long the service waits for the client's ``initialize`` before it loads anyway.
INITIALIZE_WAIT_S = 2.0


def _load_service_modules() -> None:
    """Import the service (its cores, the tool groups): run on a worker thread."""
    import supervisor.front.mcp_server
    import supervisor.front.runtime  # noqa: F401


async def serve_stdio(config: ServiceConfig, keep_panes: bool) -> None:
    """Serve one MCP client until it leaves or a signal stops us."""
    relay = StdinRelay()
    relay.install()
    access = SingleClientAccess("stdio", transport="stdio")
    gate = StartGate()
    server = server_shell([gate])
    session = asyncio.ensure_future(run_answering_stdio(server))
    try:
        first = asyncio.ensure_future(gate.initialized())
        await asyncio.wait(
            {session, first}, timeout=INITIALIZE_WAIT_S, return_when=asyncio.FIRST_COMPLETED
        )
        first.cancel()
        # Off the loop: the initialize answer is still being written while this loads.
        await asyncio.to_thread(_load_service_modules)
        from supervisor.front.mcp_server import panewarden_tools
        from supervisor.front.runtime import running_service, serve_until_signalled

        try:
            async with running_service(config, keep_panes=keep_panes) as services:
                tools, middleware = panewarden_tools(services, access)
                gate.install(server, tools, middleware)
                await serve_until_signalled(
                    services.panes,
                    config,
                    lambda: session,
                    on_stop=relay.end,
                    notifier=services.notifier,
                )
        except PanewardenError as exc:
            gate.fail(f"the service did not start: {exc.message}")
            raise
    finally:
        gate.fail("the service stopped")
        relay.end()
        # The session ends on the relay's EOF; it is awaited so its output is flushed.
        await asyncio.gather(session, return_exceptions=True)


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
