"""The ghostty backend: libghostty-vt (Ghostty's terminal core) through ``pyghostty``.

Optional (``pip install 'panewarden[ghostty]'``): a native library bundled in the
wheel, loaded with cffi, parsing two orders of magnitude faster than the pyte
backend. It reflows the main screen on resize. Its own answers to queries are
not used (no reply callback is set): the worker answers every query itself, the
same way for both backends.

Scrollback is bounded by bytes, not lines: libghostty-vt trims a line-bounded
scrollback row by row, which made it parse about three times slower on a busy
pane, while a byte bound drops whole pages. The bound is sized to hold at least
``history_lines`` rows of the current width; :meth:`history_lines` returns the
newest ``history_lines`` of them. Full pages are compressed by :meth:`compact`
(the worker calls it once the pane is quiet), which takes a full 5,000-line
scrollback from about 8 MiB to under 1 MiB.
"""

from __future__ import annotations

import logging
import unicodedata
import weakref
from typing import Any

from paneworker.screen.emulator.ansi import per_line_sgr
from paneworker.screen.emulator.base import Cell, EmulatorUnavailable
from paneworker.screen.emulator.zero_width import DropTable, cap_marks

_LOG = logging.getLogger(__name__)

# The 16 ANSI colours under the names the pyte backend gives them.
_ANSI_NAMES = [
    "black",
    "red",
    "green",
    "brown",
    "blue",
    "magenta",
    "cyan",
    "white",
    "brightblack",
    "brightred",
    "brightgreen",
    "brightbrown",
    "brightblue",
    "brightmagenta",
    "brightcyan",
    "brightwhite",
]
# Bytes of scrollback per cell, generous: ghostty needed about 9.6 on coloured text.
_SCROLLBACK_BYTES_PER_CELL = 12
_MIN_SCROLLBACK_BYTES = 1 << 20
_CELL_WIDTH_PX = 10
_CELL_HEIGHT_PX = 20
_MAX_GRAPHEME = 16


def _load() -> Any:
    try:
        import pyghostty
    except (ImportError, OSError) as exc:
        raise EmulatorUnavailable(
            "the ghostty emulator needs the pyghostty package: "
            f"pip install 'panewarden[ghostty]' ({exc})"
        ) from exc
    return pyghostty


def ghostty_available() -> bool:
    """True if the ghostty backend can be used here."""
    try:
        _load()
    except EmulatorUnavailable:
        return False
    return True


