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

# Keep pytest's rewritten test modules cached (in tests/**/__pycache__) even when
# PYTHONDONTWRITEBYTECODE is set, as it is on CI's machine: else every xdist worker rewrites
# every test module again at collection, some 4 s of CPU per worker and run. This process
# only; the services under test inherit the environment as it is.
sys.dont_write_bytecode = False


# ---------------------------------------------------------------- parallel runs (xdist)
#
# pyproject's addopts run the suite on pytest-xdist workers, a whole module per worker at
# a time (``-n auto --dist loadscope``): a module's tests keep their order and share its
# module-scoped fixtures (one service for the module), as in a serial run. ``-n 0`` runs
# everything in one process. Tests of different workers never meet: each has its own state
# dir (so its own runtime dir and ipc sockets, whose path is a hash of the state dir's),
# ephemeral ports, uniquely marked processes and fresh HOMEs.
#
# (Not ``--dist loadgroup``: with pytest 9.2, xdist 3.8 cannot tag a test's node id with
# its group, and xdist_group marks are silently ignored.)

DURATIONS: dict[str, float] = json.loads((REPO / "tests" / "durations.json").read_text())


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers per core (most tests wait on real processes more than they
    compute), at least 2; ``PANEWARDEN_TEST_WORKERS`` overrides."""
    raw = os.environ.get("PANEWARDEN_TEST_WORKERS", "")
    if raw.isdigit():
        return int(raw)
    return max(2, 2 * len(os.sched_getaffinity(0)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest modules first (``tests/durations.json``, measured by
    ``tests/tools/durations.py``), so that no long module starts last while the other
    workers idle. Only whole modules move; the sort is stable, so a module's tests keep
    their order, and unmeasured modules keep theirs, after the measured ones."""
    items.sort(key=lambda item: -DURATIONS.get(item.nodeid.split("::", 1)[0], 0.0))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir(mode=0o700)
    return path


# Passed on from the test run to every service under test: the suite (or a directory of
# it) runs on the emulator backend this names, with or without the worker template, with
# panes confined or not. The suite's own default is unconfined panes (its fixtures mark
# processes and files under /tmp, which a confined pane cannot see); the confinement
# tests (tests/confine) ask for it, and PANEWARDEN_CONFINE=auto runs everything confined.
PASSED_ON = ("PANEWARDEN_EMULATOR", "PANEWARDEN_WORKER_TEMPLATE", "PANEWARDEN_CONFINE")
os.environ.setdefault("PANEWARDEN_CONFINE", "off")


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
