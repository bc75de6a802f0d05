"""The pyte backend: panewarden's own parser driving a pyte-based screen.

Pure Python, always available, the default. :mod:`pyte_parser` tokenises,
:mod:`pyte_dispatch` applies tokens, :mod:`pyte_screen` is the screen.
"""

from __future__ import annotations

import logging

from pyte import modes as mo

from paneworker.screen.emulator.ansi import ansi_line
from paneworker.screen.emulator.base import Cell
from paneworker.screen.emulator.pyte_dispatch import PYTE_DEC_MODES, Dispatcher
from paneworker.screen.emulator.pyte_parser import SequenceParser
from paneworker.screen.emulator.pyte_screen import PaneScreen

_LOG = logging.getLogger(__name__)


class PyteModel:
    """A :class:`~paneworker.screen.emulator.base.ScreenModel` on pyte."""

    parse_chunk = 2048

    def __init__(self, cols: int, rows: int, history_lines: int) -> None:
        self._screen = PaneScreen(cols, rows, history_lines)
        self._screen.dirty.clear()
        self._dispatch = Dispatcher(self._screen)
        self._parser = SequenceParser(self._dispatch)
        self._generation = 0

    @property
    def dropped_marks(self) -> int:
        """Marks dropped from cells that already held ``MAX_MARKS``."""
        return self._screen.dropped_marks

    @property
    def cols(self) -> int:
        return int(self._screen.columns)

    @property
    def rows(self) -> int:
        return int(self._screen.lines)

    @property
    def cursor(self) -> tuple[int, int]:
        c = self._screen.cursor
        return c.y, min(c.x, self._screen.columns - 1)

    @property
    def alternate_active(self) -> bool:
        return self._screen.alternate_active

    @property
    def generation(self) -> int:
        return self._generation

    def feed(self, data: bytes) -> None:
        try:
            self._parser.feed(data)
        except Exception:  # last-resort boundary: the dispatcher already contains errors
            _LOG.exception("terminal: parser failure; chunk tail lost")
        self._settle()

    def resize(self, cols: int, rows: int) -> None:
        self._screen.resize(rows, cols)
        self._settle()

    def display_lines(self) -> list[str]:
        return self._screen.display_lines()

    def history_lines(self) -> list[str]:
        return self._screen.history_text()

    def cells(self, row: int) -> list[Cell]:
        return [Cell(c.data, c.fg, c.bg, c.reverse, c.bold) for c in self._screen.row_chars(row)]

    def styled_lines(self) -> list[str]:
        return [ansi_line(self.cells(row)) for row in range(self.rows)]

    def dec_mode(self, mode: int) -> bool:
        if mode in PYTE_DEC_MODES:
            return (mode << 5) in self._screen.mode
        if mode in (47, 1047, 1049):
            return mode in self._dispatch.dec_modes and self._screen.alternate_active
        return mode in self._dispatch.dec_modes

    def ansi_mode(self, mode: int) -> bool:
        return mode in (mo.IRM, mo.LNM) and mode in self._screen.mode

    def cursor_report(self) -> tuple[int, int]:
        s = self._screen
        row = s.cursor.y + 1
        if mo.DECOM in s.mode and s.margins is not None:
            row -= s.margins.top
        return row, min(s.cursor.x, s.columns - 1) + 1

    def compact(self) -> None:
        return  # scrollback is already plain text

    def _settle(self) -> None:
        if self._screen.dirty:
            self._screen.dirty.clear()
            self._generation += 1
