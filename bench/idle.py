"""What idle panes cost: CPU of the service against the pane count, wake-ups, memory.

One service (real, over MCP stdio) per emulator backend. Panes of the ``quick``
program (it reports ``idle`` and then blocks in a read, so it costs nothing itself)
are added up to each count; after a settling pause, the CPU time of the supervisor,
the worker template and every worker (all threads, from ``schedstat``) is measured
over a window and given as % of one core. At the largest count the window is
repeated (median) and the benchmark also reports each idle worker's wake-ups per
second (context switches, all threads) and proportional set size (PSS: shared pages
divided among the processes sharing them), and the template's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from bench.core import Figure, Options
from bench.service import (
    Service,
    bench_service,
    context_switches,
    cpu_ns,
    pss_kib,
    service_processes,
)
from bench.throughput import installed_backends

SETTLE_S = 8.0
# Issue 9's goal per idle pane: 4 MB (decimal), in the MiB the figures are given in.
PSS_GOAL_MIB = 4e6 / 2**20


async def _add_panes(service: Service, workers: dict[str, int], total: int) -> list[int]:
    """Start panes until there are ``total``; returns every worker pid."""
    new = [f"i{i}" for i in range(len(workers), total)]

    async def start(name: str) -> None:
        pane = await service.call("start_pane", name=name, profile="quick")
        workers[name] = int(pane["pane"]["worker_pid"])
        await service.call("wait_status", name=name, until=["idle"], timeout_s=60)

    # A few at a time: the point is the idle cost, not a start storm.
    for at in range(0, len(new), 8):
        await asyncio.gather(*(start(n) for n in new[at : at + 8]))
    return list(workers.values())


async def _window(procs: set[int], seconds: float) -> float:
    """% of one core the processes used over ``seconds``."""
    before = {pid: cpu_ns(pid) for pid in procs}
    t0 = time.monotonic()
    await asyncio.sleep(seconds)
    elapsed = time.monotonic() - t0
    used = sum(cpu_ns(pid) - before[pid] for pid in procs)
    return 100.0 * used / 1e9 / elapsed


async def _wakeups(pids: list[int], seconds: float) -> list[float]:
    before = {pid: context_switches(pid) for pid in pids}
    t0 = time.monotonic()
    await asyncio.sleep(seconds)
    elapsed = time.monotonic() - t0
    return [(context_switches(pid) - before[pid]) / elapsed for pid in pids]


async def _measure(
    kind: str,
    counts: list[int],
    window_s: float,
    top_window_s: float,
    top_repeats: int,
    settle_s: float = SETTLE_S,
) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    async with bench_service(PANEWARDEN_EMULATOR=kind) as service:
        names: dict[str, int] = {}
        for count in counts:
            workers = await _add_panes(service, names, count)
            await asyncio.sleep(settle_s)
            procs = service_processes(service.supervisor_pid, workers)
            if count == counts[-1]:
                runs = [await _window(procs, top_window_s) for _ in range(top_repeats)]
            else:
                runs = [await _window(procs, window_s)]
            out[f"cpu@{count}"] = runs
        workers = [p for p in await _add_panes(service, names, counts[-1]) if p]
        out["wakeups"] = await _wakeups(workers, window_s)
        out["pss"] = [pss_kib(pid) / 1024 for pid in workers]
        templates = service_processes(service.supervisor_pid, workers) - set(workers)
        templates.discard(service.supervisor_pid)
        out["template_pss"] = [pss_kib(pid) / 1024 for pid in templates]
        out["supervisor_pss"] = [pss_kib(service.supervisor_pid) / 1024]
    return out


def run(options: Options) -> Sequence[Figure]:
    counts = [2] if options.smoke else [0, 8, 16, 32, 64]
    window_s = 1.0 if options.smoke else 20.0
    top_window_s = 1.0 if options.smoke else 60.0
    top_repeats = 1 if options.smoke else 3
    figures: list[Figure] = []
    for kind in installed_backends():
        settle_s = 1.0 if options.smoke else SETTLE_S
        got = asyncio.run(_measure(kind, counts, window_s, top_window_s, top_repeats, settle_s))
        top = counts[-1]
        for count in counts[:-1]:
            figures.append(
                Figure(f"idle.{kind}.cpu_at_{count}_panes", "% core", got[f"cpu@{count}"])
            )
        figures.append(
            Figure(
                f"idle.{kind}.cpu_at_{top}_panes",
                "% core",
                got[f"cpu@{top}"],
                goal="<= 2 % of a core",
                limit=2.0,
                note=f"supervisor + template + workers, {top_window_s:.0f} s windows",
            )
        )
        figures.append(
            Figure(
                f"idle.{kind}.worker_wakeups",
                "/s",
                got["wakeups"],
                note="context switches per idle worker, all threads (median of workers)",
            )
        )
        figures.append(
            Figure(
                f"idle.{kind}.worker_pss",
                "MiB",
                got["pss"],
                goal=f"<= 4 MB per idle pane with {top} panes",
                limit=PSS_GOAL_MIB,
                note="median over the workers",
            )
        )
        per_pane = (sum(got["pss"]) + sum(got["template_pss"])) / max(1, len(got["pss"]))
        figures.append(
            Figure(
                f"idle.{kind}.pss_per_pane_with_template",
                "MiB",
                [per_pane],
                goal="<= 4 MB",
                limit=PSS_GOAL_MIB,
                note="(workers + template) / panes",
            )
        )
        if got["template_pss"]:
            figures.append(Figure(f"idle.{kind}.template_pss", "MiB", got["template_pss"]))
        figures.append(Figure(f"idle.{kind}.supervisor_pss", "MiB", got["supervisor_pss"]))
    return figures
