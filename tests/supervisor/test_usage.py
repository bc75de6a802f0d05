"""The pane-tree meter reads /proc itself: its figures match psutil's on a real tree."""

from __future__ import annotations

import subprocess
import sys

import psutil
import pytest

from supervisor.panes.usage import UsageMeter, measure_tree
from tests.polling import poll

# A child thread forks a grandchild: a thread's children are listed under that thread.
THREADED = (
    "import subprocess, threading, time\n"
    "t = threading.Thread(target=lambda: subprocess.Popen(['sleep', '30']))\n"
    "t.start(); t.join(); time.sleep(30)\n"
)


@pytest.mark.timeout(30)
def test_measure_tree_matches_psutil_and_stops_at_the_limit() -> None:
    root = subprocess.Popen(
        ["/bin/sh", "-c", f'sleep 30 & {sys.executable} -c "$0" & wait', THREADED]
    )
    try:
        proc = psutil.Process(root.pid)
        poll(lambda: len(proc.children(recursive=True)) == 3, 10.0, what="the tree to grow")
        tree = [proc, *proc.children(recursive=True)]
        cpu_s, rss, count = measure_tree(root.pid)
        assert count == 4
        expected_rss = sum(p.memory_info().rss for p in tree)
        assert abs(rss - expected_rss) <= 0.05 * expected_rss, (rss, expected_rss)
        expected_cpu = sum(p.cpu_times().user + p.cpu_times().system for p in tree)
        assert abs(cpu_s - expected_cpu) <= 0.05, (cpu_s, expected_cpu)
        assert measure_tree(root.pid, limit=2)[2] == 2
    finally:
        for p in psutil.Process(root.pid).children(recursive=True):
            p.kill()
        root.kill()
        root.wait()
    assert measure_tree(root.pid) == (0.0, 0, 0)


@pytest.mark.timeout(30)
def test_a_recent_sample_is_reused_without_reading_proc() -> None:
    meter = UsageMeter(min_interval_s=60.0)
    child = subprocess.Popen(["sleep", "30"])
    try:
        first = meter.measure("p", child.pid)
        assert first["processes"] == 1 and first["cpu_percent"] is None
    finally:
        child.kill()
        child.wait()
    # The process is gone: a fresh walk would read zeros; the recent sample is reused.
    assert meter.measure("p", child.pid) == first
    # A pane re-created under the same name (another worker) is measured afresh.
    assert meter.measure("p", child.pid + 1_000_000)["processes"] == 0
