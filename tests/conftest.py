"""Shared fixtures: a real supervisor over stdio, driven by the official MCP SDK client.

Every fixture that starts processes reaps them, and checks that nothing the test
started is left behind.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir(mode=0o700)
    return path


# Passed on from the test run to every service under test: the suite (or a directory of
# it) runs on the emulator backend this names, with or without the worker template.
PASSED_ON = ("PANEWARDEN_EMULATOR", "PANEWARDEN_WORKER_TEMPLATE")


def service_env(state_dir: Path, **extra: str) -> dict[str, str]:
    """Environment for a supervisor under test."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PANEWARDEN_") or k in PASSED_ON}
    env["PANEWARDEN_STATE_DIR"] = str(state_dir)
    env["PANEWARDEN_LOG_LEVEL"] = "WARNING"
    env.update(extra)
    return env


def stdio_params(state_dir: Path, **extra: str) -> StdioServerParameters:
    """How to start ``panewarden serve --stdio`` for a test."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "supervisor", "serve", "--stdio"],
        env=service_env(state_dir, **extra),
        cwd=str(REPO),
    )


class Tools:
    """Thin helper over the SDK client: structured results or the error object."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def call(self, tool: str, **args: Any) -> dict[str, Any]:
        result = await self.client.call_tool(tool, args, read_timeout_seconds=120)
        assert not result.is_error, f"{tool} failed: {result.content}"
        assert result.structured_content is not None
        return dict(result.structured_content)

    async def error(self, tool: str, **args: Any) -> dict[str, Any]:
        result = await self.client.call_tool(tool, args, read_timeout_seconds=120)
        assert result.is_error, f"{tool} unexpectedly succeeded: {result.structured_content}"
        body = json.loads(result.content[0].text)  # type: ignore[union-attr]
        assert set(body) == {"code", "message"}, body
        return dict(body)

    async def wait(
        self,
        name: str,
        *,
        after: int | None = None,
        until: list[str] | None = None,
        timeout_s: float = 30,
    ) -> dict[str, Any]:
        args: dict[str, Any] = {"name": name, "timeout_s": timeout_s}
        if after is not None:
            args["after_seq"] = after
        if until is not None:
            args["until"] = until
        out = await self.call("wait_status", **args)
        assert not out["timed_out"], f"wait_status timed out: {out}"
        return dict(out["status"])


@pytest.fixture
async def tools(state_dir: Path) -> AsyncIterator[Tools]:
    async with Client(stdio_params(state_dir)) as client:
        yield Tools(client)
