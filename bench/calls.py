"""Tool-call latency over stdio, against a bare SDK echo tool, and status → wait latency.

``get_status`` on an idle pane and the reference ``echo`` (``bench.echo_server``: the
same SDK and transport, one tool that returns its text) are called alternately, one
call at a time, from two clients alive at once: the ratio of medians is measured under
the same load. Then a pane runs ``bench/status_agent.py``: for each prompt it reports
``working`` and, 100 ms later, ``idle``, writing down (system monotonic clock) when it
wrote each report; a ``wait_status`` pending on each change returns at some time, and
the difference is the latency from the program's report to the caller's answer.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

from bench.core import Figure, Options
from bench.service import BENCH_DIR, REPO, Service, bench_service


def _status_profile(log: Path) -> dict[str, Any]:
    return {
        "name": "status",
        "agent": "generic",
        "argv": [sys.executable, str(BENCH_DIR / "status_agent.py"), str(log)],
        "cwds": ["/"],
    }


async def _alternate(service: Service, echo: Client, runs: int) -> tuple[list[float], list[float]]:
    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(runs):
        t0 = time.perf_counter()
        await service.call("get_status", name="q")
        t1 = time.perf_counter()
        result = await echo.call_tool("echo", {"text": "q"}, read_timeout_seconds=60)
        t2 = time.perf_counter()
        assert not result.is_error
        ours.append((t1 - t0) * 1000)
        theirs.append((t2 - t1) * 1000)
    return ours, theirs


async def _wait_latency(service: Service, log: Path, prompts: int) -> list[float]:
    """ms from the program's report to ``wait_status`` returning, per status change."""
    returned = await _wait_each(service, prompts)
    return _latencies(returned, await asyncio.to_thread(log.read_text))


async def _wait_each(service: Service, prompts: int) -> list[tuple[str, float]]:
    """(state, time it was returned) for each status change of ``prompts`` turns."""
    returned: list[tuple[str, float]] = []
    seq = (await service.call("wait_status", name="st", until=["idle"]))["status"]["seq"]
    for i in range(prompts):
        working = asyncio.ensure_future(
            service.call("wait_status", name="st", after_seq=seq, until=["working"], timeout_s=30)
        )
        await service.call("send_input", name="st", text=f"go {i}")
        got = await working
        returned.append(("working", time.monotonic()))
        seq = got["status"]["seq"]
        # The program's idle after working ends the turn: the pane reads done.
        got = await service.call(
            "wait_status", name="st", after_seq=seq, until=["done"], timeout_s=30
        )
        returned.append(("idle", time.monotonic()))
        seq = got["status"]["seq"]
    return returned


def _latencies(returned: list[tuple[str, float]], log_text: str) -> list[float]:
    # The first line is the program's initial idle, reported before any wait.
    reports = [line.split() for line in log_text.splitlines()][1:]
    out: list[float] = []
    for (state, at), (reported, stamp) in zip(returned, reports, strict=False):
        if state == reported:
            out.append((at - float(stamp)) * 1000)
    return out


async def _measure(runs: int, prompts: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory(prefix="pwbench-") as tmp:
        log = Path(tmp) / "reports.log"
        async with bench_service([_status_profile(log)]) as service:
            params = StdioServerParameters(
                command=sys.executable, args=["-m", "bench.echo_server"], cwd=str(REPO)
            )
            async with Client(params) as echo:
                await service.call("start_pane", name="q", profile="quick")
                await service.call("wait_status", name="q", until=["idle"])
                await _alternate(service, echo, 10)  # warm both
                ours, theirs = await _alternate(service, echo, runs)
            await service.call("start_pane", name="st", profile="status")
            waits = await _wait_latency(service, log, prompts)
    return {"get_status": ours, "echo": theirs, "wait": waits}


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def run(options: Options) -> Sequence[Figure]:
    got = asyncio.run(_measure(20 if options.smoke else 500, 3 if options.smoke else 100))
    return [
        Figure(
            "calls.get_status_p50",
            "ms",
            got["get_status"],
            reference="SDK echo tool",
            reference_values=got["echo"],
            goal="<= 1.2x the echo tool",
            limit=1.2,
        ),
        Figure("calls.status_to_wait_p50", "ms", got["wait"]),
        Figure(
            "calls.status_to_wait_p99",
            "ms",
            [_p99(got["wait"])],
            goal="<= 5 ms",
            limit=5.0,
            note="program's report -> wait_status returns",
        ),
        Figure("calls.echo_p99", "ms", [_p99(got["echo"])]),
        Figure("calls.get_status_p99", "ms", [_p99(got["get_status"])]),
    ]
