"""What the pane answers and records for the sequences the scanner finds.

The same code for every backend, so both answer alike:

- DA1 ``CSI ? 62 ; 22 c``, DA2 ``CSI > 1 ; 10 ; 0 c``, DSR (``0 n``) and CPR,
  XTVERSION ``DCS > | panewarden(0.1) ST``, OSC 10/11/12 (white on black) and OSC 4
  palette queries (xterm's palette; the query's terminator is mirrored), DECRQM for
  ANSI and DEC modes, XTWINOPS 14/16/18/19 (10x20-pixel cells), XTGETTCAP and
  DECRQSS as "invalid" (no capability is offered).
- The OSC 7501 probe is echoed as ``ESC ] 7501 ; ? ESC \\`` in stream order, so it
  reaches the program before the DA1 answer that follows the probe.
- Deliberately unanswered: the kitty keyboard query ``CSI ? u`` (programs keep the
  legacy key encoding the worker sends), XTMODKEYS, and DECRQM ``?2027``
  (grapheme clusters: "unknown").

The window title (OSC 0 and OSC 2; OSC 1, the icon name, is ignored) is kept in
``title``, printable characters only: agents without OSC 7501 put their state there.

Status records: every valid OSC 7501 report is applied to ``records`` and passed to
``on_report``; RIS clears all records; OSC 133 ``A`` drops working/blocked ones.
``on_root_change`` hears every change of the root record, in stream order.
"""

from __future__ import annotations

from collections.abc import Callable

from pyte import graphics as g

from paneworker.screen.emulator.base import ScreenModel
from paneworker.screen.emulator.scanner import DCS, OSC, QUERY, RESET, Found
from paneworker.status.osc7501 import MAX_SEQUENCE_BYTES, StatusRecords, StatusReport, parse_report

PROBE_REPLY = b"\x1b]7501;?\x1b\\"
DA1_REPLY = b"\x1b[?62;22c"
DA2_REPLY = b"\x1b[>1;10;0c"
XTVERSION_REPLY = b"\x1bP>|panewarden(0.1)\x1b\\"
CELL_WIDTH_PX = 10
CELL_HEIGHT_PX = 20
FOREGROUND_RGB = "rgb:ffff/ffff/ffff"
BACKGROUND_RGB = "rgb:0000/0000/0000"
_MAX_PARAM = 65535

# DEC private modes DECRQM reports on; other numbers are answered "unknown".
KNOWN_DEC_MODES = frozenset(
    {1, 5, 6, 7, 12, 25, 47, 1000, 1002, 1003, 1004, 1005, 1006, 1015, 1016}
    | {1047, 1049, 2004, 2026}
)
KNOWN_ANSI_MODES = frozenset({4, 20})


def _rgb(hex6: str) -> str:
    return "rgb:" + "/".join(hex6[i : i + 2] * 2 for i in (0, 2, 4))


def _numbers(params: bytes) -> list[int]:
    """``;``-separated parameters, first sub-parameter of each, empty as 0, capped."""
    out: list[int] = []
    for part in params.split(b";"):
        digits = part.partition(b":")[0].lstrip(b"0")
        out.append(min(int(digits[:6] or b"0"), _MAX_PARAM))
    return out


