"""What ``panewarden watch`` draws: a pane's screen fitted to the operator's terminal and a
status line, as one string of terminal output (pure: no I/O).

The pane's size is the pane's (the viewer never resizes it): a screen wider or taller
than the terminal is cropped, a line cut short ends in a reverse-video ``>`` and the
status line says ``cropped``; rows are taken so the pane's cursor stays in view.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

_SGR = re.compile(r"\x1b\[[0-9;]*m")
RESET = "\x1b[0m"
CROP_MARK = "\x1b[0;7m>\x1b[0m"


def _width(char: str) -> int:
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def crop_line(line: str, width: int) -> tuple[str, bool]:
    """``line`` (text and SGR sequences) cut to ``width`` columns; True if cut."""
    out: list[str] = []
    used = 0
    pos = 0
    while pos < len(line):
        match = _SGR.match(line, pos)
        if match:
            out.append(match.group())
            pos = match.end()
            continue
        char = line[pos]
        w = _width(char)
        if used + w > width:
            return "".join(out) + RESET, True
        out.append(char)
        used += w
        pos += 1
    return "".join(out), False


def _fit(line: str, width: int) -> str:
    full, cut = crop_line(line, width)
    if not cut:
        return full + RESET
    return crop_line(line, max(0, width - 1))[0] + CROP_MARK


@dataclass
class WatchState:
    """What the viewer knows: the pane's latest status and screen."""

    pane: str
    status: dict[str, Any] = field(default_factory=dict)
    screen: dict[str, Any] | None = None


def status_line(state: WatchState, cropped: bool) -> str:
    """The one-line summary: state, kind, turn, seq, lifecycle, confined, lease."""
    s = state.status
    lease = s.get("lease")
    parts = [
        state.pane,
        f"state={s.get('state', '?')}",
        f"kind={s.get('kind') or '-'}",
        f"turn={s.get('turn', '?')}",
        f"seq={s.get('seq', '?')}",
        f"lifecycle={s.get('lifecycle', '?')}",
        f"confined={'yes' if s.get('confined') else 'no'}",
        f"lease={lease['lease_type'] + ':' + lease['lease_id'] if lease else '-'}",
    ]
    if s.get("removed"):
        parts.append("REMOVED")
    if cropped and state.screen is not None:
        parts.append(f"cropped {state.screen['cols']}x{state.screen['rows']}")
    parts.append("(read-only, q quits)")
    return "  ".join(parts)


def render(state: WatchState, cols: int, rows: int) -> str:
    """The whole view for a ``cols`` x ``rows`` terminal: home, screen rows, status line."""
    body_rows = max(0, rows - 1)
    out = ["\x1b[H"]
    cropped = False
    screen = state.screen
    lines: list[str] = []
    if screen is not None:
        lines = list(screen["lines"])
        cursor_row = int(screen["cursor"][0])
        start = 0
        if len(lines) > body_rows:
            cropped = True
            start = max(0, min(cursor_row - body_rows + 1, len(lines) - body_rows))
        lines = lines[start : start + body_rows]
        cropped = cropped or int(screen["cols"]) > cols
    for row in range(body_rows):
        line = lines[row] if row < len(lines) else ""
        out.append(_fit(line, cols) + "\x1b[K")
        out.append("\r\n")
    summary, _ = crop_line(status_line(state, cropped), cols)
    out.append("\x1b[0;7m" + summary + "\x1b[K" + RESET)
    return "".join(out)
