"""The pane's screen model: a ``pyte.Screen`` made faithful enough for real coding CLIs.

:class:`PaneScreen` adds what stock pyte 0.8.2 lacks or gets wrong on streams from
Claude Code, Codex, Gemini, OpenCode and friends (see ``shared/agents.md``): an
alternate screen (``?47``/``?1047``/``?1049``) without scrollback, main-screen
scrollback that never slows ordinary events (pyte's ``HistoryScreen`` wraps every
attribute access), a ``draw`` that keeps the text after zero-width characters and is
quick on runs of one-cell characters, colon-form SGR, SU/SD/REP/CHT/CBT, DECSTR, a
single-slot DECSC like xterm, and a resize that keeps the cursor row on screen.

Storage is compact: a row is a plain list of interned ``Char`` cells (pyte keeps a
dict per row), so drawing a run is one slice assignment and scrolling is a list
operation; the scrollback is kept as text, one ``str`` per line, with no per-cell
objects at all. DECSCNM (``?5``, reverse screen) is tracked but not drawn.

The escape-sequence parser lives in :mod:`paneworker.screen.emulator.pyte_parser`; this
module only changes the model.
"""

from __future__ import annotations

import unicodedata
from collections import deque
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

import pyte
from pyte import graphics as g
from pyte import modes as mo
from pyte.charsets import LAT1_MAP
from pyte.screens import Char, Cursor, Margins, Savepoint, wcwidth

from paneworker.screen.emulator.zero_width import MAX_MARKS

Row = list[Char]
Buffer = list[Row]
_CELL_TEXT: Callable[[Char], str] = itemgetter(0)
_BLANK = Char(data=" ", fg="default", bg="default", reverse=False)

_new_char = tuple.__new__
# Marks that sit on the previous glyph; other zero-width characters (ZWJ,
# variation selectors, other format characters) have no glyph and are dropped.
_MARK_CATEGORIES = frozenset({"Mn", "Me", "Mc"})
_MAX_REPEAT = 1 << 16
_MAX_GLYPHS = 512
_MAX_ATTR_SETS = 256


class _Glyphs(dict[str, Char]):
    """Interned cells for one set of attributes: drawing a character is a dict lookup."""

    def __init__(self, rest: tuple[Any, ...]) -> None:
        super().__init__()
        self.rest = rest

    def __missing__(self, char: str) -> Char:
        cell: Char = _new_char(Char, (char, *self.rest))
        if len(self) < _MAX_GLYPHS:
            self[char] = cell
        return cell


def _copy_cursor(cursor: Cursor) -> Cursor:
    # copy.copy on a __slots__ class is generic and slow; TUIs save the cursor per frame.
    twin = Cursor(cursor.x, cursor.y, cursor.attrs)
    twin.hidden = cursor.hidden
    return twin


def _is_variation_selector(char: str) -> bool:
    code = ord(char)
    return 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF


def _extended_colour(sub: Sequence[int | None]) -> str | None:
    """Colour from the parameters after 38/48: ``5;N`` or ``2;[cs;]r;g;b``."""
    if not sub:
        return None
    kind = sub[0]
    if kind == 5 and len(sub) >= 2:
        index = sub[1]
        return g.FG_BG_256[index] if index is not None and 0 <= index <= 255 else None
    if kind == 2 and len(sub) >= 4:
        rgb = sub[2:5] if len(sub) >= 5 else sub[1:4]
        return "".join(f"{min(v or 0, 255):02x}" for v in rgb)
    return None


