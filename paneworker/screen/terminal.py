"""The pane's terminal: what a program on the PTY sees, and what the worker reads back.

:class:`Terminal` puts together, for one pane:

- a screen model, pyte or ghostty (:mod:`paneworker.screen.emulator`), that only draws;
- a :class:`~paneworker.screen.emulator.backlog.Backlog` of bytes read but not parsed yet;
- a :class:`~paneworker.screen.emulator.scanner.SequenceScanner` that finds queries, OSC
  7501 reports and the other sequences acted on, as the bytes arrive;
- :class:`~paneworker.screen.emulator.answers.Answers`, which answers and records them.

Bytes go in with :meth:`receive` (cheap: scan and store) and are parsed by
:meth:`catch_up` / :meth:`parse_for`. Parsing stops at each found sequence, so a
query is answered and a report applied exactly when the screen has been parsed
up to it: a cursor report gives the cursor the program meant, and a status is
never published ahead of the screen that goes with it. :meth:`feed` does both at
once (tests, tools).

Synchronized output (``?2026h`` ... ``?2026l``): :meth:`catch_up` does not parse
into a frame whose end has not arrived yet, so a reader never sees a half-drawn
frame, unless the frame stays open longer than ``SYNC_HOLD_S``, grows past
``SYNC_HOLD_BYTES``, or holds a query or report, which are handled at once.

Status records: :attr:`records` holds every valid OSC 7501 report; ``on_report``
hears each, ``on_root_change`` every change of the root record, in stream order.
Process exit is the worker's to signal, with ``records.drop_transient()``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from paneworker.screen.emulator import DEFAULT_EMULATOR, ScreenModel, open_model
from paneworker.screen.emulator.answers import Answers
from paneworker.screen.emulator.backlog import Backlog
from paneworker.screen.emulator.base import Cell
from paneworker.screen.emulator.scanner import SYNC_OFF, SYNC_ON, Found, SequenceScanner
from paneworker.status.osc7501 import StatusRecords, StatusReport

__all__ = ["Cell", "Terminal"]

SYNC_HOLD_S = 1.0
SYNC_HOLD_BYTES = 1 << 20
# What a backend is fed after output was dropped: CAN ends any sequence left open.
_CANCEL = b"\x18"


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
        emulator: str = DEFAULT_EMULATOR,
        clock: Callable[[], float] = time.monotonic,
        model: ScreenModel | None = None,
    ) -> None:
        """``model``: a blank screen of ``emulator`` at this size to use instead of
        building one (a spare from the worker template).

        Raises: ValueError for a size below 1 or negative ``history_lines``, or a
        ``model`` of another size; EmulatorUnavailable if ``emulator`` cannot run here."""
        if cols < 1 or rows < 1:
            raise ValueError("cols and rows must be at least 1")
        if history_lines < 0:
            raise ValueError("history_lines must not be negative")
        if model is not None and (model.cols, model.rows) != (cols, rows):
            raise ValueError("the screen given is not of this size")
        self.emulator = emulator
        if model is None:
            model = open_model(emulator, cols, rows, history_lines)
        self._model = model
        self._answers = Answers(
            self._model, reply=reply, on_report=on_report, on_root_change=on_root_change
        )
        self._scanner = SequenceScanner()
        self._backlog = Backlog()
        self._found: deque[Found] = deque()
        self._clock = clock
        # The last ?2026h not yet closed, beyond what was parsed: (offset, when seen).
        self._sync_open: tuple[int, float] | None = None
        self.skipped_bytes = 0

    # -- what the worker reads ------------------------------------------------------

    @property
    def records(self) -> StatusRecords:
        """The OSC 7501 records this terminal holds (root = the pane's own state)."""
        return self._answers.records

    @property
    def title(self) -> str:
        """The window title the program last set (OSC 0 or 2), printable characters only."""
        return self._answers.title

    @property
    def dropped_marks(self) -> int:
        """Combining marks dropped past ``zero_width.MAX_MARKS`` on one cell."""
        return self._model.dropped_marks

    @property
    def cols(self) -> int:
        return self._model.cols

    @property
    def rows(self) -> int:
        return self._model.rows

    @property
    def cursor(self) -> tuple[int, int]:
        """(row, col), 0-based; a pending wrap reports the last column."""
        return self._model.cursor

    @property
    def bracketed_paste(self) -> bool:
        return self._model.dec_mode(2004)

    @property
    def application_cursor_keys(self) -> bool:
        """DECCKM (``?1``): arrow keys should be sent as ``ESC O A`` rather than ``ESC [ A``."""
        return self._model.dec_mode(1)

    @property
    def alternate_active(self) -> bool:
        return self._model.alternate_active

    @property
    def text_generation(self) -> int:
        """Increases whenever visible text may have changed."""
        return self._model.generation

    def display_lines(self) -> list[str]:
        """The visible rows (alternate screen when active), right-stripped."""
        return self._model.display_lines()

    def history_lines(self) -> list[str]:
        """Main-screen scrollback, oldest first, right-stripped."""
        return self._model.history_lines()

    def cells(self, row: int) -> list[Cell]:
        """Styled cells of a visible row; a wide character's second cell has ``char == ""``.

        Raises: IndexError if ``row`` is not a visible row.
        """
        if not 0 <= row < self._model.rows:
            raise IndexError(row)
        return self._model.cells(row)

    def styled_lines(self) -> list[str]:
        """The visible rows as ANSI text (the screen feed's frames)."""
        return self._model.styled_lines()

    def resize(self, cols: int, rows: int) -> None:
        """Raises: ValueError if a size is below 1."""
        if cols < 1 or rows < 1:
            raise ValueError("cols and rows must be at least 1")
        self._model.resize(cols, rows)

    # -- bytes in -----------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Bytes received and not parsed yet."""
        return len(self._backlog)

    @property
    def received(self) -> int:
        """Bytes received since the start (an offset for :meth:`catch_up`)."""
        return self._backlog.received

    @property
    def parsed(self) -> int:
        """Bytes parsed (or dropped) since the start."""
        return self._backlog.consumed

    @property
    def backlog_mapped_bytes(self) -> int:
        return self._backlog.mapped_bytes

    def feed(self, data: bytes) -> None:
        """Receive and parse ``data`` now (no synchronized-output hold)."""
        self.receive(data)
        self.catch_up(hold=False)

    def receive(self, data: bytes) -> None:
        """Store program output for parsing and find the sequences acted on in it."""
        if not data:
            return
        found = self._scanner.scan(data, self._backlog.received)
        self._backlog.append(data)
        for item in found:
            if item.kind == SYNC_ON:
                if self._sync_open is None:
                    self._sync_open = (item.start, self._clock())
            elif item.kind == SYNC_OFF:
                self._sync_open = None
            else:
                self._found.append(item)
                if self._sync_open is not None:
                    self._sync_open = None  # handled at once, so the frame cannot wait

    def needs_parse_now(self) -> bool:
        """True when a query or report waits in the backlog: answer it without delay."""
        return bool(self._found)

    def parse_limit(self) -> int:
        """How far :meth:`catch_up` may parse now (the start of an open frame, or all)."""
        received = self._backlog.received
        opened = self._sync_open
        if opened is None:
            return received
        offset, since = opened
        if (
            self._clock() - since > SYNC_HOLD_S
            or received - offset > SYNC_HOLD_BYTES
            or offset < self._backlog.consumed
        ):
            return received
        return offset

    def hold_deadline(self) -> float | None:
        """When a held frame is parsed anyway (for the worker's poll timeout), or None."""
        if self._sync_open is None or self.parse_limit() == self._backlog.received:
            return None
        return self._sync_open[1] + SYNC_HOLD_S

    def catch_up(
        self,
        upto: int | None = None,
        *,
        hold: bool = True,
        between: Callable[[], None] | None = None,
        deadline: float | None = None,
    ) -> bool:
        """Parse what was received up to offset ``upto`` (default: everything so far).

        ``hold`` keeps an open synchronized frame unparsed; ``between`` runs between
        chunks (the worker reads the PTY there); ``deadline`` (clock time) stops
        early. Returns True when the target was reached.
        """
        target = self._backlog.received if upto is None else upto
        if hold:
            target = min(target, self.parse_limit())
        backlog = self._backlog
        model = self._model
        chunk = model.parse_chunk
        found = self._found
        while backlog.consumed < target:
            stop = target
            if found and found[0].end <= stop:
                stop = found[0].end
            while backlog.consumed < stop:
                model.feed(backlog.take(min(chunk, stop - backlog.consumed)))
                if between is not None:
                    between()
                if deadline is not None and self._clock() >= deadline and not found:
                    return backlog.consumed >= target
            while found and found[0].end <= backlog.consumed:
                self._answers.handle(found.popleft())
        return True

    def drop_oldest(self, keep: int) -> int:
        """Discard unparsed bytes so at most about ``keep`` remain; returns bytes dropped.

        Sequences found in the dropped bytes are still acted on, in order (reports
        recorded, queries answered with the screen as it is). The cut moves to the
        start of a line where one is near, so the screen converges from whole lines.
        """
        backlog = self._backlog
        excess = len(backlog) - keep
        if excess <= 0:
            return 0
        cut = backlog.consumed + excess
        newline = backlog.find(b"\n", cut, min(cut + 4096, backlog.received))
        if newline >= 0:
            cut = newline + 1
        found = self._found
        while found and found[0].start < cut:
            cut = max(cut, found[0].end)
            self._answers.handle(found.popleft())
        if self._sync_open is not None and self._sync_open[0] < cut:
            self._sync_open = None
        dropped = cut - backlog.consumed
        backlog.skip(dropped)
        self._model.feed(_CANCEL)
        self.skipped_bytes += dropped
        return dropped

    def compact(self) -> None:
        """Shrink what the scrollback costs (call when the pane is quiet)."""
        self._model.compact()

    def close(self) -> None:
        """Release the backlog's memory."""
        self._backlog.close()
