"""The output of one turn: what the screen changed after the prompt that started it.

When a prompt is typed the worker marks where the screen stood (``TurnMark``): how many
lines the scrollback held, its newest line, and the visible rows. A turn's output is
then every line from the first one that differs from the mark to the end, however the
program drew it: a line-oriented program's output starts at the prompt line it echoed;
an Ink or ratatui TUI that erases and redraws the rows above the cursor on submit has
its output start at the topmost row it rewrote; a full-screen program that repainted
everything gives its whole screen. Rows above the first difference are what earlier
turns left, unchanged, and are not part of this turn.

Scrollback lines never change once scrolled off, so only the visible rows are kept in
the mark, and they are where they were as long as the scrollback only grew. When it lost
lines (a program that clears it and draws its transcript again, as Claude Code does on
submit; a scrollback trimmed at its bound; a resize that reflowed it), the marked rows are
looked for by their content instead. Found nowhere, there is no safe cut and the caller
falls back to the newest lines.

A row the program repaints above the turn (Claude Code's banner logo animates for
seconds after start-up, longer on a loaded machine) differs from the mark too, and would
pull everything below it into the turn. So when the prompt's echo is on screen at or
after the first difference, the output starts at the echo: every agent CLI echoes the
submitted prompt at the top of its turn. A prompt too short to be told from other text
(``ECHO_MIN_CHARS``), or one shown otherwise (a paste collapsed to a placeholder), keeps
the first difference.

Marks are kept per input cursor (the seq a ``WriteInput`` reply returned), the newest
``MAX_MARKS`` of them: a receipt is collected while its turn is the pane's latest.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

# Marks kept per pane: prompts whose turn output may still be asked for.
MAX_MARKS = 16
# The echo looked for is the start of the prompt's first line, this long at most, and
# not looked for when shorter than ECHO_MIN_CHARS ("y" or "1" is in too many rows).
ECHO_CHARS = 16
ECHO_MIN_CHARS = 4


@dataclass(frozen=True)
class TurnMark:
    """Where the screen stood when a prompt was typed."""

    history_len: int
    # The oldest and newest scrollback lines then (None with an empty scrollback): both
    # must still be where they were for the mark to line up (a trimmed scrollback lost
    # its oldest lines and moved the rest).
    history_head: str | None
    history_tail: str | None
    display: tuple[str, ...]
    # The start of the prompt as its echo shows it (whitespace runs squeezed), or "".
    echo: str = ""


def take_mark(history: list[str], display: list[str], prompt: str = "") -> TurnMark:
    """The mark of a screen whose scrollback and visible rows are these, before
    ``prompt`` is typed."""
    head, tail = (history[0], history[-1]) if history else (None, None)
    return TurnMark(len(history), head, tail, tuple(display), _echo_of(prompt))


def _squeeze(text: str) -> str:
    return " ".join(text.split())


def _echo_of(prompt: str) -> str:
    first = next((line for line in prompt.splitlines() if line.strip()), "")
    echo = _squeeze(first)[:ECHO_CHARS].strip()
    return echo if len(echo) >= ECHO_MIN_CHARS else ""


def rows_since(mark: TurnMark, history: list[str], display: list[str]) -> list[str] | None:
    """The lines written since ``mark``: from the first row that differs from the mark
    to the end. None when the screen no longer lines up with the mark."""
    rows = history + display
    base = _base_in_place(mark, history)
    if base is None:
        base = _base_redrawn(mark, rows)
    if base is None:
        return None
    start = base + _same_run(mark.display, rows, base)
    return rows[_echo_at(mark.echo, rows, start) :]


def _echo_at(echo: str, rows: list[str], start: int) -> int:
    """The first row from ``start`` on that shows ``echo``; ``start`` without one."""
    if echo:
        for at in range(start, len(rows)):
            if echo in _squeeze(rows[at]):
                return at
    return start


def _base_in_place(mark: TurnMark, history: list[str]) -> int | None:
    """Where the marked rows are now, if the scrollback only grew since: the scrollback
    length then, or None when it lost lines (cleared, trimmed, reflowed)."""
    at = mark.history_len
    if len(history) < at:
        return None
    if at and (history[0] != mark.history_head or history[at - 1] != mark.history_tail):
        return None
    return at


def _base_redrawn(mark: TurnMark, rows: list[str]) -> int | None:
    """Where the marked rows are now, found by their content: for a program that cleared
    its scrollback and drew its transcript again (Claude Code does on submit). The copy
    of the marked rows with the longest run of equal rows wins, the newest of equals;
    None when no non-blank row of the mark is found again."""
    display = mark.display
    anchor = next((i for i, row in enumerate(display) if row.strip()), None)
    if anchor is None:
        return None
    wanted = display[anchor].rstrip()
    best: tuple[int, int] | None = None  # (run, base)
    for at, row in enumerate(rows):
        if row.rstrip() != wanted or at < anchor:
            continue
        base = at - anchor
        run = _same_run(display, rows, base)
        if best is None or run >= best[0]:
            best = (run, base)
    return None if best is None else best[1]


def _same_run(display: tuple[str, ...], rows: list[str], base: int) -> int:
    """How many marked rows, from the first, are still the same at ``base`` on."""
    run = 0
    for before in display:
        at = base + run
        if at >= len(rows) or rows[at].rstrip() != before.rstrip():
            break
        run += 1
    return run


class TurnMarks:
    """The newest marks of one pane, by the input cursor of the prompt that took them."""

    def __init__(self, limit: int = MAX_MARKS) -> None:
        self._limit = limit
        self._marks: OrderedDict[int, TurnMark] = OrderedDict()

    def record(self, cursor: int, mark: TurnMark) -> None:
        """Keep ``mark`` for ``cursor``; a later prompt at the same cursor (nothing the
        first caused was recorded) replaces it, so the mark is the latest prompt's."""
        self._marks.pop(cursor, None)
        self._marks[cursor] = mark
        while len(self._marks) > self._limit:
            self._marks.popitem(last=False)

    def get(self, cursor: int) -> TurnMark | None:
        """The mark of the prompt typed at ``cursor``, if still kept."""
        return self._marks.get(cursor)
