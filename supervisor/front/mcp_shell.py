"""The MCP server before its tools: who it is, and a gate that holds tool requests until
the service behind them is up.

``serve --stdio`` answers ``initialize`` from this shell as soon as the SDK is loaded,
then loads and starts the service and installs the tools (:meth:`StartGate.install`);
``tools/list`` and ``tools/call`` wait at the gate until then. Answering ``initialize``
needs none of the service: a client that starts panewarden on demand (Codex sends its
first model request ~1 s after spawning its servers) gets the session at once.
"""

import asyncio
from collections.abc import Sequence
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.tools import Tool, ToolManager
from mcp.shared.exceptions import MCPError
from mcp.types import INTERNAL_ERROR

from protocol.errors import ErrorCode
from supervisor.front.tools.tooling import error_result
from supervisor.version import __version__

INSTRUCTIONS = (
    "panewarden starts coding-agent CLIs in supervised terminal panes. Start a pane with "
    "start_pane (profile 'demo' is built in), type with send_input, wait with wait_status "
    "(pass after_seq from the last status you saw), read the screen with read_output, answer "
    "permission dialogs only with answer_dialog (allow_once or deny_once), and remove_pane "
    "when done. Errors are JSON objects with a stable 'code'."
)

# The requests that need the tools, hence the started service.
HELD_METHODS = frozenset({"tools/list", "tools/call"})
# How long a held request waits for the service's start (its own waits are bounded
# well below this: the state dir lock, the worker template's hello).
START_DEADLINE_S = 60.0


def server_shell(middleware: Sequence[Any], **server_kwargs: Any) -> MCPServer:
    """The panewarden MCP server with ``middleware`` and no tools yet."""
    return MCPServer(
        "panewarden",
        version=__version__,
        instructions=INSTRUCTIONS,
        middleware=list(middleware),
        **server_kwargs,
    )


class StartGate:
    """Middleware: ``initialize`` passes (and is noted); tool requests wait for
    :meth:`install`, or get an error after :meth:`fail` or ``START_DEADLINE_S``.

    The tools' own middleware runs inside the gate, composed by the gate at each call:
    the SDK composes its chain when a request arrives, so a request held here would miss
    middleware appended to the server while it waited.
    """

    def __init__(self, deadline_s: float = START_DEADLINE_S) -> None:
        self._deadline_s = deadline_s
        self._initialized = asyncio.Event()
        self._settled = asyncio.Event()
        self._failure: str | None = None
        self._inner: tuple[Any, ...] = ()

    def install(self, server: MCPServer, tools: list[Tool], middleware: Sequence[Any]) -> None:
        """Give ``server`` its tools, run ``middleware`` (outermost first) inside the gate,
        and let held and later requests through.

        The SDK takes built ``Tool`` objects only in its constructor (``add_tool``
        rebuilds one from a function, which would lose the Struct input schema
        ``make_tool`` sets): the shell's tool manager is replaced by the SDK's own,
        built the same way.
        """
        server._tool_manager = ToolManager(tools=tools)
        self._inner = tuple(middleware)
        self._settled.set()

    def fail(self, message: str) -> None:
        """The service could not start: held and later tool requests get ``message``."""
        if not self._settled.is_set():
            self._failure = message
            self._settled.set()

    async def initialized(self) -> None:
        """Return once an ``initialize`` request has been answered."""
        await self._initialized.wait()

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method == "initialize":
            result = await call_next(ctx)
            self._initialized.set()
            return result
        if ctx.method in HELD_METHODS and not self._settled.is_set():
            try:
                await asyncio.wait_for(self._settled.wait(), self._deadline_s)
            except TimeoutError:
                self.fail(f"the service did not start within {self._deadline_s:g} s")
        if ctx.method in HELD_METHODS and self._failure is not None:
            if ctx.method == "tools/call":
                return error_result(ErrorCode.INTERNAL, self._failure)
            raise MCPError(INTERNAL_ERROR, self._failure)
        return await self._run_inner(0, ctx, call_next)

    async def _run_inner(
        self, index: int, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if index == len(self._inner):
            return await call_next(ctx)

        async def rest(inner_ctx: ServerRequestContext[Any, Any]) -> HandlerResult:
            return await self._run_inner(index + 1, inner_ctx, call_next)

        result: HandlerResult = await self._inner[index](ctx, rest)
        return result
