"""How fast a killed worker is noticed and its pane's processes are gone.

For N panes: type a `spawn` prompt (a detached setsid grandchild), SIGKILL the
worker the moment the grandchild's pid shows, then time (a) until `wait_status`
returns lifecycle `lost` and (b) until the program and the grandchild are gone.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
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


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def _measure(n: int) -> tuple[list[float], list[float]]:
    lost_ms: list[float] = []
    gone_ms: list[float] = []
    with tempfile.TemporaryDirectory() as state:
        env = bench_environ()
        env |= {"PANEWARDEN_STATE_DIR": state, "PANEWARDEN_LOG_LEVEL": "ERROR"}
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "supervisor", "serve", "--stdio"], env=env
        )
        async with Client(params) as client:
            for i in range(n):
                name = f"k{i}"
                pane = (await _call(client, "start_pane", name=name, profile="demo"))["pane"]
                await _call(client, "wait_status", name=name, until=["idle"])
                await _call(client, "send_input", name=name, text="spawn")
                match = await _call(
                    client,
                    "wait_output",
                    name=name,
                    pattern=r"spawned \d+",
                    regex=True,
                    timeout_s=20,
                )
                grandchild = int(re.search(r"\d+", match["line"]).group())  # type: ignore[union-attr]
                t0 = time.perf_counter()
                os.kill(pane["worker_pid"], signal.SIGKILL)
                await _call(client, "wait_status", name=name, until=["lost"], timeout_s=10)
                lost_ms.append((time.perf_counter() - t0) * 1000)
                while _alive(pane["pid"]) or _alive(grandchild):
                    if time.perf_counter() - t0 > 10:
                        raise RuntimeError("processes survived their lost pane")
                    await asyncio.sleep(0.005)
                gone_ms.append((time.perf_counter() - t0) * 1000)
                await _call(client, "remove_pane", name=name)
    return lost_ms, gone_ms


def run(options: Options) -> Sequence[Figure]:
    lost, gone = asyncio.run(_measure(1 if options.smoke else 10))
    return [
        Figure("worker_death.kill_to_lost", "ms", lost),
        Figure("worker_death.kill_to_tree_gone", "ms", gone),
    ]
