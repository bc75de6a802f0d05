"""Pane latencies and memory, measured through the real service over MCP stdio.

Over N panes of the demo agent: start_pane -> first idle, one demo turn
(send_input -> done), remove_pane, and each worker's resident memory.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import psutil
from mcp import Client, StdioServerParameters

from bench.core import Figure, Options
from bench.service import bench_environ


async def _call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args, read_timeout_seconds=60)
    if result.is_error:
        raise RuntimeError(f"{tool}: {result.content}")
    return dict(result.structured_content or {})


async def _measure(n: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"start": [], "turn": [], "remove": [], "rss": []}
    with tempfile.TemporaryDirectory() as state:
        env = bench_environ()
        env |= {"PANEWARDEN_STATE_DIR": state, "PANEWARDEN_LOG_LEVEL": "WARNING"}
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "supervisor", "serve", "--stdio"], env=env
        )
        async with Client(params) as client:
            for i in range(n):
                name = f"b{i}"
                t0 = time.perf_counter()
                pane = (await _call(client, "start_pane", name=name, profile="demo"))["pane"]
                idle = (await _call(client, "wait_status", name=name, until=["idle"]))["status"]
                out["start"].append((time.perf_counter() - t0) * 1000)
                out["rss"].append(psutil.Process(pane["worker_pid"]).memory_info().rss / 2**20)
                t0 = time.perf_counter()
                await _call(client, "send_input", name=name, text="benchmark turn")
                await _call(client, "wait_status", name=name, after_seq=idle["seq"], until=["done"])
                out["turn"].append((time.perf_counter() - t0) * 1000)
            for i in range(n):
                t0 = time.perf_counter()
                await _call(client, "remove_pane", name=f"b{i}")
                out["remove"].append((time.perf_counter() - t0) * 1000)
    return out


def run(options: Options) -> Sequence[Figure]:
    got = asyncio.run(_measure(1 if options.smoke else 8))
    return [
        Figure("panes.start_to_idle", "ms", got["start"], note="includes the demo agent's start"),
        Figure("panes.demo_turn", "ms", got["turn"], note="the demo agent sleeps ~90 ms"),
        Figure("panes.remove", "ms", got["remove"]),
        Figure("panes.worker_rss", "MiB", got["rss"]),
    ]
