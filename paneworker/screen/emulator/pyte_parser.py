"""Escape-sequence syntax for the pane terminal: bytes in, whole tokens out.

:class:`SequenceParser` decodes UTF-8 incrementally and splits the text into text
runs, C0 controls, CSI and ESC sequences and control strings (OSC, DCS, APC, PM,
SOS), handing each complete token to a :class:`SequenceSink`. It works on whole
sequences with regexes instead of pyte's character-at-a-time generator, keeps an
incomplete sequence (or UTF-8 character) across ``feed`` calls, and never lets a
sequence's parameters or a string's payload reach the screen as text.

Rules (after ECMA-48 and what xterm/vte do): C0 controls inside a CSI are executed;
CAN/SUB cancel a sequence; an ESC inside a sequence abandons it and starts a new
one; a string ends at ST (``ESC \\``) or BEL; a CSI longer than 8192 characters is
swallowed to its final byte. Only a bounded head of a string is kept: the sink is
told the full length so it can enforce size limits without the parser storing it.
"""

from __future__ import annotations

import codecs
import re
from typing import Protocol

ESC = "\x1b"
ST = "\x1b\\"

# Outside any sequence, every character starts one of these; ``lastindex`` says which.
# The commonest shape in coding-CLI output, a colour change and the printable run
# after it, is one match and one draw.
_GROUND_RE = re.compile(
    r"([^\x00-\x1f\x7f-\x9f]+)"  # 1: printable run
    r"|\x1b\[([0-9;:]*)m([^\x00-\x1f\x7f-\x9f]*)"  # 2, 3: SGR and the run after it
    r"|(\r\n)"  # 4
    r"|\x1b\[([\x30-\x3f]*)([\x20-\x2f]*)([\x40-\x7e])"  # 5, 6, 7: other CSI
    r"|([\x00-\x1a\x1c-\x1f\x7f-\x9f])"  # 8: a control other than ESC
    r"|(\x1b)"  # 9: slow path
)
_CSI_RE = re.compile(r"\x1b\[([\x30-\x3f]*)([\x20-\x2f]*)([\x40-\x7e])")
_CSI_BODY_RE = re.compile(r"([\x30-\x3f]*)([\x20-\x2f]*)")
_CSI_PARAM_RE = re.compile(r"[\x20-\x3f]*")
_ESC_NF_RE = re.compile(r"\x1b([\x20-\x2f]+)([\x30-\x7e])?")
_STRING_END_RE = re.compile(r"[\x07\x18\x1a\x1b]")
_STRING_STARTERS = "]P_^X"
_MAX_CSI_CHARS = 8192
_MAX_ESC_INTERMEDIATES = 16


class SequenceSink(Protocol):
    """What the parser reports; implementations must not raise."""

    def draw(self, text: str) -> None:
        """Printable text (never contains C0/C1 controls or DEL)."""

    def control(self, char: str) -> None:
        """A C0 control other than ESC, CAN, SUB."""

    def sgr_text(self, params: str, text: str) -> None:
        """``CSI params m`` followed by printable ``text`` (possibly empty)."""

    def crlf(self) -> None:
        """CR immediately followed by LF."""

    def csi(self, params: str, intermediates: str, final: str) -> None:
        """``CSI params intermediates final``; ``params`` keeps any ``<=>?`` marker."""

    def esc(self, intermediates: str, final: str) -> None:
        """``ESC intermediates final``, other than CSI and the string introducers."""

    def string(self, kind: str, head: str, length: int, terminator: str) -> None:
        """A terminated control string: ``kind`` is ``]``, ``P``, ``_``, ``^`` or ``X``.

        ``head`` is at most the first ``head_limit(kind)`` characters of the payload;
        ``length`` is the payload's full length in characters.
        """

    def head_limit(self, kind: str) -> int:
        """How many payload characters of this kind of string the sink wants to see."""


