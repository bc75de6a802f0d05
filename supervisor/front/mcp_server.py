"""The MCP server: every tool group registered on the SDK's ``MCPServer``.

``build_server`` is the factory (no module-level server): it turns each group's
``ToolSpec`` list into SDK tools (see :mod:`supervisor.front.tools.tooling`) and adds two
middlewares: a call to an unknown tool gets the JSON error object, and ``tools/list``
shows each caller only the tools its scopes and tool groups allow. ``panewarden_tools``
is the same set for a server shell that answered ``initialize`` before the service was
up (:mod:`supervisor.front.mcp_shell`).
"""

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.tools import Tool

from supervisor.auth.access import Access
from supervisor.front.mcp_shell import server_shell
from supervisor.front.runtime import Services
from supervisor.front.tools.coordination_tools import coordination_tool_specs
from supervisor.front.tools.lane_tools import lane_tool_specs
from supervisor.front.tools.pane_tools import pane_tool_specs
from supervisor.front.tools.tooling import make_tool, tool_list_filter, unknown_tool_guard
from supervisor.front.tools.writer_tools import writer_tool_specs


def panewarden_tools(services: Services, access: Access) -> tuple[list[Tool], list[Any]]:
    """Every tool over ``services`` for callers of ``access``, and the middleware they need
    (outermost first)."""
    specs = [
        *pane_tool_specs(services.panes),
        *coordination_tool_specs(services.control),
        *lane_tool_specs(services.control, services.lanes, services.notifier.report),
        *writer_tool_specs(services.lanes),
    ]
    tools = [make_tool(spec, access) for spec in specs]
    middleware = [
        unknown_tool_guard(frozenset(t.name for t in tools)),
        tool_list_filter(specs, access),
    ]
    return tools, middleware


def build_server(services: Services, access: Access, **server_kwargs: Any) -> MCPServer:
    """The MCP server for ``services``; extra keyword arguments go to ``MCPServer``."""
    tools, middleware = panewarden_tools(services, access)
    return server_shell(middleware, tools=tools, **server_kwargs)
