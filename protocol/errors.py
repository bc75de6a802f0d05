"""Stable error codes (docs/design.md §9) and the one exception type that carries them.

Codes are contracts: clients branch on them. Add new ones when needed; never reuse
or rename one.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    """Every error code panewarden can return to a client or a peer."""

    INVALID_ARGUMENT = "invalid_argument"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    PANE_EXISTS = "pane_exists"
    PANE_LIMIT = "pane_limit"
    PROFILE_NOT_FOUND = "profile_not_found"
    CWD_NOT_ALLOWED = "cwd_not_allowed"
    SPAWN_FAILED = "spawn_failed"
    CREDENTIAL_UNAVAILABLE = "credential_unavailable"
    PANE_NOT_RUNNING = "pane_not_running"
    PANE_BLOCKED = "pane_blocked"
    PANE_LEASED = "pane_leased"
    NO_DIALOG = "no_dialog"
    DIALOG_UNRECOGNIZED = "dialog_unrecognized"
    DIALOG_CHANGED = "dialog_changed"
    DIALOG_REFUSED = "dialog_refused"
    CURSOR_MISMATCH = "cursor_mismatch"
    TIMEOUT = "timeout"
    WORKER_LOST = "worker_lost"
    FENCE_INVALID = "fence_invalid"
    LEASE_CONFLICT = "lease_conflict"
    LEASE_STATE = "lease_state"
    RECEIPT_OUTSTANDING = "receipt_outstanding"
    DELIVERY_AMBIGUOUS = "delivery_ambiguous"
    GIT_PRECONDITION = "git_precondition"
    SCOPE_CONFLICT = "scope_conflict"
    OBJECT_INVALID = "object_invalid"
    SANDBOX_UNAVAILABLE = "sandbox_unavailable"
    STORE_BUSY = "store_busy"
    IDENTITY_CHANGED = "identity_changed"
    PANE_BUSY = "pane_busy"
    CONFIG_INVALID = "config_invalid"
    CTL_BUSY = "ctl_busy"
    INTERNAL = "internal"


class PanewardenError(Exception):
    """An anticipated failure with a stable code and a message safe to show a client.

    The message must never contain prompt text, screen content or credentials.
    """

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"PanewardenError({self.code.value!r}, {self.message!r})"


# A client's value appears in an error message cut to this many characters.
ECHO_CHARS = 64


def clip(text: str, limit: int = ECHO_CHARS) -> str:
    """``text`` cut to its first ``limit`` characters (``…`` marks a cut).

    Every error message that repeats something a client sent goes through here (or
    ``echo``): a 10 MB value must not come back as a 10 MB answer.
    """
    return text if len(text) <= limit else f"{text[:limit]}…"


def echo(value: object, limit: int = ECHO_CHARS) -> str:
    """A client's value quoted for an error message: ``repr`` of its ``clip``."""
    return repr(clip(value if isinstance(value, str) else repr(value), limit))
