"""The benchmarks run: ``python -m bench --smoke`` (tiny sizes, one repeat) to the end.

Part of the suite so that it runs beside the other tests instead of before them: it
mostly waits (idle windows, settling panes). It never judges a timing; it checks that
every benchmark ran and wrote its figures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import BENCHMARKS

REPO = Path(__file__).resolve().parent.parent
SMOKE_TIMEOUT_S = 400.0


@pytest.mark.timeout(SMOKE_TIMEOUT_S + 20)
def test_every_benchmark_runs_in_smoke_mode(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PANEWARDEN_")}
    env["HOME"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--json", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=SMOKE_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    ran = [line[3:] for line in done.stderr.splitlines() if line.startswith("== ")]
    assert ran == list(BENCHMARKS), done.stderr[-4000:]
    written = json.loads(out.read_text())
    assert written["meta"]["smoke"] is True
    figures = written["figures"]
    # Each benchmark names its figures after itself (pane_vs_tmux's are "pane.…").
    named = {figure["name"].split(".", 1)[0] for figure in figures}
    assert named == {"pane" if b == "pane_vs_tmux" else b for b in BENCHMARKS}, named
    assert all(figure["values"] for figure in figures), figures
