"""Deterministic output streams for the benchmarks.

:func:`realistic_stream` is what a busy coding CLI prints: log and diff lines in
16-, 256- and true-colour SGR, a status line redrawn in place with cursor moves
and erases, wide characters (CJK, emoji) and box drawing, progress bars, and an
OSC 7501 report now and then. The same seed always gives the same bytes, so a
figure measured today compares with one measured tomorrow.
"""

from __future__ import annotations

import random

WORDS = [
    "build",
    "test",
    "compile",
    "module",
    "request",
    "handler",
    "worker",
    "pane",
    "status",
    "cursor",
    "render",
    "buffer",
    "screen",
    "output",
    "input",
    "parser",
    "token",
    "scroll",
    "history",
    "region",
    "margin",
    "colour",
    "attribute",
    "wide",
    "grapheme",
    "error",
    "warning",
    "note",
    "info",
    "debug",
    "trace",
    "span",
    "event",
    "queue",
]
WIDE = ["中文", "测试", "日本語", "한국어", "✓", "●", "⏺", "…", "→", "🙂", "🚀", "│", "─"]
# A syntax-highlighting theme: true colours come from a small palette, as in real CLIs.
THEME = [
    (198, 120, 221),
    (97, 175, 239),
    (152, 195, 121),
    (229, 192, 123),
    (224, 108, 117),
    (86, 182, 194),
    (171, 178, 191),
    (209, 154, 102),
    (92, 99, 112),
    (190, 80, 70),
    (255, 203, 107),
    (130, 170, 255),
]
COLS = 200
ROWS = 50


def _line(rng: random.Random, width: int) -> str:
    words: list[str] = []
    used = 0
    while used < width:
        word = rng.choice(WORDS) if rng.random() > 0.08 else rng.choice(WIDE)
        words.append(word)
        used += len(word) + 1
    return " ".join(words)[: max(8, width - 10)]


def _chunk(rng: random.Random, n: int) -> str:
    """One block of output: a few kinds of lines in the proportions a CLI shows them."""
    pick = rng.random()
    if pick < 0.35:  # log line, 16 colours
        level = rng.choice(["\x1b[32mINFO", "\x1b[33mWARN", "\x1b[31mERROR", "\x1b[2mDEBUG"])
        return f"\x1b[2m{n:08d}\x1b[0m {level}\x1b[0m {_line(rng, rng.randint(40, 150))}\r\n"
    if pick < 0.55:  # diff line, 256 colours with background
        sign, colour = rng.choice([("+", 22), ("-", 52), (" ", 236)])
        body = _line(rng, rng.randint(30, 120))
        return (
            f"\x1b[38;5;246m{n % 9999:>5} \x1b[48;5;{colour}m\x1b[38;5;255m{sign} {body}\x1b[0m\r\n"
        )
    if pick < 0.7:  # true-colour highlighted code
        parts = []
        for _ in range(rng.randint(3, 9)):
            r, g, b = rng.choice(THEME)
            parts.append(f"\x1b[38;2;{r};{g};{b}m{rng.choice(WORDS)}\x1b[39m ")
        return "    " + "".join(parts) + "\r\n"
    if pick < 0.85:  # spinner / status line redrawn in place at the bottom
        spinner = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"[n % 10]
        return (
            f"\x1b7\x1b[{ROWS};1H\x1b[2K\x1b[1;38;5;174m{spinner}\x1b[22m "
            f"\x1b[38;5;246mWorking… {n % 600}s · esc to interrupt\x1b[39m\x1b8"
        )
    if pick < 0.93:  # a box with wide characters and cursor moves
        width = rng.randint(30, 80)
        top = "╭" + "─" * width + "╮"
        mid = "│ " + _line(rng, width - 4).ljust(width - 2)[: width - 2] + " │"
        bot = "╰" + "─" * width + "╯"
        return f"\x1b[38;5;153m{top}\r\n{mid}\r\n\x1b[1A\x1b[{width}C\x1b[1B\r{bot}\x1b[0m\r\n"
    if pick < 0.995:  # progress bar on one line, then a newline
        done = rng.randint(0, 40)
        bar = "█" * done + "░" * (40 - done)
        note = f"\x1b[90m{_line(rng, 30)}\x1b[0m"
        return f"\r\x1b[K\x1b[36m[{bar}]\x1b[0m {done * 100 // 40:3d}% {note}\r\n"
    state = rng.choice(["working", "idle"])
    return f"\x1b]7501;state={state}:app=bench\x07"


def realistic_stream(size: int = 20 * 1024 * 1024, seed: int = 9) -> bytes:
    """About ``size`` bytes (at least), ending with a visible marker line."""
    rng = random.Random(seed)
    parts: list[bytes] = []
    total = 0
    n = 0
    while total < size:
        block = _chunk(rng, n).encode()
        parts.append(block)
        total += len(block)
        n += 1
    parts.append(b"\x1b[0m\r\nEND OF STREAM\r\n")
    return b"".join(parts)