class SequenceParser:
    """Tokenises a PTY byte stream for a :class:`SequenceSink`; state spans feeds."""

    def __init__(self, sink: SequenceSink) -> None:
        self._sink = sink
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._pending = ""
        self._string_kind: str | None = None
        self._string_parts: list[str] = []
        self._string_length = 0
        self._string_room = 0
        self._csi_ignore = False

    def feed(self, data: bytes) -> None:
        """Decode and tokenise ``data``; an unfinished sequence waits for the next call."""
        text = self._pending + self._decoder.decode(data)
        self._pending = ""
        self._process(text)

    def _process(self, s: str) -> None:
        n = len(s)
        i = 0
        while i < n:
            if self._string_kind is not None:
                i = self._string_continue(s, i)
            elif self._csi_ignore:
                i = self._csi_ignore_continue(s, i)
            else:
                i = self._ground(s, i)

    def _ground(self, s: str, i: int) -> int:
        """Tokens outside any sequence, one regex match each; returns where it stopped."""
        sink = self._sink
        draw = sink.draw
        sgr_text = sink.sgr_text
        crlf = sink.crlf
        csi = sink.csi
        control = sink.control
        for m in _GROUND_RE.finditer(s, i):
            kind = m.lastindex
            if kind == 1:
                draw(m.group(1))
            elif kind == 3:
                sgr_text(m.group(2), m.group(3))
            elif kind == 4:
                crlf()
            elif kind == 7:
                csi(m.group(5), m.group(6), m.group(7))
            elif kind == 8:
                char = m.group(8)
                if char < "\x18" or "\x1b" < char < "\x20" or char == "\x19":
                    control(char)
            else:  # a lone ESC: strings, ESC sequences, unfinished or odd CSIs
                return self._escape(s, m.start())
        return len(s)

    def _escape(self, s: str, j: int) -> int:
        n = len(s)
        if j + 1 >= n:
            self._pending = s[j:]
            return n
        c = s[j + 1]
        if c == "[":
            m = _CSI_RE.match(s, j)
            if m is not None:
                self._sink.csi(m.group(1), m.group(2), m.group(3))
                return m.end()
            return self._csi_slow(s, j)
        if c in _STRING_STARTERS:
            self._string_kind = c
            self._string_parts = []
            self._string_length = 0
            self._string_room = self._sink.head_limit(c)
            return j + 2
        if "\x20" <= c <= "\x2f":
            nf = _ESC_NF_RE.match(s, j)
            assert nf is not None  # the intermediate at j + 1 always matches
            if nf.group(2) is not None:
                self._sink.esc(nf.group(1), nf.group(2))
            elif nf.end() == n and len(nf.group(1)) <= _MAX_ESC_INTERMEDIATES:
                self._pending = s[j:]
            return nf.end()
        if "\x30" <= c <= "\x7e":
            self._sink.esc("", c)
            return j + 2
        return j + 1  # ESC before a control or non-ASCII: drop the ESC only

    def _csi_slow(self, s: str, j: int) -> int:
        """A CSI that is incomplete or holds a stray byte; controls inside are executed."""
        body: list[str] = []
        n = len(s)
        k = j + 2
        while k < n:
            char = s[k]
            code = ord(char)
            if 0x20 <= code <= 0x3F:
                body.append(char)
            elif 0x40 <= code <= 0x7E:
                params = _CSI_BODY_RE.fullmatch("".join(body))
                if params is not None:
                    self._sink.csi(params.group(1), params.group(2), char)
                return k + 1
            elif char == ESC:
                return k
            elif char in "\x18\x1a":
                return k + 1
            elif code < 0x20:
                self._sink.control(char)
            elif code != 0x7F:
                return k  # not part of any CSI: abandon it and show the character
            k += 1
        if len(body) > _MAX_CSI_CHARS:
            self._csi_ignore = True
        else:
            # Controls already executed are left out, so they do not run twice.
            self._pending = "\x1b[" + "".join(body)
        return n

    def _csi_ignore_continue(self, s: str, i: int) -> int:
        end = _CSI_PARAM_RE.match(s, i)
        assert end is not None  # the pattern matches the empty string
        k = end.end()
        if k == len(s):
            return k
        self._csi_ignore = False
        return k + 1 if "\x40" <= s[k] <= "\x7e" else k

    def _string_continue(self, s: str, i: int) -> int:
        n = len(s)
        m = _STRING_END_RE.search(s, i)
        end = m.start() if m is not None else n
        if end > i:
            if self._string_room > 0:
                part = s[i : min(end, i + self._string_room)]
                self._string_parts.append(part)
                self._string_room -= len(part)
            self._string_length += end - i
        if m is None:
            return n
        char = s[end]
        if char == "\x07":
            self._string_finish("\x07")
            return end + 1
        if char != ESC:  # CAN or SUB cancel the string
            self._string_kind = None
            return end + 1
        if end + 1 >= n:
            self._pending = ESC
            return n
        if s[end + 1] == "\\":
            self._string_finish(ST)
            return end + 2
        self._string_kind = None  # ESC starts a new sequence: the string is abandoned
        return end

    def _string_finish(self, terminator: str) -> None:
        kind = self._string_kind
        assert kind is not None
        self._string_kind = None
        head = "".join(self._string_parts)
        self._string_parts = []
        self._sink.string(kind, head, self._string_length, terminator)
