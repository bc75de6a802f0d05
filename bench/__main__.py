"""``python -m bench``: run the benchmark suite, print a table, write JSON.

Options: ``--smoke`` (tiny sizes, one repeat: checks that everything runs; never
judges timings), ``--only NAME[,NAME]``, ``--repeats N``, ``--json PATH``
(default ``bench-results.json``), ``--stream-mb N``, ``--scale-counts N[,N]`` (default 64,256).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

from bench import (
    calls,
    idle,
    initialize,
    lanes,
    lossless,
    memory,
    pane_vs_tmux,
    panes,
    replay,
    scale,
    startup,
    throughput,
    tool_list,
    worker_death,
)
from bench.core import Benchmark, Figure, Options, table, write_json

BENCHMARKS: dict[str, Benchmark] = {
    "throughput": throughput.run,
    "pane_vs_tmux": pane_vs_tmux.run,
    "lossless": lossless.run,
    "memory": memory.run,
    "panes": panes.run,
    "worker_death": worker_death.run,
    "tool_list": tool_list.run,
    "lanes": lanes.run,
    "startup": startup.run,
    "idle": idle.run,
    "replay": replay.run,
    "calls": calls.run,
    "scale": scale.run,
    "initialize": initialize.run,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes; checks it all runs")
    parser.add_argument("--only", default="", help="comma-separated: " + ", ".join(BENCHMARKS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--stream-mb", type=float, default=20.0)
    parser.add_argument("--scale-counts", default="64,256", help="pane counts of `scale`")
    parser.add_argument("--json", default="bench-results.json", type=Path)
    args = parser.parse_args(argv)
    chosen = [name for name in args.only.split(",") if name] or list(BENCHMARKS)
    unknown = [name for name in chosen if name not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}")
    options = Options(
        smoke=args.smoke,
        repeats=max(1, args.repeats),
        stream_bytes=int((1.0 if args.smoke else args.stream_mb) * 1024 * 1024),
        scale_counts=tuple(int(n) for n in args.scale_counts.split(",") if n),
    )
    figures: list[Figure] = []
    started = time.time()
    for name in chosen:
        t0 = time.perf_counter()
        print(f"== {name}", file=sys.stderr, flush=True)
        figures.extend(BENCHMARKS[name](options))
        print(f"   {time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)
    print(table(figures))
    meta = {
        "started": started,
        "smoke": options.smoke,
        "repeats": options.rounds,
        "stream_bytes": options.stream_bytes,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_avg": os.getloadavg(),
    }
    write_json(args.json, figures, meta)
    print(f"figures written to {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