class Answers:
    """Answers queries through ``reply`` and keeps the OSC 7501 records."""

    def __init__(
        self,
        model: ScreenModel,
        *,
        reply: Callable[[bytes], None],
        on_report: Callable[[StatusReport], None],
        on_root_change: Callable[[StatusReport | None], None] | None,
    ) -> None:
        self.model = model
        self._reply = reply
        self._on_report = on_report
        self._on_root_change = on_root_change
        self.records = StatusRecords()
        self.title = ""

    def handle(self, found: Found) -> None:
        """Act on one sequence; the screen is parsed up to its end."""
        if found.kind == QUERY:
            self._query(*found.groups)
        elif found.kind == OSC:
            self._osc(*found.groups)
        elif found.kind == DCS:
            intermediate = found.groups[0]
            self._reply(b"\x1bP0+r\x1b\\" if intermediate == b"+" else b"\x1bP0$r\x1b\\")
        elif found.kind == RESET:
            self._root_changed(self.records.clear_all())

    def _root_changed(self, changed: bool) -> None:
        if changed and self._on_root_change is not None:
            self._on_root_change(self.records.root)

    # -- CSI ----------------------------------------------------------------------

    def _query(self, prefix: bytes, params: bytes, intermediate: bytes, final: bytes) -> None:
        numbers = _numbers(params)
        first = numbers[0]
        if intermediate:
            if final == b"p" and prefix in (b"", b"?"):
                self._decrqm(first, private=prefix == b"?")
            return
        if prefix == b"":
            if final == b"n":
                self._dsr(first)
            elif final == b"c" and first == 0:
                self._reply(DA1_REPLY)
            elif final == b"t":
                self._xtwinops(first)
        elif prefix == b">":
            if final == b"c":
                self._reply(DA2_REPLY)
            elif final == b"q":
                self._reply(XTVERSION_REPLY)

    def _dsr(self, mode: int) -> None:
        if mode == 5:
            self._reply(b"\x1b[0n")
        elif mode == 6:
            row, col = self.model.cursor_report()
            self._reply(f"\x1b[{row};{col}R".encode())

    def _xtwinops(self, op: int) -> None:
        rows, cols = self.model.rows, self.model.cols
        if op == 14:
            self._reply(f"\x1b[4;{rows * CELL_HEIGHT_PX};{cols * CELL_WIDTH_PX}t".encode())
        elif op == 16:
            self._reply(f"\x1b[6;{CELL_HEIGHT_PX};{CELL_WIDTH_PX}t".encode())
        elif op in (18, 19):
            self._reply(f"\x1b[{op - 10};{rows};{cols}t".encode())

    def _decrqm(self, mode: int, *, private: bool) -> None:
        if private:
            known, on = mode in KNOWN_DEC_MODES, self.model.dec_mode
            head = "\x1b[?"
        else:
            known, on = mode in KNOWN_ANSI_MODES, self.model.ansi_mode
            head = "\x1b["
        value = 0 if not known else 1 if on(mode) else 2
        self._reply(f"{head}{mode};{value}$y".encode())

    # -- OSC ----------------------------------------------------------------------

    def _osc(self, code: bytes, payload: bytes, terminator: bytes) -> None:
        if 2 + len(code) + 1 + len(payload) + len(terminator) > MAX_SEQUENCE_BYTES:
            return
        if code == b"7501":
            self._osc7501(payload)
            return
        if code == b"133":
            if payload.startswith(b"A"):
                self._root_changed(self.records.drop_transient())
            return
        if code in (b"0", b"2"):
            text = payload.decode("utf-8", "replace")
            self.title = "".join(c for c in text if c.isprintable())
            return
        end = terminator.decode("ascii")
        if code == b"4":
            items = payload.split(b";")
            for index, spec in zip(items[::2], items[1::2], strict=False):
                if spec == b"?" and index.isdigit() and int(index) <= 255:
                    colour = _rgb(g.FG_BG_256[int(index)])
                    self._reply(f"\x1b]4;{int(index)};{colour}{end}".encode())
            return
        number = int(code)
        for item in payload.split(b";"):
            if item == b"?" and number <= 12:
                rgb = BACKGROUND_RGB if number == 11 else FOREGROUND_RGB
                self._reply(f"\x1b]{number};{rgb}{end}".encode())
            number += 1

    def _osc7501(self, payload: bytes) -> None:
        if payload == b"?":
            self._reply(PROBE_REPLY)
            return
        report = parse_report(payload)
        if report is None:
            return
        changed = self.records.apply(report)
        self._on_report(report)
        self._root_changed(changed)
