"""The ``top`` command's arguments, apart from the view: parsing the command line must not
import the MCP client and the terminal UI ``top`` runs on (every command pays for what
the parser imports, ``serve --stdio`` too)."""

from __future__ import annotations

from typing import Any


def add_top_parser(sub: Any) -> None:
    """Register ``top`` on the ``panewarden`` subcommand parser."""
    top = sub.add_parser("top", help="a live overview of the panes of one or several services")
    top.add_argument(
        "--url", help="the service's MCP URL (default $PANEWARDEN_URL or http://127.0.0.1:8765/mcp)"
    )
    top.add_argument("--once", action="store_true", help="print the panes once and exit")
    top.add_argument("--json", action="store_true", help="with --once: one JSON object per pane")
