"""The pyte backend's sequence meanings: each parsed token applied to the screen.

:class:`Dispatcher` is the :class:`~paneworker.screen.emulator.pyte_parser.SequenceSink`
behind :class:`~paneworker.screen.emulator.pyte_model.PyteModel`: it applies each token
to the :class:`~paneworker.screen.emulator.pyte_screen.PaneScreen` and keeps the DEC
private modes pyte does not track. Any error while handling one token (a pyte
assertion, odd parameters) is logged and confined to that token.

Queries, OSC 7501 and the other sequences the worker answers or acts on are not
handled here: :mod:`paneworker.screen.emulator.answers` does that for every backend.
Deliberately ignored: the kitty keyboard protocol (push/pop/set), XTMODKEYS, and
DECCOLM (``?3``: the PTY's size is the worker's to set).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pyte import modes as mo
from pyte.charsets import MAPS
from pyte.screens import Char

from paneworker.screen.emulator.pyte_screen import PaneScreen

_LOG = logging.getLogger(__name__)

_MAX_PARAM = 65535
_MAX_LOGGED_ERRORS = 10
# Distinct (SGR parameters, attributes before) pairs remembered; CLIs use a few dozen.
_MAX_SGR_CACHE = 4096

# DEC private modes pyte keeps in ``screen.mode`` (the others are kept here; DECSCNM,
# ``?5``, among them: the screen is not drawn reversed).
PYTE_DEC_MODES = frozenset({6, 7, 25})
_KNOWN_ANSI_MODES = frozenset({mo.IRM, mo.LNM})


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
    """Applies parsed tokens to a :class:`PaneScreen`."""

    def __init__(self, screen: PaneScreen) -> None:
        self._screen = screen
        self.dec_modes: set[int] = set()
        self._errors = 0
        # (params, attributes before) -> attributes after: an SGR seen before is one lookup.
        self._sgr_cache: dict[tuple[str, Char], Char] = {}

    def _log_error(self, what: str) -> None:
        self._errors += 1
        level = logging.WARNING if self._errors <= _MAX_LOGGED_ERRORS else logging.DEBUG
        _LOG.log(level, "terminal: error handling %s; sequence skipped", what, exc_info=True)

    # -- SequenceSink -------------------------------------------------------------

    def draw(self, text: str) -> None:
        try:
            self._screen.draw(text)
        except Exception:  # containment boundary: lose this run only
            self._log_error("text")

    def sgr_text(self, params: str, text: str) -> None:
        cursor = self._screen.cursor
        after = self._sgr_cache.get((params, cursor.attrs))
        if after is None:
            self._sgr(params)
        else:
            cursor.attrs = after
        if text:
            try:
                self._screen.draw(text)
            except Exception:  # containment boundary: lose this run only
                self._log_error("text")

    def crlf(self) -> None:
        try:
            self._screen.crlf()
        except Exception:  # containment boundary
            self._log_error("control")

    def control(self, char: str) -> None:
        handler = _CONTROLS.get(char)
        if handler is None:
            return  # BEL, SO/SI (UTF-8 only), NUL: nothing to show
        try:
            handler(self._screen)
        except Exception:  # containment boundary
            self._log_error("control")

    def head_limit(self, kind: str) -> int:
        return 0  # no string changes the screen

    def string(self, kind: str, head: str, length: int, terminator: str) -> None:
        return  # OSC, DCS, APC, PM and SOS never change the screen

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
        handler = _CSI.get((prefix, intermediates, final))
        if handler is None:
            return  # unknown or deliberately ignored (kitty keys, XTMODKEYS, ...)
        try:
            handler(self, params)
        except Exception:  # containment boundary: bad parameters, pyte asserts
            self._log_error("CSI " + prefix + intermediates + final)

    # -- ESC and CSI handlers -------------------------------------------------------

    def _reset(self) -> None:
        self._screen.reset()
        self.dec_modes.clear()

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
        cursor = self._screen.cursor
        key = (params, cursor.attrs)
        after = self._sgr_cache.get(key)
        if after is not None:
            cursor.attrs = after
            return
        try:
            groups = [[_int(sub) for sub in part.split(":")] for part in params.split(";")]
            self._screen.apply_sgr(groups)
        except Exception:  # containment boundary: bad parameters
            self._log_error("SGR")
            return
        if len(self._sgr_cache) >= _MAX_SGR_CACHE:
            self._sgr_cache.clear()
        self._sgr_cache[key] = self._screen.cursor.attrs

    def _ansi_mode_set(self, params: str) -> None:
        self._screen.set_mode(*[m for m in _numbers(params) if m in _KNOWN_ANSI_MODES])

    def _ansi_mode_reset(self, params: str) -> None:
        self._screen.reset_mode(*[m for m in _numbers(params) if m in _KNOWN_ANSI_MODES])

    def _dec_mode_set(self, params: str) -> None:
        s = self._screen
        for mode in _numbers(params):
            if mode in PYTE_DEC_MODES:
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
            if mode in PYTE_DEC_MODES:
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


# The handler tables, built once at import and shared by every screen (and, in a worker
# forked from the template, by every worker: a table built per screen touched every
# handler and copied the pages holding them).
Handler = Callable[[Dispatcher, str], None]


def _one(method: Callable[[PaneScreen, int], None], default: int = 0) -> Handler:
    """A sequence with one numeric parameter (``default`` when absent or 0)."""
    return lambda d, p: method(d._screen, _arg(_numbers(p), 0, default))


def _plain(method: Callable[[PaneScreen], None]) -> Handler:
    """A sequence whose parameters mean nothing."""
    return lambda d, _p: method(d._screen)


_CONTROLS: dict[str, Callable[[PaneScreen], None]] = {
    "\n": PaneScreen.linefeed,
    "\x0b": PaneScreen.linefeed,
    "\x0c": PaneScreen.linefeed,
    "\r": PaneScreen.carriage_return,
    "\x08": PaneScreen.backspace,
    "\t": PaneScreen.tab,
}

_CSI: dict[tuple[str, str, str], Handler] = {
    ("", "", "@"): _one(PaneScreen.insert_characters),
    ("", "", "A"): _one(PaneScreen.cursor_up),
    ("", "", "B"): _one(PaneScreen.cursor_down),
    ("", "", "C"): _one(PaneScreen.cursor_forward),
    ("", "", "D"): _one(PaneScreen.cursor_back),
    ("", "", "E"): _one(PaneScreen.cursor_down1),
    ("", "", "F"): _one(PaneScreen.cursor_up1),
    ("", "", "G"): _one(PaneScreen.cursor_to_column),
    ("", "", "`"): _one(PaneScreen.cursor_to_column),
    ("", "", "H"): Dispatcher._cup,
    ("", "", "f"): Dispatcher._cup,
    ("", "", "J"): _one(PaneScreen.erase_in_display),
    ("?", "", "J"): _one(PaneScreen.erase_in_display),
    ("", "", "K"): _one(PaneScreen.erase_in_line),
    ("?", "", "K"): _one(PaneScreen.erase_in_line),
    ("", "", "L"): _one(PaneScreen.insert_lines),
    ("", "", "M"): _one(PaneScreen.delete_lines),
    ("", "", "P"): _one(PaneScreen.delete_characters),
    ("", "", "X"): _one(PaneScreen.erase_characters),
    ("", "", "a"): _one(PaneScreen.cursor_forward),
    ("", "", "b"): _one(PaneScreen.repeat_last, 1),
    ("", "", "d"): _one(PaneScreen.cursor_to_line),
    ("", "", "e"): _one(PaneScreen.cursor_down),
    ("", "", "g"): _one(PaneScreen.clear_tab_stop),
    ("", "", "I"): _one(PaneScreen.tab_forward, 1),
    ("", "", "Z"): _one(PaneScreen.tab_back, 1),
    ("", "", "S"): Dispatcher._scroll_up,
    ("", "", "T"): Dispatcher._scroll_down,
    ("", "", "r"): Dispatcher._margins,
    ("", "", "s"): _plain(PaneScreen.save_cursor),
    ("", "", "u"): _plain(PaneScreen.restore_cursor),
    ("", "", "m"): Dispatcher._sgr,
    ("", "", "h"): Dispatcher._ansi_mode_set,
    ("", "", "l"): Dispatcher._ansi_mode_reset,
    ("?", "", "h"): Dispatcher._dec_mode_set,
    ("?", "", "l"): Dispatcher._dec_mode_reset,
    ("", "!", "p"): _plain(PaneScreen.soft_reset),
}
