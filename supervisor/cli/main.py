"""The ``panewarden`` command line (docs/design.md §10).

Exit status: 0 ok, 1 operation failed, 2 usage or configuration error.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from protocol import logjson
from protocol.errors import PanewardenError
from supervisor.cli.ctl import add_ctl_parser
from supervisor.cli.top_args import add_top_parser
from supervisor.cli.watch import add_watch_parser
from supervisor.exit_codes import EXIT_USAGE


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="panewarden",
        description="Start and drive coding-agent CLIs in supervised terminal panes over MCP.",
    )
    # The metavar lists the public commands: `demo-agent` (the bundled agent's entry
    # point) is hidden from the usage line and from the command list.
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = sub.add_parser("serve", help="run the MCP service")
    mode = serve.add_mutually_exclusive_group(required=True)
    mode.add_argument("--stdio", action="store_true", help="serve one client over stdio")
    mode.add_argument("--http", action="store_true", help="serve streamable HTTP at /mcp")
    serve.add_argument("--host", default="127.0.0.1", help="loopback address (HTTP only)")
    serve.add_argument("--port", type=int, default=8765, help="TCP port (HTTP only)")
    serve.add_argument(
        "--keep-panes", action="store_true", help="leave panes running on a graceful stop"
    )
    sub.add_parser("demo", help="a scripted tour of the built-in demo agent over MCP")
    sub.add_parser("status", help="print the service's panes")
    sub.add_parser(
        "stdio-proxy", help="serve stdio MCP, forwarding every call to the running HTTP service"
    )
    sub.add_parser("doctor", help="check subreaper support, state dir permissions, tools")
    add_ctl_parser(sub)
    add_top_parser(sub)
    add_watch_parser(sub)
    sub.add_parser("demo-agent")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``panewarden`` console script."""
    args = _parser().parse_args(argv)
    if args.command == "demo-agent":
        from supervisor.demo import agent as demo_agent

        return int(demo_agent.main() or 0)
    if args.command == "demo":
        from supervisor.demo.tour import run_tour

        return asyncio.run(run_tour())
    if args.command == "top":
        # A client of a service, maybe remote: it needs none of the local service's config.
        from supervisor.cli.top import top_command

        return top_command(args)
    from supervisor.config import load_config

    try:
        config = load_config()
    except PanewardenError as exc:
        print(f"panewarden: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    logjson.configure(config.log_level)
    if args.command == "serve":
        from supervisor.cli.serve import serve_command

        return serve_command(args, config)
    if args.command == "status":
        from supervisor.cli.status import status_command

        return status_command(config)
    if args.command == "ctl":
        from supervisor.cli.ctl import ctl_command

        return ctl_command(args, config.environ, config.state_dir)
    if args.command == "watch":
        from supervisor.cli.watch import watch_command

        return watch_command(args, config)
    if args.command == "stdio-proxy":
        from supervisor.front.transports.stdio_proxy import stdio_proxy_command

        return stdio_proxy_command(config)
    from supervisor.cli.doctor import doctor_command

    return int(doctor_command(config))


if __name__ == "__main__":
    sys.exit(main())