class PaneScreen(pyte.Screen):
    """A pyte screen with an alternate buffer, bounded scrollback and xterm fixes."""

    buffer: Buffer  # type: ignore[assignment]  # rows are lists here, not pyte's dicts
    # A constant: pyte derives it from DECSCNM each time, which is not drawn here.
    default_char: Char = _BLANK

    def __init__(self, columns: int, lines: int, history_limit: int) -> None:
        # Set before pyte's constructor: it calls reset(), which we override.
        self.history: deque[str] = deque(maxlen=history_limit)
        self.alternate_active = False
        self.last_char: str | None = None
        self._alt_saved_cursor: Cursor | None = None
        # The buffer not shown. While the main one shows, the alternate buffer is made
        # only when first entered (``[]`` until then): most panes never show it, and a
        # blank 200x50 buffer is 80 KiB in every idle worker.
        self._other_buffer: Buffer = []
        self._glyph_sets: dict[Char, _Glyphs] = {}
        self._glyphs_for: tuple[Any, _Glyphs | None] = (None, None)
        self._narrow: dict[str, bool] = {}
        self._widths: dict[str, int] = {}
        # Marks dropped because their cell already held MAX_MARKS (zero_width).
        self.dropped_marks = 0
        super().__init__(columns, lines)

    def _blank(self) -> Row:
        return [self.default_char] * self.columns

    def _new_buffer(self) -> Buffer:
        return [[self.default_char] * self.columns for _ in range(self.lines)]

    def reset(self) -> None:
        """RIS: also leave the alternate screen and forget scrollback and saved cursors."""
        super().reset()
        self.buffer = self._new_buffer()
        self.history.clear()
        self.alternate_active = False
        self._alt_saved_cursor = None
        self._other_buffer = []
        self.savepoints.clear()
        self.last_char = None

    def soft_reset(self) -> None:
        """DECSTR: modes and attributes to defaults, text kept."""
        self.mode.difference_update({mo.IRM, mo.DECOM})
        self.mode.update({mo.DECAWM, mo.DECTCEM})
        self.cursor.hidden = False
        self.cursor.attrs = self.default_char
        self.margins = None
        self.charset = 0
        self.g0_charset = LAT1_MAP
        self.savepoints.clear()

    # -- reading --------------------------------------------------------------

    def display_lines(self) -> list[str]:
        """The visible rows, right-stripped."""
        return ["".join(map(_CELL_TEXT, row)).rstrip() for row in self.buffer]

    def history_text(self) -> list[str]:
        """Scrollback, oldest first, right-stripped."""
        return list(self.history)

    def row_chars(self, row: int) -> list[Char]:
        """The cells of visible row ``row``."""
        return list(self.buffer[row])

    # -- text ---------------------------------------------------------------

    def draw(self, data: str) -> None:
        """Write text at the cursor; zero-width characters never cut the run short."""
        if not data:
            return
        charset = self.g1_charset if self.charset else self.g0_charset
        if charset is not LAT1_MAP:
            data = data.translate(charset)
        if data.isascii() and mo.IRM not in self.mode:
            self._draw_ascii(data)
        else:
            self._draw_any(data)
        self.dirty.add(self.cursor.y)

    def _all_narrow(self, data: str) -> bool:
        """True if every character takes exactly one cell (no wide, no zero-width)."""
        narrow = self._narrow
        for char in set(data):
            known = narrow.get(char)
            if known is None:
                if len(narrow) >= _MAX_GLYPHS:
                    narrow.clear()
                known = narrow[char] = wcwidth(char) == 1
            if not known:
                return False
        return True

    def _glyphs(self) -> _Glyphs:
        attrs = self.cursor.attrs
        cached_attrs, cached = self._glyphs_for
        if cached is not None and cached_attrs is attrs:
            return cached
        # Keyed by the whole attributes value (its text is always the blank).
        glyphs = self._glyph_sets.get(attrs)
        if glyphs is None:
            if len(self._glyph_sets) >= _MAX_ATTR_SETS:
                self._glyph_sets.clear()
            glyphs = self._glyph_sets[attrs] = _Glyphs(tuple(attrs)[1:])
        self._glyphs_for = (attrs, glyphs)
        return glyphs

    def crlf(self) -> None:
        """CR LF in one step (the commonest pair of controls)."""
        self.cursor.x = 0
        self.linefeed()

    def _wrap(self) -> None:
        self.dirty.add(self.cursor.y)
        self.carriage_return()
        self.linefeed()

    def _draw_ascii(self, data: str) -> None:
        # Every character is one cell wide (ASCII or checked): whole slices to the margin.
        cursor = self.cursor
        columns = self.columns
        cached_attrs, glyphs = self._glyphs_for
        if glyphs is None or cached_attrs is not cursor.attrs:
            glyphs = self._glyphs()
        x = cursor.x
        end = len(data)
        if x + end <= columns:  # the usual case: the run fits on the row
            self.buffer[cursor.y][x : x + end] = map(glyphs.__getitem__, data)
            cursor.x = x + end
            self.last_char = data[-1]
            return
        autowrap = mo.DECAWM in self.mode
        pos = 0
        while pos < end:
            if cursor.x >= columns:
                if not autowrap:
                    # Without autowrap each further character overwrites the last column.
                    self.buffer[cursor.y][columns - 1] = glyphs[data[-1]]
                    cursor.x = columns
                    break
                self._wrap()
            x = cursor.x
            take = min(columns - x, end - pos)
            self.buffer[cursor.y][x : x + take] = map(glyphs.__getitem__, data[pos : pos + take])
            cursor.x = x + take
            pos += take
        self.last_char = data[-1]

    def _width(self, char: str) -> int:
        width = self._widths.get(char)
        if width is None:
            if len(self._widths) >= _MAX_GLYPHS:
                self._widths.clear()
            width = self._widths[char] = wcwidth(char)
        return width

    def _draw_any(self, data: str) -> None:
        """A run holding wide or zero-width characters: one-cell stretches drawn whole."""
        if mo.IRM in self.mode:
            self._draw_each(data)
            return
        narrow = self._narrow
        start = 0
        for index, char in enumerate(data):
            known = narrow.get(char)
            if known is None:
                known = self._all_narrow(char)
            if known:
                continue
            if index > start:
                self._draw_ascii(data[start:index])
            self._draw_each(char)
            start = index + 1
        if start < len(data):
            self._draw_ascii(data[start:])

    def _draw_each(self, data: str) -> None:
        cursor = self.cursor
        columns = self.columns
        autowrap = mo.DECAWM in self.mode
        insert = mo.IRM in self.mode
        glyphs = self._glyphs()
        width_of = self._widths.get
        for char in data:
            width = width_of(char)
            if width is None:
                width = self._width(char)
            if width <= 0:
                if (
                    width == 0
                    and unicodedata.category(char) in _MARK_CATEGORIES
                    and not _is_variation_selector(char)
                ):
                    self._combine(char)
                continue
            if cursor.x >= columns or (width == 2 and 0 < cursor.x == columns - 1):
                if autowrap:
                    self._wrap()
                else:
                    cursor.x = max(columns - width, 0)
            if insert:
                self.insert_characters(width)
            line = self.buffer[cursor.y]
            line[cursor.x] = glyphs[char]
            if width == 2 and cursor.x + 1 < columns:
                line[cursor.x + 1] = glyphs[""]
            cursor.x = min(cursor.x + width, columns)
            self.last_char = char

    def _combine(self, mark: str) -> None:
        x, y = self.cursor.x, self.cursor.y
        if x > 0:
            line, px = self.buffer[y], min(x, self.columns) - 1
        elif y > 0:
            line, px = self.buffer[y - 1], self.columns - 1
        else:
            return
        if px > 0 and line[px].data == "":
            px -= 1  # the stub half of a wide character
        last = line[px]
        if len(last.data) > MAX_MARKS:
            # The base and MAX_MARKS marks: more would make each mark cost the cell's
            # length (NFC of the whole cell), a flood of them quadratic.
            self.dropped_marks += 1
            return
        line[px] = last._replace(data=unicodedata.normalize("NFC", last.data + mark))
        self.dirty.add(y)

    def repeat_last(self, count: int) -> None:
        """REP: draw the last graphic character ``count`` more times."""
        if self.last_char is not None:
            self.draw(self.last_char * min(max(count, 1), _MAX_REPEAT))

    # -- scrolling and history ---------------------------------------------

    def index(self) -> None:
        """Scroll the main screen's top line into history (alternate screen keeps none)."""
        top, bottom = self.margins or Margins(0, self.lines - 1)
        if self.cursor.y != bottom:
            self.cursor_down()
            return
        buffer = self.buffer
        if top == 0 and not self.alternate_active and self.history.maxlen:
            self.history.append("".join(map(_CELL_TEXT, buffer[0])).rstrip())
        del buffer[top]
        buffer.insert(bottom, [self.default_char] * self.columns)
        self.dirty.add(top)  # only "something changed" is ever asked

    def reverse_index(self) -> None:
        """RI: scroll the region down when the cursor is on its top line."""
        top, bottom = self.margins or Margins(0, self.lines - 1)
        if self.cursor.y != top:
            self.cursor_up()
            return
        buffer = self.buffer
        del buffer[bottom]
        buffer.insert(top, self._blank())
        self.dirty.update(range(self.lines))

    def insert_lines(self, count: int | None = None) -> None:
        """IL: blank lines at the cursor, the region's bottom lines pushed out."""
        top, bottom = self.margins or Margins(0, self.lines - 1)
        y = self.cursor.y
        if not top <= y <= bottom:
            return
        n = min(max(count or 1, 1), bottom - y + 1)
        buffer = self.buffer
        del buffer[bottom - n + 1 : bottom + 1]
        buffer[y:y] = [self._blank() for _ in range(n)]
        self.dirty.update(range(y, self.lines))
        self.carriage_return()

    def delete_lines(self, count: int | None = None) -> None:
        """DL: lines at the cursor removed, blank lines in at the region's bottom."""
        top, bottom = self.margins or Margins(0, self.lines - 1)
        y = self.cursor.y
        if not top <= y <= bottom:
            return
        n = min(max(count or 1, 1), bottom - y + 1)
        buffer = self.buffer
        del buffer[y : y + n]
        buffer[bottom - n + 1 : bottom - n + 1] = [self._blank() for _ in range(n)]
        self.dirty.update(range(y, self.lines))
        self.carriage_return()

    def insert_characters(self, count: int | None = None) -> None:
        """ICH: blank cells at the cursor, the row's end pushed out."""
        x, columns = self.cursor.x, self.columns
        if x >= columns:
            return
        row = self.buffer[self.cursor.y]
        row[x:x] = [self.default_char] * min(max(count or 1, 1), columns - x)
        del row[columns:]
        self.dirty.add(self.cursor.y)

    def delete_characters(self, count: int | None = None) -> None:
        """DCH: cells at the cursor removed, blank cells in at the row's end."""
        x, columns = self.cursor.x, self.columns
        if x >= columns:
            return
        n = min(max(count or 1, 1), columns - x)
        row = self.buffer[self.cursor.y]
        del row[x : x + n]
        row.extend([self.default_char] * n)
        self.dirty.add(self.cursor.y)

    def erase_characters(self, count: int | None = None) -> None:
        """ECH: cells from the cursor set to blanks in the current attributes."""
        x = self.cursor.x
        end = min(x + max(count or 1, 1), self.columns)
        if x < end:
            self.buffer[self.cursor.y][x:end] = [self.cursor.attrs] * (end - x)
        self.dirty.add(self.cursor.y)

    def scroll_up(self, count: int) -> None:
        """SU: scroll the region up without moving the cursor."""
        top, bottom = self.margins or Margins(0, self.lines - 1)
        saved_y = self.cursor.y
        self.cursor.y = bottom
        for _ in range(min(max(count, 1), bottom - top + 1)):
            self.index()
        self.cursor.y = saved_y

    def scroll_down(self, count: int) -> None:
        """SD: scroll the region down without moving the cursor."""
        top, bottom = self.margins or Margins(0, self.lines - 1)
        saved_y = self.cursor.y
        self.cursor.y = top
        for _ in range(min(max(count, 1), bottom - top + 1)):
            self.reverse_index()
        self.cursor.y = saved_y

    def erase_in_display(self, how: int = 0, *args: object, **kwargs: object) -> None:
        """ED; ``3`` erases scrollback only, as in xterm; unknown parameters are ignored."""
        if how == 3:
            self.history.clear()
            return
        if how == 0:
            rows = range(self.cursor.y + 1, self.lines)
        elif how == 1:
            rows = range(self.cursor.y)
        elif how == 2:
            rows = range(self.lines)
        else:
            return
        attrs = self.cursor.attrs
        for y in rows:
            self.buffer[y] = [attrs] * self.columns
        self.dirty.update(rows)
        if how in (0, 1):
            self.erase_in_line(how)

    def erase_in_line(self, how: int = 0, private: bool = False) -> None:
        """EL; unknown parameters are ignored instead of failing."""
        x, columns = min(self.cursor.x, self.columns), self.columns
        if how == 0:
            start, end = x, columns
        elif how == 1:
            start, end = 0, min(x + 1, columns)
        elif how == 2:
            start, end = 0, columns
        else:
            return
        self.buffer[self.cursor.y][start:end] = [self.cursor.attrs] * (end - start)
        self.dirty.add(self.cursor.y)

    # -- tabs -----------------------------------------------------------------

    def tab_forward(self, count: int) -> None:
        """CHT."""
        for _ in range(min(max(count, 1), self.columns)):
            self.tab()

    def tab_back(self, count: int) -> None:
        """CBT."""
        for _ in range(min(max(count, 1), self.columns)):
            self.cursor.x = max((s for s in self.tabstops if s < self.cursor.x), default=0)

    # -- cursor save/restore --------------------------------------------------

    def save_cursor(self) -> None:
        """DECSC into a single slot, as xterm has (pyte's stack grows without bound)."""
        self.savepoints[:] = [
            Savepoint(
                _copy_cursor(self.cursor),
                self.g0_charset,
                self.g1_charset,
                self.charset,
                mo.DECOM in self.mode,
                mo.DECAWM in self.mode,
            )
        ]

    def restore_cursor(self) -> None:
        """DECRC; the slot is kept, so a second DECRC restores the same position."""
        if not self.savepoints:
            super().restore_cursor()
            return
        point = self.savepoints[-1]
        self.g0_charset, self.g1_charset = point.g0_charset, point.g1_charset
        self.charset = point.charset
        for flag, mode in ((point.origin, mo.DECOM), (point.wrap, mo.DECAWM)):
            if flag:
                self.mode.add(mode)
            else:
                self.mode.discard(mode)
        hidden = self.cursor.hidden
        self.cursor = _copy_cursor(point.cursor)
        self.cursor.hidden = hidden
        self.ensure_hbounds()
        self.ensure_vbounds()

    # -- alternate screen -----------------------------------------------------

    def enter_alternate(self, *, clear: bool, save_cursor: bool) -> None:
        """Show the alternate buffer (``?47``, ``?1047``, ``?1049``)."""
        if self.alternate_active:
            return
        if save_cursor:
            self._alt_saved_cursor = _copy_cursor(self.cursor)
        alternate = self._other_buffer if self._other_buffer and not clear else None
        self.buffer, self._other_buffer = alternate or self._new_buffer(), self.buffer
        self.alternate_active = True
        self.dirty.update(range(self.lines))

    def leave_alternate(self, *, clear: bool, restore_cursor: bool) -> None:
        """Show the main buffer again, exactly as it was left."""
        if not self.alternate_active:
            return
        # Cleared, the alternate buffer is blank: unmade again until the next entry.
        self.buffer, self._other_buffer = self._other_buffer, [] if clear else self.buffer
        self.alternate_active = False
        if restore_cursor and self._alt_saved_cursor is not None:
            hidden = self.cursor.hidden
            self.cursor = self._alt_saved_cursor
            self.cursor.hidden = hidden
            self._alt_saved_cursor = None
            self.ensure_hbounds()
            self.ensure_vbounds()
        self.dirty.update(range(self.lines))

    # -- resize ---------------------------------------------------------------

    def _shrink_rows(self, buffer: Buffer, shift: int, lines: int, to_history: bool) -> Buffer:
        """Drop ``shift`` rows off the top (into history if asked) and rows past ``lines``."""
        if to_history and self.history.maxlen:
            for row in buffer[:shift]:
                self.history.append("".join(map(_CELL_TEXT, row)).rstrip())
        return buffer[shift : shift + lines]

    def _fit(self, buffer: Buffer, lines: int, columns: int) -> Buffer:
        """``buffer`` cut or padded with blanks to ``lines`` rows of ``columns`` cells."""
        blank = self.default_char
        fitted = [
            row[:columns] if len(row) >= columns else row + [blank] * (columns - len(row))
            for row in buffer[:lines]
        ]
        fitted.extend([blank] * columns for _ in range(lines - len(fitted)))
        return fitted

    def resize(self, lines: int | None = None, columns: int | None = None) -> None:
        """Resize both buffers, keeping the cursor row visible; no reflow."""
        lines = lines or self.lines
        columns = columns or self.columns
        if lines == self.lines and columns == self.columns:
            return
        if lines < self.lines:
            shift = max(0, self.cursor.y - (lines - 1))
            self.buffer = self._shrink_rows(
                self.buffer, shift, lines, to_history=not self.alternate_active
            )
            self.cursor.y -= shift
            if self.alternate_active:
                saved = self._alt_saved_cursor
                main_shift = max(0, saved.y - (lines - 1)) if saved is not None else 0
                self._other_buffer = self._shrink_rows(
                    self._other_buffer, main_shift, lines, to_history=True
                )
                if saved is not None:
                    saved.y -= main_shift
            else:
                self._other_buffer = self._shrink_rows(self._other_buffer, 0, lines, False)
        self.buffer = self._fit(self.buffer, lines, columns)
        if self._other_buffer:  # an alternate buffer never entered stays unmade
            self._other_buffer = self._fit(self._other_buffer, lines, columns)
        old_columns = self.columns
        self.tabstops = {t for t in self.tabstops if t < columns} | {
            t for t in range(8, columns, 8) if t >= old_columns
        }
        self.lines, self.columns = lines, columns
        self.margins = None
        self.ensure_hbounds()
        self.ensure_vbounds()
        self.dirty.update(range(lines))

    # -- attributes -----------------------------------------------------------

    def apply_sgr(self, groups: Sequence[Sequence[int | None]]) -> None:
        """SGR with both ``;`` and ``:`` forms; unknown codes are ignored.

        Each group is one ``;``-separated parameter split on ``:``; an empty
        parameter is ``None``. Colours are stored the way pyte stores them.
        """
        if not groups or (len(groups) == 1 and not groups[0][0]):
            self.cursor.attrs = self.default_char
            return
        replace: dict[str, Any] = {}
        index, count = 0, len(groups)
        while index < count:
            group = groups[index]
            code = group[0] or 0
            index += 1
            if len(group) > 1:
                if code in (g.FG_256, g.BG_256):
                    colour = _extended_colour(group[1:])
                    if colour is not None:
                        replace["fg" if code == g.FG_256 else "bg"] = colour
                elif code == 4:
                    replace["underscore"] = bool(group[1])
                continue
            if code in (g.FG_256, g.BG_256, 58):
                # ``38;5;N`` / ``38;2;r;g;b``: the colour takes the next parameters.
                kind = groups[index][0] if index < count else None
                width = 2 if kind == 5 else 4 if kind == 2 else 1
                sub = [grp[0] for grp in groups[index : index + width]]
                index += width
                colour = _extended_colour([sub[0], None, *sub[1:]] if kind == 2 else sub)
                if colour is not None and code != 58:
                    replace["fg" if code == g.FG_256 else "bg"] = colour
            elif code == 0:
                replace.update(self.default_char._asdict())
            elif code in g.FG_ANSI:
                replace["fg"] = g.FG_ANSI[code]
            elif code in g.BG_ANSI:
                replace["bg"] = g.BG_ANSI[code]
            elif code in g.TEXT:
                name = g.TEXT[code]
                replace[name[1:]] = name.startswith("+")
            elif code in g.FG_AIXTERM:
                replace["fg"] = g.FG_AIXTERM[code]
            elif code in g.BG_AIXTERM:
                replace["bg"] = g.BG_AIXTERM[code]
            elif code == 21:
                replace["underscore"] = True
        replace.pop("data", None)
        self.cursor.attrs = self.cursor.attrs._replace(**replace)
