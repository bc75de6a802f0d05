"""``panewarden serve``: run the service over stdio (one client) or streamable HTTP."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from dataclasses import replace

from protocol.errors import PanewardenError
from supervisor.access import SingleClientAccess
from supervisor.config import ServiceConfig
from supervisor.mcp_front import build_server
from supervisor.runtime import running_service, serve_until_signalled
from supervisor.stdin_relay import StdinRelay
from supervisor.stdio_sessions import new_session_dir, remove_session_dir

log = logging.getLogger(__name__)

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


async def serve_stdio(config: ServiceConfig, keep_panes: bool) -> None:
    """Serve one MCP client on stdin/stdout until it leaves or a signal stops us.

    A stop signal ends the client's session at once (the stdin relay gives the SDK EOF),
    then every pane is closed, whether or not the client keeps stdin open.
    """
    relay = StdinRelay()
    relay.install()
    async with running_service(config, keep_panes=keep_panes) as service:
        server = build_server(service, SingleClientAccess("stdio"))
        await serve_until_signalled(service, config, server.run_stdio_async, on_stop=relay.end)
    relay.end()


def serve_command(args: argparse.Namespace, config: ServiceConfig) -> int:
    """Run ``serve`` with the parsed CLI arguments; returns the exit status."""
    try:
        if args.http:
            from supervisor.http_serve import serve_http_command

            return serve_http_command(args, config)
        if config.state_dir_explicit:
            asyncio.run(serve_stdio(config, args.keep_panes))
        else:
            session = new_session_dir(config.state_dir)
            try:
                asyncio.run(serve_stdio(replace(config, state_dir=session), args.keep_panes))
            finally:
                if not args.keep_panes:
                    remove_session_dir(session)
    except PanewardenError as exc:
        print(f"panewarden: {exc.message}", file=sys.stderr)
        log.error("%s", exc.message, extra={"code": exc.code.value})
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_OK
    return EXIT_OK
