"""What both emulator backends do with zero-width characters, in one place.

A zero-width character is either a mark that sits on the glyph before it (categories
Mn, Me, Mc, variation selectors excepted) or has no glyph at all (joiners, variation
selectors, BOM, bidi controls such as U+202E and U+2066–2069, the line and paragraph
separators U+2028/9) and is dropped: none of those may reorder or split what a reader
of the text sees. A cell holds at most ``MAX_MARKS`` marks after its base character;
further ones are dropped (and counted), so a flood of marks costs what as much plain
text does instead of growing one cell without bound.
"""

from __future__ import annotations

import re
import unicodedata

from pyte.screens import wcwidth

# Marks kept on one cell (after NFC); the rest of a run is dropped.
MAX_MARKS = 16
_MARK_CATEGORIES = frozenset({"Mn", "Me", "Mc"})
# A run of non-ASCII characters long enough to hold more marks than a cell keeps.
_LONG_RUN = re.compile(f"[^\\x00-\\x7f]{{{MAX_MARKS + 1},}}")
# Code points whose verdict a ``DropTable`` keeps before it starts over.
_MAX_CACHED = 4096


def is_variation_selector(char: str) -> bool:
    """U+FE00–FE0F and U+E0100–E01EF."""
    code = ord(char)
    return 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF


def is_mark(char: str) -> bool:
    """A zero-width mark drawn on the glyph before it."""
    return (
        wcwidth(char) == 0
        and unicodedata.category(char) in _MARK_CATEGORIES
        and not is_variation_selector(char)
    )


def is_dropped(char: str) -> bool:
    """A character without a glyph of its own that is not a mark: never shown."""
    width = wcwidth(char)
    return width < 0 or (width == 0 and not is_mark(char))


class DropTable(dict[int, int | None]):
    """A ``str.translate`` table that deletes what :func:`is_dropped` says, each verdict
    computed once (bounded: it starts over past ``_MAX_CACHED`` code points)."""

    def __missing__(self, code: int) -> int | None:
        if len(self) >= _MAX_CACHED:
            self.clear()
        char = chr(code)
        verdict = None if code >= 0x80 and is_dropped(char) else code
        self[code] = verdict
        return verdict


def cap_marks(text: str, is_mark_char: dict[str, bool]) -> tuple[str, int]:
    """``text`` with every run of marks cut to ``MAX_MARKS``, and how many were cut.

    ``is_mark_char`` caches :func:`is_mark` per character (the caller bounds it). Only
    runs of more than ``MAX_MARKS`` non-ASCII characters are looked at, character by
    character: most text (box drawing aside) has none, and is returned as it is.
    """
    if not _LONG_RUN.search(text):
        return text, 0
    dropped = 0

    def cut(match: re.Match[str]) -> str:
        nonlocal dropped
        kept, count = _cap_run(match.group(), is_mark_char)
        dropped += count
        return kept

    out = _LONG_RUN.sub(cut, text)
    return (out, dropped) if dropped else (text, 0)


def _cap_run(text: str, is_mark_char: dict[str, bool]) -> tuple[str, int]:
    out: list[str] = []
    run = dropped = start = 0
    for index, char in enumerate(text):
        mark = is_mark_char.get(char)
        if mark is None:
            if len(is_mark_char) >= _MAX_CACHED:
                is_mark_char.clear()
            mark = is_mark_char[char] = is_mark(char)
        if not mark:
            run = 0
            continue
        run += 1
        if run > MAX_MARKS:
            out.append(text[start:index])
            start = index + 1
            dropped += 1
    if not dropped:
        return text, 0
    out.append(text[start:])
    return "".join(out), dropped