class GhosttyModel:
    """A :class:`~paneworker.screen.emulator.base.ScreenModel` on libghostty-vt."""

    parse_chunk = 256 * 1024

    def __init__(self, cols: int, rows: int, history_lines: int) -> None:
        """Raises: EmulatorUnavailable if pyghostty is missing or will not load."""
        module = _load()
        self._ffi = module.ffi
        self._lib = module.lib
        # Lines are bounded by the byte bound below (ten times over, so never by lines).
        self._term = module.Terminal(cols, rows, 10 * history_lines)
        self._term.resize(cols, rows, _CELL_WIDTH_PX, _CELL_HEIGHT_PX)
        self._cols, self._rows = cols, rows
        self._history_limit = history_lines
        self._plain = _PlainText()
        self._max_bytes = self._ffi.new("size_t*")
        self._set_scrollback_bytes()
        self._compressed = self._ffi.new("GhosttyTerminalCompressionResult*")
        self._compress = self._lib.ghostty_terminal_compress
        self._compress_full = self._lib.GHOSTTY_TERMINAL_COMPRESSION_MODE_FULL
        self._generation = 0
        self._render = self._ffi.new("GhosttyRenderState*")
        self._dirty = self._ffi.new("int*")
        self._clean = self._ffi.new("bool*", False)
        self._has_render = self._lib.ghostty_render_state_new(self._ffi.NULL, self._render) == 0
        if self._has_render:
            self._note_changes()
            self._generation = 0
            # Resolved now: a finalizer must not make cffi parse declarations (it may
            # run from the garbage collector while cffi holds its own lock: deadlock).
            weakref.finalize(self, self._lib.ghostty_render_state_free, self._render[0])

    def _set_scrollback_bytes(self) -> None:
        wanted = self._history_limit * self._cols * _SCROLLBACK_BYTES_PER_CELL
        self._max_bytes[0] = max(wanted, _MIN_SCROLLBACK_BYTES)
        lib = self._lib
        lib.ghostty_terminal_set(
            self._term._t[0], lib.GHOSTTY_TERMINAL_OPT_SCROLLBACK_MAX_BYTES, self._max_bytes
        )

    def compact(self) -> None:
        """Compress the scrollback's full pages (a few ms; text stays readable)."""
        self._compress(self._term._t[0], self._compress_full, self._compressed)

    @property
    def dropped_marks(self) -> int:
        """Marks cut from cells that held more than ``MAX_MARKS`` (counted per read)."""
        return self._plain.dropped_marks

    @property
    def cols(self) -> int:
        return self._cols

    @property
    def rows(self) -> int:
        return self._rows

    @property
    def cursor(self) -> tuple[int, int]:
        x, y = self._term.cursor
        return int(y), min(int(x), self._cols - 1)

    @property
    def alternate_active(self) -> bool:
        return bool(self._term.get("active_screen", "int") == 1)

    @property
    def generation(self) -> int:
        return self._generation

    def feed(self, data: bytes) -> None:
        try:
            self._term.feed(data)
        except Exception:  # the native parser does not raise; a binding bug might
            _LOG.exception("terminal: ghostty failed on a chunk")
        self._note_changes()

    def _note_changes(self) -> None:
        if not self._has_render:
            self._generation += 1
            return
        lib = self._lib
        state = self._render[0]
        if lib.ghostty_render_state_update(state, self._term._t[0]) != 0:
            self._generation += 1
            return
        lib.ghostty_render_state_get(state, lib.GHOSTTY_RENDER_STATE_DATA_DIRTY, self._dirty)
        if self._dirty[0] != lib.GHOSTTY_RENDER_STATE_DIRTY_FALSE:
            self._generation += 1
            lib.ghostty_render_state_set(state, lib.GHOSTTY_RENDER_STATE_OPTION_DIRTY, self._clean)

    def resize(self, cols: int, rows: int) -> None:
        self._term.resize(cols, rows, _CELL_WIDTH_PX, _CELL_HEIGHT_PX)
        self._cols, self._rows = cols, rows
        self._set_scrollback_bytes()
        self._generation += 1

    def display_lines(self) -> list[str]:
        lines = [self._plain(line) for line in self._term.text().split("\n")][: self._rows]
        return lines + [""] * (self._rows - len(lines))

    def history_lines(self) -> list[str]:
        if self.alternate_active:
            return []  # the alternate screen has none; the main one is out of reach
        count = int(self._term.get("scrollback_rows", "size_t"))
        if count == 0:
            return []
        sel = self._new_selection(0, 0, self._cols - 1, count - 1, "history")
        text: str = self._term._format_sel(sel)
        lines = [self._plain(line) for line in text.split("\n")][:count]
        lines += [""] * (count - len(lines))
        # Ghostty bounds scrollback by whole memory pages: apply the line limit here.
        return lines[-self._history_limit :] if self._history_limit else []

    def styled_lines(self) -> list[str]:
        # Ghostty's own VT formatter: about 0.1 ms for 120x40, where reading cell by cell
        # through cffi (``cells``) took 200 ms.
        lib = self._lib
        from pyghostty.core import init_sized, read_buf

        sel = self._new_selection(0, 0, self._cols - 1, self._rows - 1, "active")
        opts = init_sized("GhosttyTerminalSelectionFormatOptions")
        opts.emit = lib.GHOSTTY_FORMATTER_FORMAT_VT
        opts.unwrap, opts.trim, opts.selection = False, True, sel
        term = self._term._t[0]
        text: str = read_buf(
            lambda buf, size, n: lib.ghostty_terminal_selection_format_buf(
                term, opts[0], buf, size, n
            )
        )
        # The feed and the viewers draw this: what the plain text drops, this drops too.
        return per_line_sgr(self._plain.clean(text), self._rows)

    def _new_selection(self, x0: int, y0: int, x1: int, y1: int, tag: str) -> Any:
        from pyghostty.core import init_sized

        sel = init_sized("GhosttySelection")
        sel.start = self._term.ref(x0, y0, tag)[0]
        sel.end = self._term.ref(x1, y1, tag)[0]
        return sel

    def cells(self, row: int) -> list[Cell]:
        ffi, lib = self._ffi, self._lib
        cell = ffi.new("GhosttyCell*")
        wide = ffi.new("int*")
        buf = ffi.new("uint32_t[]", _MAX_GRAPHEME)
        count = ffi.new("size_t*")
        out: list[Cell] = []
        for x in range(self._cols):
            ref = self._term.ref(x, row)
            lib.ghostty_grid_ref_cell(ref, cell)
            lib.ghostty_cell_get(cell[0], lib.GHOSTTY_CELL_DATA_WIDE, wide)
            char = ""
            if wide[0] != lib.GHOSTTY_CELL_WIDE_SPACER_TAIL:
                if lib.ghostty_grid_ref_graphemes(ref, buf, _MAX_GRAPHEME, count) == 0:
                    char = self._plain("".join(chr(buf[i]) for i in range(count[0])))
                char = char or " "
            style = self._term.style(x, row)
            reverse = bool(style["inverse"])
            out.append(
                Cell(char, _colour(style["fg"]), _colour(style["bg"]), reverse, style["bold"])
            )
        return out

    def dec_mode(self, mode: int) -> bool:
        try:
            return bool(self._term.mode(mode))
        except Exception:  # a mode number ghostty does not know
            return False

    def ansi_mode(self, mode: int) -> bool:
        try:
            return bool(self._term.mode(mode, ansi=True))
        except Exception:
            return False

    def cursor_report(self) -> tuple[int, int]:
        # Ghostty knows the origin mode and margins: let it compute the report.
        answers: list[bytes] = []
        self._term.on_reply(answers.append)
        try:
            self._term.feed(b"\x1b[6n")
        finally:
            self._term.on_reply(None)
        for answer in answers:
            body = answer.removeprefix(b"\x1b[").removesuffix(b"R")
            row, _, col = body.partition(b";")
            if row.isdigit() and col.isdigit():
                return int(row), int(col)
        y, x = self.cursor
        return y + 1, x + 1


class _PlainText:
    """Text as the pyte backend gives it: characters without a glyph dropped (ghostty
    keeps joiners, variation selectors, bidi controls and line separators inside its
    cells), marks composed (NFC) and cut to ``MAX_MARKS`` per cell."""

    def __init__(self) -> None:
        self._drop = DropTable()
        self._marks: dict[str, bool] = {}
        # Marks cut when the text was read (ghostty stores them; pyte never does).
        self.dropped_marks = 0

    def __call__(self, text: str) -> str:
        return self.clean(text.rstrip())

    def clean(self, text: str) -> str:
        """The same without the trailing blanks cut: for the styled (SGR) text too."""
        if text.isascii():
            return text
        text = unicodedata.normalize("NFC", text.translate(self._drop))
        text, dropped = cap_marks(text, self._marks)
        self.dropped_marks += dropped
        return text


def _colour(value: Any) -> str:
    if value is None:
        return "default"
    kind, data = value
    if kind == "palette":
        index = int(data)
        if index < 16:
            return _ANSI_NAMES[index]
        from pyte import graphics as g

        return str(g.FG_BG_256[index])
    r, gr, b = data
    return f"{r:02x}{gr:02x}{b:02x}"
