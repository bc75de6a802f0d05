"""The visible screen as ANSI text: one line per row, colours and attributes as SGR.

Built from the backend-neutral ``Cell`` (so pyte and ghostty render alike): each line
starts in the default style, emits an SGR sequence only where the style changes, and
ends with a reset when it left the default style, so a viewer can crop or place any
line on its own. Trailing default-styled blanks are dropped.
"""

from __future__ import annotations

import re

from paneworker.screen.emulator.base import Cell

_NAMES = ["black", "red", "green", "brown", "blue", "magenta", "cyan", "white"]
_BASE = {name: i for i, name in enumerate(_NAMES)}
_DEFAULT = ("default", "default", False, False)
RESET = "\x1b[0m"


def _colour(value: str, background: bool) -> str:
    if value == "default":
        return "49" if background else "39"
    bright = value.startswith("bright")
    index = _BASE.get(value.removeprefix("bright"))
    if index is not None:
        base = (100 if background else 90) if bright else (40 if background else 30)
        return str(base + index)
    if len(value) == 6:
        try:
            r, g, b = (int(value[i : i + 2], 16) for i in (0, 2, 4))
        except ValueError:
            return "49" if background else "39"
        return f"{48 if background else 38};2;{r};{g};{b}"
    return "49" if background else "39"


def _sgr(style: tuple[str, str, bool, bool]) -> str:
    fg, bg, reverse, bold = style
    parts = ["0"]
    if bold:
        parts.append("1")
    if reverse:
        parts.append("7")
    if fg != "default":
        parts.append(_colour(fg, False))
    if bg != "default":
        parts.append(_colour(bg, True))
    return f"\x1b[{';'.join(parts)}m"


def ansi_line(cells: list[Cell]) -> str:
    """One row as ANSI text (see the module docstring)."""
    end = len(cells)
    while end and cells[end - 1].char in (" ", "") and _style(cells[end - 1])[1:] == _DEFAULT[1:]:
        end -= 1
    out: list[str] = []
    current = _DEFAULT
    for cell in cells[:end]:
        if cell.char == "":
            continue  # the second half of a wide character
        style = _style(cell)
        if style != current:
            out.append(_sgr(style))
            current = style
        out.append(cell.char if cell.char.isprintable() else " ")
    if current != _DEFAULT:
        out.append(RESET)
    return "".join(out)


def _style(cell: Cell) -> tuple[str, str, bool, bool]:
    return (cell.fg, cell.bg, cell.reverse, cell.bold)


# What a formatter may put around the SGR: OSC strings (ghostty's palette preamble), other
# CSI sequences and lone escapes. Only SGR stays.
_NOT_SGR = re.compile(r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b\[[0-9;:?]*[A-Za-ln-z@`]|\x1b[^\[\]]")
_SGR = re.compile(r"\x1b\[[0-9;:]*m")
_RESETS = ("\x1b[0m", "\x1b[m")


def per_line_sgr(text: str, rows: int) -> list[str]:
    """A formatter's VT text of the screen as ``rows`` self-contained ANSI lines: only SGR
    kept, each line starting with the style the previous one left open and ending reset."""
    clean = _NOT_SGR.sub("", text)
    lines = clean.replace("\r\n", "\n").split("\n")[:rows]
    lines += [""] * (rows - len(lines))
    out: list[str] = []
    carry = ""
    for line in lines:
        body = carry + line
        open_style = carry
        for match in _SGR.finditer(line):
            sequence = match.group()
            open_style = "" if sequence in _RESETS else open_style + sequence
        carry = open_style
        if not _SGR.sub("", line):
            out.append("")  # nothing drawn: the open style only matters to later lines
        else:
            out.append(body + RESET if _SGR.search(body) else body)
    return out
