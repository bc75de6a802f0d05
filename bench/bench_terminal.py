"""Emulator throughput: panewarden's Terminal against stock pyte, in one run.

Feeds the recorded real-CLI streams (tests/captured) and a synthetic stream of
plain text lines repeatedly, in 4 KiB chunks, and reports the median MB/s of
several rounds for each emulator and their ratio. Run:

    .venv/bin/python bench/bench_terminal.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import pyte

from paneworker.terminal import Terminal

ROOT = Path(__file__).resolve().parent.parent
ROUNDS = 7
CHUNK = 4096


def _streams() -> dict[str, bytes]:
    captured = b"".join(p.read_bytes() for p in sorted((ROOT / "tests/captured").glob("*/*.bin")))
    line = b"line %06d: the quick brown fox jumps over the lazy dog\r\n"
    text = b"".join(line % i for i in range(20000))
    return {"recorded-cli": captured * 4, "plain-text": text}


def _ours(data: bytes) -> float:
    term = Terminal(120, 40, reply=lambda _b: None, on_report=lambda _r: None)
    start = time.perf_counter()
    for i in range(0, len(data), CHUNK):
        term.feed(data[i : i + CHUNK])
    return time.perf_counter() - start


def _stock(data: bytes) -> float:
    screen = pyte.HistoryScreen(120, 40, history=5000)
    stream = pyte.ByteStream(screen)
    start = time.perf_counter()
    for i in range(0, len(data), CHUNK):
        try:
            stream.feed(data[i : i + CHUNK])
        except Exception:  # stock pyte raises on some real-CLI sequences (see agents.md)
            stream = pyte.ByteStream(screen)
    return time.perf_counter() - start


def main() -> int:
    print(f"{'stream':<14}{'bytes':>10}{'ours MB/s':>12}{'pyte MB/s':>12}{'ratio':>8}")
    for name, data in _streams().items():
        ours = [len(data) / _ours(data) / 1e6 for _ in range(ROUNDS)]
        stock = [len(data) / _stock(data) / 1e6 for _ in range(ROUNDS)]
        mo, ms = statistics.median(ours), statistics.median(stock)
        print(f"{name:<14}{len(data):>10}{mo:>12.2f}{ms:>12.2f}{mo / ms:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
