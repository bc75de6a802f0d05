"""Emulator throughput per backend on the realistic stream, against stock pyte.

Each backend is fed the whole stream the way the worker feeds it (64 KiB reads into
the backlog, then a catch-up), so the figure includes the raw-byte scanner and
the answers path. The reference is stock pyte (``ByteStream`` + ``HistoryScreen``,
what panewarden started from), measured in the same run on the first 2 MiB only:
it is too slow for the whole stream.

Two figures per backend: wall-clock MB/s, and MB per second of the process's own CPU
time (``time.process_time``), which other tenants of a shared machine disturb less.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import pyte

from bench.core import Figure, Options
from bench.streams import COLS, ROWS, realistic_stream
from paneworker.screen.emulator import EmulatorUnavailable, check_available
from paneworker.screen.terminal import Terminal

READ_BYTES = 65536
STOCK_BYTES = 512 * 1024
# Issue 21's goals (issue 9 asked 5 MB/s of pyte).
GOALS = {"pyte": 8.0, "ghostty": 100.0}


def installed_backends() -> list[str]:
    found = []
    for kind in ("pyte", "ghostty"):
        try:
            check_available(kind)
        except EmulatorUnavailable:
            continue
        found.append(kind)
    return found


def _ours(kind: str, data: bytes) -> tuple[float, float]:
    """(wall-clock MB/s, CPU-time MB/s)."""
    term = Terminal(COLS, ROWS, reply=lambda _b: None, on_report=lambda _r: None, emulator=kind)
    start, cpu = time.perf_counter(), time.process_time()
    for offset in range(0, len(data), READ_BYTES):
        term.receive(data[offset : offset + READ_BYTES])
        term.catch_up()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    term.close()
    return len(data) / elapsed / 1e6, len(data) / cpu / 1e6


def _stock(data: bytes) -> float:
    screen = pyte.HistoryScreen(COLS, ROWS, history=5000)
    stream = pyte.ByteStream(screen)
    start = time.perf_counter()
    for offset in range(0, len(data), READ_BYTES):
        try:
            stream.feed(data[offset : offset + READ_BYTES])
        except Exception:  # stock pyte raises on some sequences; it is only a reference
            stream = pyte.ByteStream(screen)
    return len(data) / (time.perf_counter() - start) / 1e6


def run(options: Options) -> Sequence[Figure]:
    data = realistic_stream(options.stream_bytes)
    stock_data = data[: len(data) // 8 if options.smoke else STOCK_BYTES]
    stock = [_stock(stock_data) for _ in range(options.rounds)]
    figures = []
    for kind in installed_backends():
        runs = [_ours(kind, data) for _ in range(options.rounds)]
        figures.append(
            Figure(
                name=f"throughput.{kind}.cpu",
                unit="MB/cpu-s",
                values=[cpu for _wall, cpu in runs],
                goal=f">= {GOALS[kind]:g}",
                lower_is_better=False,
                limit=GOALS[kind],
                note="per second of the emulating process's CPU time",
            )
        )
        figures.append(
            Figure(
                name=f"throughput.{kind}",
                unit="MB/s",
                values=[wall for wall, _cpu in runs],
                reference="stock pyte",
                reference_values=stock,
                goal=f">= {GOALS[kind]:g} MB/s",
                lower_is_better=False,
                limit=GOALS[kind],
                limit_on_ratio=False,
                note=f"{len(data)} bytes, {COLS}x{ROWS}, 5000 lines of scrollback",
            )
        )
    return figures
