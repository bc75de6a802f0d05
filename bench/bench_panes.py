"""Pane latencies and memory, measured through the real service over MCP stdio.

Reports medians over N panes of: start_pane -> first idle, one demo turn
(send_input -> done), remove_pane, and each worker's RSS. Run:

    .venv/bin/python bench/bench_panes.py [N]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import psutil
from mcp import Client, StdioServerParameters


async def _call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args, read_timeout_seconds=60)
    if result.is_error:
        raise RuntimeError(f"{tool}: {result.content}")
    return dict(result.structured_content or {})


async def run(n: int) -> None:
    with tempfile.TemporaryDirectory() as state:
        env = dict(os.environ, PANEWARDEN_STATE_DIR=state, PANEWARDEN_LOG_LEVEL="WARNING")
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "supervisor", "serve", "--stdio"], env=env
        )
        async with Client(params) as client:
            starts, turns, removes, rss = [], [], [], []
            for i in range(n):
                name = f"b{i}"
                t0 = time.perf_counter()
                pane = (await _call(client, "start_pane", name=name, profile="demo"))["pane"]
                idle = (await _call(client, "wait_status", name=name, until=["idle"]))["status"]
                starts.append(time.perf_counter() - t0)
                rss.append(psutil.Process(pane["worker_pid"]).memory_info().rss / 2**20)
                t0 = time.perf_counter()
                await _call(client, "send_input", name=name, text="benchmark turn")
                await _call(client, "wait_status", name=name, after_seq=idle["seq"], until=["done"])
                turns.append(time.perf_counter() - t0)
            for i in range(n):
                t0 = time.perf_counter()
                await _call(client, "remove_pane", name=f"b{i}")
                removes.append(time.perf_counter() - t0)
    med = statistics.median
    print(f"panes: {n}")
    slowest = max(starts) * 1000
    print(f"start_pane -> idle     median {med(starts) * 1000:7.1f} ms  max {slowest:7.1f} ms")
    print(f"demo turn (-> done)    median {med(turns) * 1000:7.1f} ms  (agent sleeps ~90 ms)")
    print(f"remove_pane            median {med(removes) * 1000:7.1f} ms")
    print(f"worker RSS             median {med(rss):7.1f} MiB  max {max(rss):7.1f} MiB")


if __name__ == "__main__":
    asyncio.run(run(int(sys.argv[1]) if len(sys.argv) > 1 else 8))
