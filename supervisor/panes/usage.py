"""CPU and memory of each pane's process tree, as ``list_panes`` reports them.

A pane's tree is its worker and every descendant (the program, its children, adopted
orphans the worker reaps), walked through ``/proc/PID/task/TID/children`` (cheap: no
scan of the whole process table) and measured with psutil, at most
``MAX_TREE_PROCESSES`` processes a pane. CPU% needs two samples: the meter keeps the
previous one per pane and reports the share of one CPU the tree used between two
calls (100 = one core busy); the first call for a pane reports ``None``.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

import psutil

# A fork bomb in a pane must not make list_panes slow: the walk stops there.
MAX_TREE_PROCESSES = 256
# Two calls closer than this reuse the last figure: a delta over a few milliseconds
# is noise, and several clients listing at once must not reset each other's baseline.
MIN_SAMPLE_INTERVAL_S = 0.5


class Usage(TypedDict):
    """One pane's tree: CPU% since the previous sample, resident memory, process count."""

    cpu_percent: float | None
    rss_bytes: int
    processes: int


def tree_pids(root: int, limit: int = MAX_TREE_PROCESSES) -> list[int]:
    """``root`` and its descendants (breadth first, at most ``limit``), empty if it is gone."""
    if not Path(f"/proc/{root}").exists():
        return []
    found = [root]
    seen = {root}
    at = 0
    while at < len(found) and len(found) < limit:
        pid = found[at]
        at += 1
        for children in Path(f"/proc/{pid}/task").glob("*/children"):
            with contextlib.suppress(OSError, ValueError):
                for child in (int(p) for p in children.read_text().split()):
                    if child not in seen and len(found) < limit:
                        seen.add(child)
                        found.append(child)
    return found


def measure_tree(root: int) -> tuple[float, int, int]:
    """CPU seconds (user + system), RSS bytes and process count of ``root``'s tree."""
    cpu_s = 0.0
    rss = 0
    count = 0
    for pid in tree_pids(root):
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                times = proc.cpu_times()
                rss += proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        cpu_s += times.user + times.system
        count += 1
    return cpu_s, rss, count


@dataclass(slots=True)
class _Sample:
    worker_pid: int
    at: float
    cpu_s: float
    cpu_percent: float | None


@dataclass
class UsageMeter:
    """The previous sample of every pane, so that CPU% is a delta between two calls."""

    _samples: dict[str, _Sample] = field(default_factory=dict)

    def measure(self, name: str, worker_pid: int) -> Usage:
        """The usage of pane ``name``'s tree, rooted at ``worker_pid``."""
        cpu_s, rss, count = measure_tree(worker_pid)
        now = time.monotonic()
        previous = self._samples.get(name)
        if previous is None or previous.worker_pid != worker_pid:
            # A new pane, or a pane re-created under the same name: no baseline yet.
            self._samples[name] = _Sample(worker_pid, now, cpu_s, None)
            return {"cpu_percent": None, "rss_bytes": rss, "processes": count}
        elapsed = now - previous.at
        if elapsed < MIN_SAMPLE_INTERVAL_S:
            percent = previous.cpu_percent
        else:
            # A child that exited took its CPU time with it: the sum can shrink, never < 0.
            percent = round(max(0.0, cpu_s - previous.cpu_s) / elapsed * 100.0, 1)
            self._samples[name] = _Sample(worker_pid, now, cpu_s, percent)
        return {"cpu_percent": percent, "rss_bytes": rss, "processes": count}

    def forget_except(self, names: set[str]) -> None:
        """Drop the samples of panes that are gone (bounded by the live panes)."""
        for name in [n for n in self._samples if n not in names]:
            del self._samples[name]
