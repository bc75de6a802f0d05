"""What ``panewarden watch`` draws: a pane's screen fitted to the operator's terminal and a
status line, as one string of terminal output (pure: no I/O).

The pane's size is the pane's (the viewer never resizes it): a screen wider or taller
than the terminal is cropped, a line cut short ends in a reverse-video ``>`` and the
status line says ``cropped``; rows are taken so the pane's cursor stays in view.

What the service sent is data: a screen line keeps its colour (SGR) sequences and
nothing else of the kind, every status field is cleaned (``terminal_safe``) and a field
of the wrong type shows as ``?``; a screen that is not one is not drawn.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from protocol.terminal_text import terminal_safe

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


def _field(value: Any, absent: str = "?") -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        return absent
    return terminal_safe(value)[:120]


def _screen(data: dict[str, Any] | None) -> tuple[list[str], int, int, int] | None:
    """The lines, cursor row, cols and rows of a screen event, or None if it is not one."""
    if data is None:
        return None
    lines, cursor, cols, rows = (data.get(k) for k in ("lines", "cursor", "cols", "rows"))
    if not isinstance(lines, list) or not all(isinstance(line, str) for line in lines):
        return None
    if not isinstance(cursor, list) or not cursor or not isinstance(cursor[0], int):
        return None
    if not isinstance(cols, int) or not isinstance(rows, int):
        return None
    return lines, cursor[0], cols, rows


def status_line(state: WatchState, cropped: bool) -> str:
    """The one-line summary: state, kind, turn, seq, lifecycle, confined, lease."""
    s = state.status
    lease = s.get("lease")
    held = "-"
    if isinstance(lease, dict):
        held = _field(lease.get("lease_type")) + ":" + _field(lease.get("lease_id"))
    parts = [
        terminal_safe(state.pane),
        f"state={_field(s.get('state'))}",
        f"kind={_field(s.get('kind'), '-') if s.get('kind') else '-'}",
        f"turn={_field(s.get('turn'))}",
        f"seq={_field(s.get('seq'))}",
        f"lifecycle={_field(s.get('lifecycle'))}",
        f"confined={'yes' if s.get('confined') is True else 'no'}",
        f"lease={held}",
    ]
    if s.get("removed"):
        parts.append("REMOVED")
    screen = _screen(state.screen)
    if cropped and screen is not None:
        parts.append(f"cropped {screen[2]}x{screen[3]}")
    parts.append("(read-only, q quits)")
    return "  ".join(parts)


def render(state: WatchState, cols: int, rows: int) -> str:
    """The whole view for a ``cols`` x ``rows`` terminal: home, screen rows, status line."""
    body_rows = max(0, rows - 1)
    out = ["\x1b[H"]
    cropped = False
    screen = _screen(state.screen)
    lines: list[str] = []
    if screen is not None:
        lines, cursor_row, screen_cols, _ = screen
        start = 0
        if len(lines) > body_rows:
            cropped = True
            start = max(0, min(cursor_row - body_rows + 1, len(lines) - body_rows))
        lines = [terminal_safe(line, keep_sgr=True) for line in lines[start : start + body_rows]]
        cropped = cropped or screen_cols > cols
    for row in range(body_rows):
        line = lines[row] if row < len(lines) else ""
        out.append(_fit(line, cols) + "\x1b[K")
        out.append("\r\n")
    summary, _ = crop_line(status_line(state, cropped), cols)
    out.append("\x1b[0;7m" + summary + "\x1b[K" + RESET)
    return "".join(out)
