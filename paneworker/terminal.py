"""The pane's terminal: what a program on the PTY sees, and what the worker reads back.

:class:`Terminal` is the narrow API the worker uses. Behind it, three parts:

- :mod:`paneworker.terminal_parser` tokenises the byte stream (UTF-8 and sequences
  split across feeds, DCS/APC/PM/SOS parsed and dropped, nothing printed from a
  sequence's parameters);
- :mod:`paneworker.terminal_dispatch` gives each token its meaning: screen updates,
  query answers through ``reply`` (DA1/DA2, CPR, XTVERSION, colours, DECRQM,
  XTWINOPS, XTGETTCAP; the kitty keyboard query is deliberately left unanswered),
  and OSC 7501;
- :mod:`paneworker.terminal_screen` is the pyte screen with an alternate buffer,
  bounded scrollback and the fixes real CLIs need.

Status records: the terminal keeps :attr:`Terminal.records` itself: it applies
every valid OSC 7501 report, clears all records on RIS (``ESC c``) and drops
working/blocked ones on OSC 133 ``A``. ``on_report`` is a notification of each
valid report in stream order; the optional ``on_root_change`` is called, also in
stream order, whenever the root record changes for any of those reasons. Process
exit is the worker's to signal, with ``records.drop_transient()``.

``feed`` never raises: an error while handling one sequence is logged and confined
to that sequence.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from paneworker.osc7501 import StatusRecords, StatusReport
from paneworker.terminal_dispatch import Dispatcher
from paneworker.terminal_parser import SequenceParser
from paneworker.terminal_screen import PaneScreen

_LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class Cell:
    """One screen cell with the attributes a dialog recogniser compares.

    Colours are pyte's values: ``"default"``, a colour name such as ``"red"`` or
    ``"brightgreen"``, or six hex digits for 256-colour and true-colour SGR.
    """

    char: str
    fg: str
    bg: str
    reverse: bool
    bold: bool


class Terminal:
    """A faithful-enough terminal for one pane; see the module docstring."""

    def __init__(
        self,
        cols: int,
        rows: int,
        *,
        reply: Callable[[bytes], None],
        on_report: Callable[[StatusReport], None],
        history_lines: int = 5000,
        on_root_change: Callable[[StatusReport | None], None] | None = None,
    ) -> None:
        """Raises: ValueError if a size is below 1 or ``history_lines`` is negative."""
        if cols < 1 or rows < 1:
            raise ValueError("cols and rows must be at least 1")
        if history_lines < 0:
            raise ValueError("history_lines must not be negative")
        self._screen = PaneScreen(cols, rows, history_lines)
        self._screen.dirty.clear()
        self._dispatch = Dispatcher(
            self._screen, reply=reply, on_report=on_report, on_root_change=on_root_change
        )
        self._parser = SequenceParser(self._dispatch)
        self._generation = 0

    @property
    def records(self) -> StatusRecords:
        """The OSC 7501 records this terminal holds (root = the pane's own state)."""
        return self._dispatch.records

    @property
    def title(self) -> str:
        """The window title the program last set (OSC 0 or 2), printable characters only."""
        return self._dispatch.title

    @property
    def cols(self) -> int:
        return self._screen.columns

    @property
    def rows(self) -> int:
        return self._screen.lines

    @property
    def cursor(self) -> tuple[int, int]:
        """(row, col), 0-based; a pending wrap reports the last column."""
        c = self._screen.cursor
        return c.y, min(c.x, self._screen.columns - 1)

    @property
    def bracketed_paste(self) -> bool:
        return 2004 in self._dispatch.dec_modes

    @property
    def application_cursor_keys(self) -> bool:
        """DECCKM (``?1``): arrow keys should be sent as ``ESC O A`` rather than ``ESC [ A``."""
        return 1 in self._dispatch.dec_modes

    @property
    def alternate_active(self) -> bool:
        return self._screen.alternate_active

    @property
    def text_generation(self) -> int:
        """Increases whenever visible text may have changed."""
        return self._generation

    def feed(self, data: bytes) -> None:
        """Consume program output; never raises, never drops bytes after a bad sequence."""
        try:
            self._parser.feed(data)
        except Exception:  # last-resort boundary: the dispatcher already contains errors
            _LOG.exception("terminal: parser failure; chunk tail lost")
        self._settle()

    def resize(self, cols: int, rows: int) -> None:
        """Raises: ValueError if a size is below 1."""
        if cols < 1 or rows < 1:
            raise ValueError("cols and rows must be at least 1")
        self._screen.resize(rows, cols)
        self._settle()

    def display_lines(self) -> list[str]:
        """The visible rows (alternate screen when active), right-stripped."""
        buffer, columns = self._screen.buffer, self._screen.columns
        out: list[str] = []
        for y in range(self._screen.lines):
            line = buffer.get(y)
            out.append("".join([line[x].data for x in range(columns)]).rstrip() if line else "")
        return out

    def history_lines(self) -> list[str]:
        """Main-screen scrollback, oldest first, right-stripped."""
        out: list[str] = []
        for line in self._screen.history:
            width = max(line) + 1 if line else 0
            out.append("".join([line[x].data for x in range(width)]).rstrip())
        return out

    def cells(self, row: int) -> list[Cell]:
        """Styled cells of a visible row; a wide character's second cell has ``char == ""``.

        Raises: IndexError if ``row`` is not a visible row.
        """
        if not 0 <= row < self._screen.lines:
            raise IndexError(row)
        columns = self._screen.columns
        line = self._screen.buffer.get(row)
        chars = [line[x] for x in range(columns)] if line else [self._screen.default_char] * columns
        return [Cell(c.data, c.fg, c.bg, c.reverse, c.bold) for c in chars]

    def _settle(self) -> None:
        if self._screen.dirty:
            self._screen.dirty.clear()
            self._generation += 1
