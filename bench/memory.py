"""What a full scrollback costs: 5,000 lines of 200 columns, per backend.

Each backend runs in a fresh interpreter that measures its own resident memory
(``VmRSS``) before and after filling the scrollback with 5,050 coloured lines of
200 columns (the whole width written), so nothing else in the process moves the
figure; then it compacts the scrollback, as the worker does once the pane is quiet
(ghostty compresses its pages; pyte has nothing to do). ``.uncompacted`` is the
figure before that.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.core import Figure, Options
from bench.throughput import installed_backends

REPO = Path(__file__).resolve().parent.parent
PROBE = r"""
import gc, json, sys
from paneworker.screen.terminal import Terminal

def rss_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])

kind, lines = sys.argv[1], int(sys.argv[2])
term = Terminal(200, 50, reply=lambda b: None, on_report=lambda r: None,
                history_lines=5000, emulator=kind)
term.feed(b"warm up\r\n")
words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu ".split()
rows = []
for n in range(lines):
    text = " ".join(words[(n + k) % len(words)] for k in range(40))
    text = (f"{n:06d} " + text)[:200].ljust(200, ".")
    rows.append(f"\x1b[3{n % 8}m{text[:100]}\x1b[0m{text[100:]}\r\n".encode())
data = b"".join(rows)
gc.collect()
before = rss_kib()
for start in range(0, len(data), 65536):
    term.feed(data[start:start + 65536])
gc.collect()
loose = rss_kib()
term.compact()  # what the worker does once the pane is quiet
gc.collect()
after = rss_kib()
print(json.dumps({"before": before, "loose": loose, "after": after,
                  "history": len(term.history_lines())}))
"""


def _probe(kind: str, lines: int) -> dict[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, kind, str(lines)],
        capture_output=True,
        text=True,
        check=True,
        cwd=str(REPO),
        timeout=600,
    )
    result: dict[str, int] = json.loads(done.stdout)
    return result


def run(options: Options) -> Sequence[Figure]:
    lines = 600 if options.smoke else 5050
    figures = []
    for kind in installed_backends():
        runs = [_probe(kind, lines) for _ in range(min(options.rounds, 3))]
        figures.append(
            Figure(
                name=f"memory.{kind}.full_scrollback",
                unit="MiB",
                values=[(r["after"] - r["before"]) / 1024 for r in runs],
                goal="<= 4 MiB",
                limit=4.0,
                note=f"RSS growth for {runs[0]['history']} lines of 200 columns of scrollback",
            )
        )
        figures.append(
            Figure(
                name=f"memory.{kind}.full_scrollback.uncompacted",
                unit="MiB",
                values=[(r["loose"] - r["before"]) / 1024 for r in runs],
                note="the same, before the quiet-pane compaction",
            )
        )
    return figures
