"""Many panes on one host: start, idle cost, memory, call latency and kill detection
against the pane count (``--scale-counts``, default 64 and 256; 1,000 on request).

For each count, one fresh service (real, over MCP stdio, ``max_panes`` = the count):

- every pane of the ``quick`` program is started at once (``start_pane`` then
  ``wait_status(until=idle)``, all in parallel): the time until all are idle, and how
  many failed;
- idle CPU of the service's processes (supervisor, worker template, workers; the
  programs cost nothing) in % of one core: over the first minute from the moment all
  were idle, and over 60 s after a 10 s settle (the two windows overlap: 70 s in all);
- total PSS of those processes;
- ``get_status`` p50, alternated with the SDK echo tool (``bench.echo_server``) from a
  second client: the ratio under the same load;
- ``list_panes`` p50, back to back (it reuses each pane's usage sample for 0.5 s), and
  0.6 s apart, each walking every pane's process tree;
- ``wait_any`` over 16 idle panes (answered at once: the call's own cost), p99;
- a worker SIGKILLed: until ``wait_status`` returns ``lost``.

The ``quick`` program stands in for an agent: these figures are the service's own
cost per pane, not the agents' (a demo agent is one more Python process a pane).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Sequence

from mcp import Client, StdioServerParameters

from bench.core import Figure, Options
from bench.service import REPO, Service, bench_service, cpu_ns, pss_kib, service_processes
from supervisor.panes.usage import MIN_SAMPLE_INTERVAL_S

SETTLE_S = 10.0
WINDOW_S = 60.0


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _start_all(service: Service, count: int) -> tuple[float, int, dict[str, int]]:
    """(ms until all idle, failures, worker pid per pane) for ``count`` parallel starts."""
    workers: dict[str, int] = {}
    failures = 0

    async def start(name: str) -> None:
        nonlocal failures
        pane = await service.try_call("start_pane", name=name, profile="quick")
        if pane is None:
            failures += 1
            return
        workers[name] = int(pane["pane"]["worker_pid"])
        got = await service.try_call("wait_status", name=name, until=["idle"], timeout_s=120)
        if got is None or got.get("timed_out"):
            failures += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(start(f"s{i}") for i in range(count)))
    return (time.perf_counter() - t0) * 1000, failures, workers


def _cpu(procs: set[int]) -> int:
    return sum(cpu_ns(pid) for pid in procs)


async def _idle(procs: set[int], settle_s: float, window_s: float) -> tuple[float, float]:
    """(% of a core over the first ``window_s``, over ``window_s`` after ``settle_s``)."""
    t0, c0 = time.monotonic(), _cpu(procs)
    await asyncio.sleep(settle_s)
    t1, c1 = time.monotonic(), _cpu(procs)
    await asyncio.sleep(window_s - settle_s)
    t2, c2 = time.monotonic(), _cpu(procs)
    await asyncio.sleep(settle_s)
    t3, c3 = time.monotonic(), _cpu(procs)
    first = 100.0 * (c2 - c0) / 1e9 / (t2 - t0)
    settled = 100.0 * (c3 - c1) / 1e9 / (t3 - t1)
    return first, settled


async def _lists(service: Service, runs: int, apart_s: float = 0.0) -> list[float]:
    """list_panes call times (ms), back to back or ``apart_s`` apart (past the usage
    meter's reuse interval, each one walks every pane's process tree)."""
    out: list[float] = []
    for _ in range(runs):
        if apart_s:
            await asyncio.sleep(apart_s)
        t0 = time.perf_counter()
        await service.call("list_panes")
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def _status_and_echo(
    service: Service, echo: Client, name: str, runs: int
) -> tuple[list[float], list[float]]:
    """get_status and echo call times (ms), alternated: the same load for both. Not
    right after a list_panes: its ~0.6 MB answer's aftermath (the client parsing and
    collecting it) would land on whichever call comes next."""
    status: list[float] = []
    echoes: list[float] = []
    for _ in range(runs):
        t1 = time.perf_counter()
        await service.call("get_status", name=name)
        t2 = time.perf_counter()
        result = await echo.call_tool("echo", {"text": "q"}, read_timeout_seconds=60)
        t3 = time.perf_counter()
        assert not result.is_error
        status.append((t2 - t1) * 1000)
        echoes.append((t3 - t2) * 1000)
    return status, echoes


async def _wait_any(service: Service, names: list[str], runs: int) -> list[float]:
    targets = [{"name": n} for n in names[:16]]
    out: list[float] = []
    for _ in range(runs):
        t0 = time.perf_counter()
        await service.call("wait_any", panes=targets, until=["idle"], timeout_s=10)
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def _kill_to_lost(service: Service, workers: dict[str, int], kills: int) -> list[float]:
    out: list[float] = []
    for name in list(workers)[-kills:]:
        seq = (await service.call("get_status", name=name))["seq"]
        t0 = time.perf_counter()
        os.kill(workers[name], signal.SIGKILL)
        await service.call("wait_status", name=name, after_seq=seq, until=["lost"], timeout_s=10)
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def _measure(count: int, smoke: bool) -> dict[str, list[float]]:
    settle_s, window_s = (0.5, 1.0) if smoke else (SETTLE_S, WINDOW_S)
    async with bench_service(max_panes=count) as service:
        start_ms, failures, workers = await _start_all(service, count)
        procs = service_processes(service.supervisor_pid, workers.values())
        first, settled = await _idle(procs, settle_s, window_s)
        pss_mib = sum(pss_kib(pid) for pid in procs if _exists(pid)) / 1024
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "bench.echo_server"], cwd=str(REPO)
        )
        async with Client(params) as echo:
            runs = 10 if smoke else 100
            await _status_and_echo(service, echo, next(iter(workers)), 5)  # warm both
            status, echoes = await _status_and_echo(service, echo, next(iter(workers)), runs)
        lists = await _lists(service, runs)
        fresh = await _lists(service, 2 if smoke else 5, MIN_SAMPLE_INTERVAL_S + 0.1)
        waits = await _wait_any(service, list(workers), 20 if smoke else 200)
        lost = await _kill_to_lost(service, workers, 1 if smoke else 5)
    return {
        "start_ms": [start_ms],
        "failures": [float(failures)],
        "idle_first_minute": [first],
        "idle_settled": [settled],
        "pss_mib": [pss_mib],
        "list_panes": lists,
        "get_status": status,
        "echo": echoes,
        "list_panes_fresh": fresh,
        "wait_any_p99": [_p(waits, 0.99)],
        "kill_to_lost": lost,
    }


def _exists(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def run(options: Options) -> Sequence[Figure]:
    counts = [4] if options.smoke else list(options.scale_counts)
    figures: list[Figure] = []
    for count in counts:
        got = asyncio.run(_measure(count, options.smoke))
        big = count >= 1000
        at = f"scale.{count}"
        cpu_goal = 8.0 if big else (2.0 if count <= 64 else 3.0)
        figures += [
            Figure(
                f"{at}.parallel_start_all_idle",
                "ms",
                got["start_ms"],
                goal=None if big else "<= 5 s",
                limit=None if big else 5000.0,
            ),
            Figure(f"{at}.start_failures", "panes", got["failures"], goal="0", limit=0.0),
            Figure(
                f"{at}.idle_cpu_first_minute",
                "% core",
                got["idle_first_minute"],
                goal=f"<= {cpu_goal:g} %",
                limit=cpu_goal,
                note="from the moment all were idle",
            ),
            Figure(
                f"{at}.idle_cpu_settled",
                "% core",
                got["idle_settled"],
                goal=f"<= {cpu_goal:g} %",
                limit=cpu_goal,
                note="60 s after a 10 s settle",
            ),
            Figure(
                f"{at}.total_pss",
                "MiB",
                got["pss_mib"],
                goal="<= 4 GB" if big else "<= 1 GB",
                limit=(4e9 if big else 1e9) / 2**20,
                note="supervisor + template + workers",
            ),
            Figure(
                f"{at}.list_panes_p50",
                "ms",
                got["list_panes"],
                goal="<= 5 ms",
                limit=5.0,
            ),
            Figure(
                f"{at}.list_panes_fresh_p50",
                "ms",
                got["list_panes_fresh"],
                note="calls 0.6 s apart: every tree walked",
            ),
            Figure(
                f"{at}.get_status_p50",
                "ms",
                got["get_status"],
                reference="SDK echo tool",
                reference_values=got["echo"],
                goal="<= 1.2x the echo tool",
                limit=1.2,
            ),
            Figure(
                f"{at}.wait_any_16_p99",
                "ms",
                got["wait_any_p99"],
                goal="<= 10 ms",
                limit=10.0,
                note="16 idle panes, answered at once",
            ),
            Figure(
                f"{at}.kill_to_lost",
                "ms",
                got["kill_to_lost"],
                goal="<= 100 ms",
                limit=100.0,
                note="worker SIGKILL -> wait_status returns lost",
            ),
        ]
    return figures
