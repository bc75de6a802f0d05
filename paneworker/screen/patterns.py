"""Regular expressions for output watches, in a linear-time engine.

A watch's pattern comes from any client with the read scope and is matched against
every screen change inside the worker's single-threaded loop, so a backtracking
engine would let one pattern (``(a+)+$``) stall the pane until it is killed. RE2
(``google-re2``) matches in time linear in the text; constructs it cannot do in
linear time (backreferences, lookaround) are refused when the watch is set up.
The engine is imported on first use: most panes never get a regex watch.
"""

from __future__ import annotations

from typing import Protocol

from protocol.errors import ErrorCode, PanewardenError

# RE2 refuses patterns whose compiled form would need more than this.
MAX_PROGRAM_BYTES = 8 << 20


class Pattern(Protocol):
    """What a watch needs of a compiled pattern."""

    def search(self, text: str) -> object | None:
        """A match object when ``text`` contains a match, else None."""


def compile_pattern(pattern: str) -> Pattern:
    """Compile ``pattern`` with RE2; raises invalid_argument for what RE2 refuses."""
    import re2

    options = re2.Options()
    options.log_errors = False
    options.max_mem = MAX_PROGRAM_BYTES
    try:
        compiled: Pattern = re2.compile(pattern, options)
    except re2.error as exc:
        raw = exc.args[0] if exc.args else b"invalid"
        detail = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
        raise PanewardenError(
            ErrorCode.INVALID_ARGUMENT,
            f"bad regular expression (RE2 syntax; no backreferences or lookaround): {detail}",
        ) from None
    return compiled
