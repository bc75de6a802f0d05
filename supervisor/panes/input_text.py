"""What text may be typed into a pane: printable characters, newline and tab.

Every path that types into a pane (``send_input``, ``relay``, the handoffs, ``ctl
ask``) checks its text here, so a control sequence can never be smuggled into a
program's terminal (an ESC would let a caller drive the program's TUI, answer its
dialogs or change its modes behind the service's back).
"""

from __future__ import annotations

from protocol.errors import ErrorCode, PanewardenError


def check_input_text(text: str) -> None:
    """Refuse C0 and C1 control characters other than newline and tab.

    Raises:
        PanewardenError: ``invalid_argument`` naming the first offending character.
    """
    for ch in text:
        code = ord(ch)
        if (code < 0x20 and ch not in "\n\t") or 0x7F <= code <= 0x9F:
            raise PanewardenError(
                ErrorCode.INVALID_ARGUMENT,
                f"text contains control character U+{code:04X}; only newline and tab are allowed",
            )
