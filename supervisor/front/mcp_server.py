"""The MCP server: every tool group registered on the SDK's ``MCPServer``.

``build_server`` is the factory (no module-level server): it turns each group's
``ToolSpec`` list into SDK tools (see :mod:`supervisor.front.tooling`) and adds the
middleware that answers a call to an unknown tool with the JSON error object.
"""

from typing import Any

from mcp.server.mcpserver import MCPServer

from supervisor.auth.access import Access
from supervisor.front.pane_tools import pane_tool_specs
from supervisor.front.tooling import make_tool, unknown_tool_guard
from supervisor.panes.service import PaneService
from supervisor.version import __version__

INSTRUCTIONS = (
    "panewarden starts coding-agent CLIs in supervised terminal panes. Start a pane with "
    "start_pane (profile 'demo' is built in), type with send_input, wait with wait_status "
    "(pass after_seq from the last status you saw), read the screen with read_output, answer "
    "permission dialogs only with answer_dialog (allow_once or deny_once), and remove_pane "
    "when done. Errors are JSON objects with a stable 'code'."
)


def build_server(service: PaneService, access: Access, **server_kwargs: Any) -> MCPServer:
    """The MCP server for ``service``; extra keyword arguments go to ``MCPServer``."""
    tools = [make_tool(spec, access) for spec in pane_tool_specs(service)]
    return MCPServer(
        "panewarden",
        version=__version__,
        instructions=INSTRUCTIONS,
        tools=tools,
        middleware=[unknown_tool_guard(frozenset(t.name for t in tools))],
        **server_kwargs,
    )
