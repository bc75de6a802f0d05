"""Remote text made safe for a terminal: the one place the operator's tools clean it.

Every string a service sends (a pane's name, a status field, an error message, a line of
the screen feed) is data, never terminal output: ``terminal_safe`` drops whole escape
sequences (CSI, OSC, DCS, SOS, PM, APC, two-byte ESC) and every remaining control — C0
(newline and tab only where asked), DEL, C1 — and the characters that reorder or split
what a reader sees (bidi embeddings, overrides and isolates, the marks LRM/RLM/ALM, the
line and paragraph separators U+2028/9). With ``keep_sgr`` the colour sequences of the
screen feed's styled lines (``ESC [ digits ; : m``) survive and nothing else does.
"""

from __future__ import annotations

import re

# An escape sequence, whole: CSI (with its parameters and final byte), the string
# sequences (OSC, DCS, SOS, PM, APC up to ST or BEL, or to the end when unterminated),
# their C1 forms, and ESC plus one byte.
_SEQUENCE = (
    r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[\x20-\x7e]?"
)
_SGR = r"\x1b\[[0-9;:]*m"
# C0 but tab and newline, DEL, C1; bidi controls and marks; line/paragraph separators.
_LOOSE = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029"
_CLEAN = re.compile(f"{_SEQUENCE}|[{_LOOSE}]")
# The same, where an SGR sequence is left alone (a lookahead, not a callback: C speed).
_CLEAN_KEEP_SGR = re.compile(f"(?!{_SGR})(?:{_SEQUENCE}|[{_LOOSE}])")
_BREAKS = re.compile("[\t\n]")


def terminal_safe(text: object, *, newlines: bool = False, keep_sgr: bool = False) -> str:
    """``text`` (any value: it is made a ``str`` first) without a control sequence or a
    control character; tab and newline are kept with ``newlines``, else each is a space."""
    value = text if isinstance(text, str) else str(text)
    # Printable text (most of it) holds none of what is dropped: no regex pass at all.
    if value.isprintable():
        return value
    cleaned = (_CLEAN_KEEP_SGR if keep_sgr else _CLEAN).sub("", value)
    return cleaned if newlines else _BREAKS.sub(" ", cleaned)
