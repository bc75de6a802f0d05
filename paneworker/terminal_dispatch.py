"""Meaning of the pane terminal's sequences: screen updates, query answers, OSC 7501.

:class:`Dispatcher` is the :class:`~paneworker.terminal_parser.SequenceSink` behind
:class:`~paneworker.terminal.Terminal`: it applies each token to the
:class:`~paneworker.terminal_screen.PaneScreen`, writes answers through ``reply``,
and keeps the OSC 7501 records. Any error while handling one token (a pyte
assertion, odd parameters, a failing callback) is logged and confined to that token.

Answers, and what is deliberately not answered:

- DA1 ``CSI ? 62 ; 22 c``, DA2 ``CSI > 1 ; 10 ; 0 c``, DSR/CPR, XTVERSION
  ``DCS > | panewarden(0.1) ST``, OSC 10/11/12 (white on black) and OSC 4 palette
  queries (xterm's palette; the query's terminator is mirrored), DECRQM for ANSI and
  DEC modes, XTWINOPS 14/16/18/19 (10x20-pixel cells), XTGETTCAP and DECRQSS as
  "invalid" (no capability is offered).
- The OSC 7501 probe is echoed as ``ESC ] 7501 ; ? ESC \\`` in stream order, so it
  reaches the program before the DA1 answer that follows the probe.
- The kitty keyboard query ``CSI ? u`` gets no answer, so programs keep the legacy key
  encoding the worker sends; push/pop/set are ignored. XTMODKEYS (``CSI > 4 ; n m``)
  and its query are ignored. DECRQM for ``?2027`` (grapheme clusters) answers
  "unknown": widths follow wcwidth, not grapheme clusters.
- DECCOLM (``?3``) is ignored: the PTY's size is the worker's to set.

The window title (OSC 0 and OSC 2; OSC 1, the icon name, is ignored) is kept in
``title``.

Status records: every valid report is applied to ``records`` and passed to
``on_report``; RIS clears all records; OSC 133 ``A`` drops working/blocked ones.
``on_root_change`` hears every change of the root record, in stream order.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

from pyte import graphics as g
from pyte import modes as mo
from pyte.charsets import MAPS

from paneworker.osc7501 import MAX_SEQUENCE_BYTES, StatusRecords, StatusReport, parse_report
from paneworker.terminal_parser import ST
from paneworker.terminal_screen import PaneScreen

_LOG = logging.getLogger(__name__)

PROBE_REPLY = b"\x1b]7501;?\x1b\\"
DA1_REPLY = "\x1b[?62;22c"
DA2_REPLY = "\x1b[>1;10;0c"
XTVERSION_REPLY = "\x1bP>|panewarden(0.1)\x1b\\"
CELL_WIDTH_PX = 10
CELL_HEIGHT_PX = 20
FOREGROUND_RGB = "rgb:ffff/ffff/ffff"
BACKGROUND_RGB = "rgb:0000/0000/0000"

_DCS_HEAD_RE = re.compile(r"[\x30-\x3f]*([\x20-\x2f]*)([\x40-\x7e])")
_DCS_HEAD_CHARS = 64
_MAX_PARAM = 65535
_MAX_LOGGED_ERRORS = 10

# DEC private modes answered by DECRQM; those pyte keeps in ``screen.mode``.
_KNOWN_DEC_MODES = frozenset(
    {1, 5, 6, 7, 12, 25, 47, 1000, 1002, 1003, 1004, 1005, 1006, 1015, 1016}
    | {1047, 1049, 2004, 2026}
)
_PYTE_DEC_MODES = frozenset({5, 6, 7, 25})
_KNOWN_ANSI_MODES = frozenset({mo.IRM, mo.LNM})


def _rgb(hex6: str) -> str:
    return "rgb:" + "/".join(hex6[i : i + 2] * 2 for i in (0, 2, 4))


def _int(text: str) -> int | None:
    if not text:
        return None
    if not text.isdigit():
        raise ValueError(text)
    # Cap before int(): a parameter can be thousands of digits long.
    significant = text.lstrip("0")
    return min(int(significant[:6] or "0"), _MAX_PARAM)


def _numbers(params: str) -> list[int]:
    """``;``-separated parameters, first sub-parameter of each, empty as 0."""
    return [_int(part.partition(":")[0]) or 0 for part in params.split(";")]


def _arg(numbers: list[int], index: int, default: int) -> int:
    value = numbers[index] if index < len(numbers) else 0
    return value or default


class Dispatcher:
    """Applies parsed tokens to a :class:`PaneScreen` and answers the program."""

    def __init__(
        self,
        screen: PaneScreen,
        *,
        reply: Callable[[bytes], None],
        on_report: Callable[[StatusReport], None],
        on_root_change: Callable[[StatusReport | None], None] | None,
    ) -> None:
        self._screen = screen
        self._reply = reply
        self._on_report = on_report
        self._on_root_change = on_root_change
        self.records = StatusRecords()
        # The window title (OSC 0 or 2), control characters removed; agents without
        # OSC 7501 put their state there.
        self.title = ""
        self.dec_modes: set[int] = set()
        self._errors = 0
        s = screen
        self._controls: dict[str, Callable[[], None]] = {
            "\n": s.linefeed,
            "\x0b": s.linefeed,
            "\x0c": s.linefeed,
            "\r": s.carriage_return,
            "\x08": s.backspace,
            "\t": s.tab,
        }
        self._csi: dict[tuple[str, str, str], Callable[[str], None]] = self._csi_table()

    def _log_error(self, what: str) -> None:
        self._errors += 1
        level = logging.WARNING if self._errors <= _MAX_LOGGED_ERRORS else logging.DEBUG
        _LOG.log(level, "terminal: error handling %s; sequence skipped", what, exc_info=True)

    def _send(self, text: str) -> None:
        self._reply(text.encode("ascii"))

    # -- SequenceSink -------------------------------------------------------------

    def draw(self, text: str) -> None:
        try:
            self._screen.draw(text)
        except Exception:  # containment boundary: lose this run only
            self._log_error("text")

    def control(self, char: str) -> None:
        handler = self._controls.get(char)
        if handler is None:
            return  # BEL, SO/SI (UTF-8 only), NUL: nothing to show
        try:
            handler()
        except Exception:  # containment boundary
            self._log_error("control")

    def head_limit(self, kind: str) -> int:
        # Only an OSC (up to its size limit) and a DCS head are ever looked at.
        if kind == "]":
            return MAX_SEQUENCE_BYTES
        return _DCS_HEAD_CHARS if kind == "P" else 0

    def string(self, kind: str, head: str, length: int, terminator: str) -> None:
        try:
            if kind == "]":
                if length <= MAX_SEQUENCE_BYTES:
                    self._osc(head, terminator)
            elif kind == "P":
                self._dcs(head)
        except Exception:  # containment boundary
            self._log_error("string sequence")

    def esc(self, intermediates: str, final: str) -> None:
        s = self._screen
        try:
            if intermediates == "":
                if final == "c":
                    self._reset()
                elif final == "7":
                    s.save_cursor()
                elif final == "8":
                    s.restore_cursor()
                elif final == "D":
                    s.index()
                elif final == "E":
                    s.linefeed()
                    s.carriage_return()
                elif final == "M":
                    s.reverse_index()
                elif final == "H":
                    s.set_tab_stop()
            elif intermediates == "#" and final == "8":
                s.alignment_display()
            elif intermediates in ("(", ")") and final in MAPS:
                s.define_charset(final, intermediates)
        except Exception:  # containment boundary
            self._log_error("escape sequence")

    def csi(self, params: str, intermediates: str, final: str) -> None:
        prefix = ""
        if params and params[0] in "<=>?":
            prefix, params = params[0], params[1:]
        if any(c in params for c in "<=>?"):
            return  # a marker anywhere else makes the sequence meaningless
        handler = self._csi.get((prefix, intermediates, final))
        if handler is None:
            return  # unknown or deliberately ignored (kitty keys, XTMODKEYS, ...)
        try:
            handler(params)
        except Exception:  # containment boundary: bad parameters, pyte asserts
            self._log_error("CSI " + prefix + intermediates + final)

    # -- strings --------------------------------------------------------------------

    def _osc(self, payload: str, terminator: str) -> None:
        raw = payload.encode("utf-8")
        if 2 + len(raw) + len(terminator) > MAX_SEQUENCE_BYTES:
            return
        code, _, rest = payload.partition(";")
        if code == "7501":
            self._osc7501(rest, raw[5:])
        elif code in ("10", "11", "12"):
            number = int(code)
            for item in rest.split(";"):
                if item == "?" and number <= 12:
                    rgb = BACKGROUND_RGB if number == 11 else FOREGROUND_RGB
                    self._send(f"\x1b]{number};{rgb}{terminator}")
                number += 1
        elif code == "4":
            items = rest.split(";")
            for index, spec in zip(items[::2], items[1::2], strict=False):
                if spec == "?" and index.isdigit() and int(index) <= 255:
                    colour = _rgb(g.FG_BG_256[int(index)])
                    self._send(f"\x1b]4;{int(index)};{colour}{terminator}")
        elif code in ("0", "2"):
            self.title = "".join(c for c in rest if c.isprintable())
        elif code == "133" and rest.startswith("A"):
            self._root_changed(self.records.drop_transient())

    def _osc7501(self, rest: str, raw_rest: bytes) -> None:
        if rest == "?":
            self._reply(PROBE_REPLY)
            return
        report = parse_report(raw_rest)
        if report is None:
            return
        changed = self.records.apply(report)
        self._on_report(report)
        self._root_changed(changed)

    def _root_changed(self, changed: bool) -> None:
        if changed and self._on_root_change is not None:
            self._on_root_change(self.records.root)

    def _dcs(self, head: str) -> None:
        m = _DCS_HEAD_RE.match(head)
        if m is None:
            return
        if m.group(1) == "+" and m.group(2) == "q":
            self._send(f"\x1bP0+r{ST}")  # XTGETTCAP: no capability is offered
        elif m.group(1) == "$" and m.group(2) == "q":
            self._send(f"\x1bP0$r{ST}")  # DECRQSS: not supported

    # -- ESC and CSI handlers -------------------------------------------------------

    def _reset(self) -> None:
        self._screen.reset()
        self.dec_modes.clear()
        self._root_changed(self.records.clear_all())

    def _csi_table(self) -> dict[tuple[str, str, str], Callable[[str], None]]:
        s = self._screen

        def one(method: Callable[[int], None], default: int = 0) -> Callable[[str], None]:
            return lambda p: method(_arg(_numbers(p), 0, default))

        table: dict[tuple[str, str, str], Callable[[str], None]] = {
            ("", "", "@"): one(s.insert_characters),
            ("", "", "A"): one(s.cursor_up),
            ("", "", "B"): one(s.cursor_down),
            ("", "", "C"): one(s.cursor_forward),
            ("", "", "D"): one(s.cursor_back),
            ("", "", "E"): one(s.cursor_down1),
            ("", "", "F"): one(s.cursor_up1),
            ("", "", "G"): one(s.cursor_to_column),
            ("", "", "`"): one(s.cursor_to_column),
            ("", "", "H"): self._cup,
            ("", "", "f"): self._cup,
            ("", "", "J"): one(s.erase_in_display),
            ("?", "", "J"): one(s.erase_in_display),
            ("", "", "K"): one(s.erase_in_line),
            ("?", "", "K"): one(s.erase_in_line),
            ("", "", "L"): one(s.insert_lines),
            ("", "", "M"): one(s.delete_lines),
            ("", "", "P"): one(s.delete_characters),
            ("", "", "X"): one(s.erase_characters),
            ("", "", "a"): one(s.cursor_forward),
            ("", "", "b"): one(s.repeat_last, 1),
            ("", "", "d"): one(s.cursor_to_line),
            ("", "", "e"): one(s.cursor_down),
            ("", "", "g"): one(s.clear_tab_stop),
            ("", "", "I"): one(s.tab_forward, 1),
            ("", "", "Z"): one(s.tab_back, 1),
            ("", "", "S"): self._scroll_up,
            ("", "", "T"): self._scroll_down,
            ("", "", "r"): self._margins,
            ("", "", "s"): lambda p: s.save_cursor(),
            ("", "", "u"): lambda p: s.restore_cursor(),
            ("", "", "m"): self._sgr,
            ("", "", "h"): self._ansi_modes(True),
            ("", "", "l"): self._ansi_modes(False),
            ("?", "", "h"): self._dec_mode_set,
            ("?", "", "l"): self._dec_mode_reset,
            ("", "", "n"): self._dsr,
            ("", "", "c"): self._da1,
            (">", "", "c"): lambda p: self._send(DA2_REPLY),
            (">", "", "q"): lambda p: self._send(XTVERSION_REPLY),
            ("", "", "t"): self._xtwinops,
            ("?", "$", "p"): self._decrqm_dec,
            ("", "$", "p"): self._decrqm_ansi,
            ("", "!", "p"): lambda p: s.soft_reset(),
        }
        return table

    def _cup(self, params: str) -> None:
        numbers = _numbers(params)
        self._screen.cursor_position(_arg(numbers, 0, 1), _arg(numbers, 1, 1))

    def _scroll_up(self, params: str) -> None:
        numbers = _numbers(params)
        if len(numbers) == 1:
            self._screen.scroll_up(_arg(numbers, 0, 1))

    def _scroll_down(self, params: str) -> None:
        numbers = _numbers(params)
        if len(numbers) == 1:  # five parameters would be mouse highlight tracking
            self._screen.scroll_down(_arg(numbers, 0, 1))

    def _margins(self, params: str) -> None:
        numbers = _numbers(params)
        top = numbers[0]
        bottom = numbers[1] if len(numbers) > 1 and numbers[1] else None
        self._screen.set_margins(top, bottom)

    def _sgr(self, params: str) -> None:
        groups = [[_int(sub) for sub in part.split(":")] for part in params.split(";")]
        self._screen.apply_sgr(groups)

    def _ansi_modes(self, on: bool) -> Callable[[str], None]:
        def apply(params: str) -> None:
            modes = [m for m in _numbers(params) if m in _KNOWN_ANSI_MODES]
            if on:
                self._screen.set_mode(*modes)
            else:
                self._screen.reset_mode(*modes)

        return apply

    def _dec_mode_set(self, params: str) -> None:
        s = self._screen
        for mode in _numbers(params):
            if mode in _PYTE_DEC_MODES:
                s.set_mode(mode, private=True)
            elif mode == 1049:
                s.enter_alternate(clear=True, save_cursor=True)
            elif mode in (47, 1047):
                s.enter_alternate(clear=False, save_cursor=False)
            elif mode == 1048:
                s.save_cursor()
            if mode != 3:  # DECCOLM would resize behind the PTY's back
                self.dec_modes.add(mode)

    def _dec_mode_reset(self, params: str) -> None:
        s = self._screen
        for mode in _numbers(params):
            if mode in _PYTE_DEC_MODES:
                s.reset_mode(mode, private=True)
            elif mode == 1049:
                s.leave_alternate(clear=False, restore_cursor=True)
            elif mode == 1047:
                s.leave_alternate(clear=True, restore_cursor=False)
            elif mode == 47:
                s.leave_alternate(clear=False, restore_cursor=False)
            elif mode == 1048:
                s.restore_cursor()
            self.dec_modes.discard(mode)

    def _dsr(self, params: str) -> None:
        mode = _arg(_numbers(params), 0, 0)
        s = self._screen
        if mode == 5:
            self._send("\x1b[0n")
        elif mode == 6:
            row = s.cursor.y + 1
            if mo.DECOM in s.mode and s.margins is not None:
                row -= s.margins.top
            self._send(f"\x1b[{row};{min(s.cursor.x, s.columns - 1) + 1}R")

    def _da1(self, params: str) -> None:
        if _arg(_numbers(params), 0, 0) == 0:
            self._send(DA1_REPLY)

    def _xtwinops(self, params: str) -> None:
        op = _arg(_numbers(params), 0, 0)
        rows, cols = self._screen.lines, self._screen.columns
        if op == 14:
            self._send(f"\x1b[4;{rows * CELL_HEIGHT_PX};{cols * CELL_WIDTH_PX}t")
        elif op == 16:
            self._send(f"\x1b[6;{CELL_HEIGHT_PX};{CELL_WIDTH_PX}t")
        elif op in (18, 19):
            self._send(f"\x1b[{op - 10};{rows};{cols}t")

    def _decrqm_dec(self, params: str) -> None:
        mode = _arg(_numbers(params), 0, 0)
        if mode in _PYTE_DEC_MODES:
            value = 1 if (mode << 5) in self._screen.mode else 2
        elif mode in (47, 1047, 1049):
            value = 1 if mode in self.dec_modes and self._screen.alternate_active else 2
        elif mode in _KNOWN_DEC_MODES:
            value = 1 if mode in self.dec_modes else 2
        else:
            value = 0
        self._send(f"\x1b[?{mode};{value}$y")

    def _decrqm_ansi(self, params: str) -> None:
        mode = _arg(_numbers(params), 0, 0)
        known = mode in _KNOWN_ANSI_MODES
        value = 0 if not known else 1 if mode in self._screen.mode else 2
        self._send(f"\x1b[{mode};{value}$y")
