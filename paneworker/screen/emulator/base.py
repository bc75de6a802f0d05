"""What every emulator backend provides: a screen model fed with bytes.

A backend is only a screen: it draws what the program prints and keeps modes,
cursor and scrollback. It answers no query and knows nothing of OSC 7501; the
:class:`~paneworker.screen.terminal.Terminal` in front of it finds those sequences in
the raw bytes and handles them identically for every backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class EmulatorUnavailable(Exception):
    """The chosen backend cannot run here (its optional package is not installed)."""


@dataclass(frozen=True)
class Cell:
    """One screen cell with the attributes a dialog recogniser compares.

    Colours: ``"default"``; a name for the 16 ANSI colours (``"red"``, ``"brown"``
    for yellow, ``"brightgreen"``...; pyte's names); six hex digits for the other
    256-colour entries and for true colour.
    """

    char: str
    fg: str
    bg: str
    reverse: bool
    bold: bool


class ScreenModel(Protocol):
    """A terminal screen fed with program output; see the module docstring."""

    # Bytes per ``feed`` call that keep one call well under a millisecond, so the
    # worker can read the PTY between calls while it catches up.
    parse_chunk: int

    @property
    def dropped_marks(self) -> int:
        """Combining marks dropped past ``zero_width.MAX_MARKS`` on one cell."""
        ...

    @property
    def cols(self) -> int: ...

    @property
    def rows(self) -> int: ...

    @property
    def cursor(self) -> tuple[int, int]:
        """(row, col), 0-based; a pending wrap reports the last column."""
        ...

    @property
    def alternate_active(self) -> bool: ...

    @property
    def generation(self) -> int:
        """Increases whenever visible text may have changed."""
        ...

    def feed(self, data: bytes) -> None:
        """Consume output; never raises (an error is confined to its sequence)."""

    def resize(self, cols: int, rows: int) -> None:
        """Change the size (sizes already validated)."""

    def display_lines(self) -> list[str]:
        """The visible rows, right-stripped; exactly ``rows`` entries."""
        ...

    def history_lines(self) -> list[str]:
        """Main-screen scrollback, oldest first, right-stripped."""
        ...

    def cells(self, row: int) -> list[Cell]:
        """Styled cells of visible row ``row`` (validated); a wide char's second cell is ``""``."""
        ...

    def styled_lines(self) -> list[str]:
        """The visible rows as ANSI text (:mod:`paneworker.screen.emulator.ansi`: SGR only,
        each row starting in and returning to the default style); exactly ``rows`` entries."""
        ...

    def dec_mode(self, mode: int) -> bool:
        """Whether DEC private mode ``mode`` is set."""
        ...

    def ansi_mode(self, mode: int) -> bool:
        """Whether ANSI mode ``mode`` (4 = IRM, 20 = LNM) is set."""
        ...

    def cursor_report(self) -> tuple[int, int]:
        """The 1-based (row, col) a cursor position report gives (origin mode honoured)."""
        ...

    def compact(self) -> None:
        """Shrink what the scrollback costs (the pane is quiet); may do nothing."""
