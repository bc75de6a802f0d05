"""How fast a killed worker is noticed and its pane's processes are gone.

For N panes: type a `spawn` prompt (a detached setsid grandchild), SIGKILL the
worker the moment the grandchild's pid shows, then time (a) until `wait_status`
returns lifecycle `lost` and (b) until the program and the grandchild are gone.
Reports medians and maxima. Run:

    .venv/bin/python bench/bench_worker_death.py [N]
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
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


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def run(n: int) -> None:
    lost_ms: list[float] = []
    gone_ms: list[float] = []
    with tempfile.TemporaryDirectory() as state:
        env = dict(os.environ, PANEWARDEN_STATE_DIR=state, PANEWARDEN_LOG_LEVEL="ERROR")
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
    med = statistics.median
    print(f"worker kills: {n}")
    print(f"kill -> lost            median {med(lost_ms):6.1f} ms  max {max(lost_ms):6.1f} ms")
    print(f"kill -> tree gone       median {med(gone_ms):6.1f} ms  max {max(gone_ms):6.1f} ms")


if __name__ == "__main__":
    asyncio.run(run(int(sys.argv[1]) if len(sys.argv) > 1 else 10))
