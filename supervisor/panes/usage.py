"""CPU and memory of each pane's process tree, as ``list_panes`` reports them.

A pane's tree is its worker and every descendant (the program, its children, adopted
orphans the worker reaps), walked through ``/proc/PID/task/TID/children`` (cheap: no
scan of the whole process table), at most ``MAX_TREE_PROCESSES`` processes a pane. Each
process costs one read of ``/proc/PID/stat`` (CPU time, resident pages, thread count)
and one read of ``children`` per thread: raw ``os`` calls, since ``list_panes`` pays
them for every pane (psutil and pathlib cost ~0.6 ms a pane; this ~30 µs). CPU% needs
two samples: the meter keeps the previous one per pane and reports the share of one CPU
the tree used between two calls (100 = one core busy); the first call for a pane
reports ``None``. A sample is at most ``MIN_SAMPLE_INTERVAL_S`` old when it is reused.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import TypedDict

# A fork bomb in a pane must not make list_panes slow: the walk stops there.
MAX_TREE_PROCESSES = 256
# Two calls closer than this reuse the last sample (every figure of it): a delta over a
# few milliseconds is noise, several clients listing at once must not reset each other's
# baseline, and a listing loop must not walk every tree on every call.
MIN_SAMPLE_INTERVAL_S = 0.5
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
# /proc/PID/stat after the command's closing parenthesis: field n is at index n - 3.
_UTIME, _STIME, _THREADS, _RSS = 14 - 3, 15 - 3, 20 - 3, 24 - 3


class Usage(TypedDict):
    """One pane's tree: CPU% since the previous sample, resident memory, process count."""

    cpu_percent: float | None
    rss_bytes: int
    processes: int


def _read(path: str) -> bytes | None:
    """A small /proc file's content, None if it (or its process) is gone."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, 65536)
    except OSError:
        return None
    finally:
        os.close(fd)


def _stat(pid: int) -> tuple[int, int, int] | None:
    """(CPU ticks user + system, resident pages, threads) of a live process."""
    data = _read(f"/proc/{pid}/stat")
    if not data:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X"):
        return None
    try:
        return int(fields[_UTIME]) + int(fields[_STIME]), int(fields[_RSS]), int(fields[_THREADS])
    except (IndexError, ValueError):
        return None


def _children(pid: int, threads: int) -> list[int]:
    """The children of every thread of ``pid`` (one read when it has one thread)."""
    if threads == 1:
        tids = [str(pid)]
    else:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return []
    out: list[int] = []
    for tid in tids:
        data = _read(f"/proc/{pid}/task/{tid}/children")
        if data:
            out.extend(int(p) for p in data.split())
    return out


def measure_tree(root: int, limit: int = MAX_TREE_PROCESSES) -> tuple[float, int, int]:
    """CPU seconds (user + system), RSS bytes and process count of ``root``'s tree
    (breadth first, at most ``limit`` processes; zeros if ``root`` is gone).

    ``root`` is a worker: only its main thread forks (its other threads are ZeroMQ's),
    and orphans it adopts as a subreaper are given to its first live thread, the main
    one; so only that thread's children are read for it. Below it, every thread's.
    """
    ticks = pages = count = 0
    queue = [root]
    seen = {root}
    at = 0
    while at < len(queue):
        pid = queue[at]
        at += 1
        stat = _stat(pid)
        if stat is None:
            continue
        ticks += stat[0]
        pages += stat[1]
        count += 1
        if len(queue) >= limit:
            continue
        for child in _children(pid, 1 if pid == root else stat[2]):
            if child not in seen and len(queue) < limit:
                seen.add(child)
                queue.append(child)
    return ticks / CLOCK_TICKS, pages * PAGE_BYTES, count


@dataclass(slots=True)
class _Sample:
    worker_pid: int
    at: float
    cpu_s: float
    usage: Usage


@dataclass
class UsageMeter:
    """The previous sample of every pane, so that CPU% is a delta between two calls."""

    min_interval_s: float = MIN_SAMPLE_INTERVAL_S
    _samples: dict[str, _Sample] = field(default_factory=dict)

    def measure(self, name: str, worker_pid: int) -> Usage:
        """The usage of pane ``name``'s tree, rooted at ``worker_pid``.

        A sample younger than ``min_interval_s`` is returned as it is, without
        reading ``/proc``: a tree walk costs a few reads a process, and a client that
        lists a thousand panes in a loop must not pay them on every call.
        """
        now = time.monotonic()
        previous = self._samples.get(name)
        if previous is not None and previous.worker_pid != worker_pid:
            # A pane re-created under the same name: no baseline yet.
            previous = None
        if previous is not None and now - previous.at < self.min_interval_s:
            return previous.usage
        cpu_s, rss, count = measure_tree(worker_pid)
        percent: float | None = None
        if previous is not None:
            # A child that exited took its CPU time with it: the sum can shrink, never < 0.
            elapsed = now - previous.at
            percent = round(max(0.0, cpu_s - previous.cpu_s) / elapsed * 100.0, 1)
        usage: Usage = {"cpu_percent": percent, "rss_bytes": rss, "processes": count}
        self._samples[name] = _Sample(worker_pid, now, cpu_s, usage)
        return usage

    def forget_except(self, names: set[str]) -> None:
        """Drop the samples of panes that are gone (bounded by the live panes)."""
        for name in [n for n in self._samples if n not in names]:
            del self._samples[name]
