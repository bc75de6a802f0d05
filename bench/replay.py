"""CPU of busy panes: 16 panes each replaying a recorded TUI redraw stream in real time.

Each pane runs ``bench/replayer.py`` on Qwen Code's recorded permission turn
(``tests/captured/qwen/permission_allow``: 241 KB of full-screen redraws in 13 s, the
busiest recording), looping it at its recorded pace. After a settling pause the CPU
time of each worker (all threads, ``schedstat``) is taken over a window, as % of one
core; per emulator backend, one service each. The replayers' own CPU is not counted.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.core import Figure, Options
from bench.service import BENCH_DIR, REPO, Service, bench_service, cpu_ns
from bench.throughput import installed_backends

RECORDING = REPO / "tests" / "captured" / "qwen" / "permission_allow"
SETTLE_S = 3.0
LIMITS = {"pyte": 5.0, "ghostty": 1.0}


def _profile(copy: Path) -> dict[str, Any]:
    # A copy under a neutral name: argv naming a known CLI must pin its approval mode.
    for suffix in (".bin", ".json"):
        shutil.copyfile(f"{RECORDING}{suffix}", f"{copy}{suffix}")
    return {
        "name": "replay",
        "agent": "generic",
        "argv": [sys.executable, str(BENCH_DIR / "replayer.py"), f"{copy}.bin", f"{copy}.json"],
        "cwds": ["/"],
    }


async def _window(pids: list[int], seconds: float) -> list[float]:
    before = {pid: cpu_ns(pid) for pid in pids}
    t0 = time.monotonic()
    await asyncio.sleep(seconds)
    elapsed = time.monotonic() - t0
    return [100.0 * (cpu_ns(pid) - before[pid]) / 1e9 / elapsed for pid in pids]


async def _measure(kind: str, panes: int, window_s: float, settle_s: float) -> list[float]:
    with tempfile.TemporaryDirectory(prefix="pwbench-") as tmp:
        profile = _profile(Path(tmp) / "stream")
        async with bench_service([profile], PANEWARDEN_EMULATOR=kind) as service:
            workers = await _start(service, panes)
            await asyncio.sleep(settle_s)
            return await _window(workers, window_s)


async def _start(service: Service, panes: int) -> list[int]:
    infos = await asyncio.gather(
        *(service.call("start_pane", name=f"r{i}", profile="replay") for i in range(panes))
    )
    return [int(info["pane"]["worker_pid"]) for info in infos]


def run(options: Options) -> Sequence[Figure]:
    panes = 2 if options.smoke else 16
    window_s = 2.0 if options.smoke else 30.0
    figures: list[Figure] = []
    for kind in installed_backends():
        settle_s = 0.5 if options.smoke else SETTLE_S
        per_worker = asyncio.run(_measure(kind, panes, window_s, settle_s))
        figures.append(
            Figure(
                f"replay.{kind}.worker_cpu",
                "% core",
                per_worker,
                goal=f"<= {LIMITS[kind]:g} % of a core per worker",
                limit=LIMITS[kind],
                note=f"{panes} panes replaying a TUI stream in real time; median of workers",
            )
        )
        figures.append(Figure(f"replay.{kind}.worker_cpu_max", "% core", [max(per_worker)]))
    return figures
