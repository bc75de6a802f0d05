"""``panewarden serve``: run the service over stdio (one client) or streamable HTTP."""

from __future__ import annotations

import argparse
import logging
import sys

from protocol.errors import PanewardenError
from supervisor.config import ServiceConfig
from supervisor.exit_codes import EXIT_OK, EXIT_USAGE

log = logging.getLogger(__name__)


def serve_command(args: argparse.Namespace, config: ServiceConfig) -> int:
    """Run ``serve`` with the parsed CLI arguments; returns the exit status."""
    try:
        if args.http:
            from supervisor.front.transports.http import serve_http_command

            return serve_http_command(args, config)
        from supervisor.front.transports.stdio import run_stdio

        run_stdio(config, args.keep_panes)
    except PanewardenError as exc:
        print(f"panewarden: {exc.message}", file=sys.stderr)
        log.error("%s", exc.message, extra={"code": exc.code.value})
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_OK
    return EXIT_OK
