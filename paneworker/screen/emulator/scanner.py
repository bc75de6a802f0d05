"""A cheap pass over raw PTY bytes that finds the sequences the worker acts on.

The emulator may parse output long after it was read (the worker drains the PTY
first and parses in batches), but some sequences cannot wait or must be handled
in stream order with the screen: terminal queries (DA1/DA2, DSR/CPR, XTVERSION,
XTWINOPS, DECRQM, XTGETTCAP/DECRQSS, colour queries), OSC 7501 reports and the
probe, OSC 133 ``A``, the window title (OSC 0 and 2), RIS, and the
synchronized-output markers ``?2026h/l``.
:class:`SequenceScanner` finds them with one regular expression over the bytes as
they are read, and keeps an unfinished sequence across reads.

Why a regex over bytes is exact here: ESC always starts a new sequence (in a CSI
it abandons the CSI, in a string it ends or abandons the string), and no payload
of a string can hold an ESC, so ``ESC [ 6 n`` anywhere in the stream is a real
cursor position query. Not found (so not answered): queries with C0 controls
inside their parameters, and parameter lists longer than 64 characters.
"""

from __future__ import annotations

import re
from typing import NamedTuple

QUERY = 0  # CSI query candidate: groups (prefix, params, intermediate, final)
OSC = 1  # groups (code, payload, terminator)
DCS = 2  # groups (intermediate,)
RESET = 3  # RIS
SYNC_ON = 4  # ?2026h
SYNC_OFF = 5  # ?2026l

# The longest OSC payload looked at; longer reports are dropped whole anyway.
MAX_OSC_PAYLOAD = 4096
_STRING_BODY = rb"[^\x07\x18\x1a\x1b]"

# Two stages, for speed: a loose pattern that fails fast on the common sequences
# (colours, cursor moves: possessive quantifiers, no backtracking) finds the rare
# candidates; the exact pattern then reads each candidate.
_CANDIDATE = re.compile(rb"\x1b(?:\[[<=>?]?+[0-9:;]{0,64}+\$?+[cnqtphl]|[\]Pc])")
_FIND = re.compile(
    rb"\x1b(?:"
    rb"\[([<=>?]?+)([0-9:;]{0,64}+)(\$?+)([cnqtp])"  # 1-4
    rb"|\[\?((?:[0-9:;]*;)?2026(?:;[0-9:;]*+)?)([hl])"  # 5-6
    rb"|\](7501|10|11|12|4|133|0|2);(" + _STRING_BODY + rb"{0,4096}+)(\x07|\x1b\\)"  # 7-9
    rb"|P[\x30-\x3f]{0,64}+([+$])q" + _STRING_BODY + rb"{0,4096}+(?:\x07|\x1b\\)"  # 10
    rb"|(c)"  # 11
    rb")"
)
# An interesting sequence that may still be completed by the next read (matched at
# an ESC to the end of what was read).
_UNFINISHED = re.compile(
    rb"\x1b(?:"
    rb"\[[<=>?]?+[0-9:;]{0,64}+\$?+"
    rb"|\][0-9]{0,4}+(?:;" + _STRING_BODY + rb"{0,4096}+)?\x1b?"
    rb"|P[\x30-\x3f]{0,64}+(?:[+$](?:q" + _STRING_BODY + rb"{0,4096}+\x1b?)?)?"
    rb")?"
)


class Found(NamedTuple):
    """One sequence: absolute offsets of its ESC and of the byte after it."""

    start: int
    end: int
    kind: int
    groups: tuple[bytes, ...]


class SequenceScanner:
    """Finds :class:`Found` sequences in a byte stream fed in pieces."""

    def __init__(self) -> None:
        self._carry = b""

    def scan(self, data: bytes, offset: int) -> list[Found]:
        """Sequences completed by ``data``, which starts at absolute ``offset``."""
        window = self._carry + data if self._carry else data
        base = offset - len(self._carry)
        found: list[Found] = []
        last_esc = window.rfind(b"\x1b")
        if last_esc < 0:
            self._carry = b""
            return found
        exact = _FIND.match
        for candidate in _CANDIDATE.finditer(window):
            m = exact(window, candidate.start())
            if m is not None:
                found.append(_classify(m, base))
        self._carry = window[self._unfinished_from(window, last_esc) :]
        return found

    @staticmethod
    def _unfinished_from(window: bytes, last_esc: int) -> int:
        """Where an unfinished interesting sequence starts at the end, or ``len(window)``.

        Only the last ESC can start one, except that a lone ESC at the very end may
        be the first half of the ST that ends an OSC or DCS begun at the ESC before.
        """
        end = len(window)
        if last_esc == end - 1 and last_esc > 0:
            before = window.rfind(b"\x1b", max(0, end - 2 * MAX_OSC_PAYLOAD), last_esc)
            if before >= 0:
                m = _UNFINISHED.match(window, before)
                if m is not None and m.end() == end and window[before + 1] in b"]P":
                    return before
        m = _UNFINISHED.match(window, last_esc)
        return last_esc if m is not None and m.end() == end else end

    def reset(self) -> None:
        """Forget an unfinished sequence (the bytes after it were dropped)."""
        self._carry = b""


def _classify(m: re.Match[bytes], base: int) -> Found:
    start, end = m.start() + base, m.end() + base
    if m.group(4) is not None:
        return Found(start, end, QUERY, (m.group(1), m.group(2), m.group(3), m.group(4)))
    if m.group(6) is not None:
        return Found(start, end, SYNC_ON if m.group(6) == b"h" else SYNC_OFF, ())
    if m.group(7) is not None:
        return Found(start, end, OSC, (m.group(7), m.group(8), m.group(9)))
    if m.group(10) is not None:
        return Found(start, end, DCS, (m.group(10),))
    return Found(start, end, RESET, ())
