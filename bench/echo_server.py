"""The reference for tool-call latency: a bare SDK server whose one tool echoes its text.

Run as ``python -m bench.echo_server`` (stdio). Same SDK, transport and kind of result
(structured) as panewarden's tools; nothing else.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from typing_extensions import TypedDict


class Echoed(TypedDict):
    text: str


def main() -> None:
    server = MCPServer("echo")

    @server.tool()
    async def echo(text: str) -> Echoed:
        """Return the text."""
        return {"text": text}

    server.run("stdio")


if __name__ == "__main__":
    main()
