"""The MCP server: every tool group registered on the SDK's ``MCPServer``.

``build_server`` is the factory (no module-level server): it turns each group's
``ToolSpec`` list into SDK tools (see :mod:`supervisor.front.tools.tooling`) and adds two
middlewares: a call to an unknown tool gets the JSON error object, and ``tools/list``
shows each caller only the tools its scopes and tool groups allow.
"""

from typing import Any

from mcp.server.mcpserver import MCPServer

from supervisor.auth.access import Access
from supervisor.front.runtime import Services
from supervisor.front.tools.coordination_tools import coordination_tool_specs
from supervisor.front.tools.lane_tools import lane_tool_specs
from supervisor.front.tools.pane_tools import pane_tool_specs
from supervisor.front.tools.tooling import make_tool, tool_list_filter, unknown_tool_guard
from supervisor.front.tools.writer_tools import writer_tool_specs
from supervisor.version import __version__

INSTRUCTIONS = (
    "panewarden starts coding-agent CLIs in supervised terminal panes. Start a pane with "
    "start_pane (profile 'demo' is built in), type with send_input, wait with wait_status "
    "(pass after_seq from the last status you saw), read the screen with read_output, answer "
    "permission dialogs only with answer_dialog (allow_once or deny_once), and remove_pane "
    "when done. Errors are JSON objects with a stable 'code'."
)


def build_server(services: Services, access: Access, **server_kwargs: Any) -> MCPServer:
    """The MCP server for ``services``; extra keyword arguments go to ``MCPServer``."""
    specs = [
        *pane_tool_specs(services.panes),
        *coordination_tool_specs(services.control),
        *lane_tool_specs(services.control, services.lanes, services.notifier.report),
        *writer_tool_specs(services.lanes),
    ]
    tools = [make_tool(spec, access) for spec in specs]
    return MCPServer(
        "panewarden",
        version=__version__,
        instructions=INSTRUCTIONS,
        tools=tools,
        middleware=[
            unknown_tool_guard(frozenset(t.name for t in tools)),
            tool_list_filter(specs, access),
        ],
        **server_kwargs,
    )
