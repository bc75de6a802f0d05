"""Who is calling, and what they may do: caller identity, scopes and the audit hook.

Each tool names one scope; the front-end asks ``Access.identify`` who calls and
``check_scope`` refuses a missing scope with ``forbidden``. Over stdio there is one
client, ``stdio``, with every scope.
Mutating calls are reported to ``Access.audit`` (a no-op unless an audit file is
configured).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from protocol.errors import ErrorCode, PanewardenError

SCOPES: frozenset[str] = frozenset({"read", "input", "dialog", "lifecycle", "control", "admin"})


@dataclass(frozen=True)
class Caller:
    """An authenticated caller: a client name and its scopes."""

    name: str
    scopes: frozenset[str]


class Access(Protocol):
    """Resolves the caller of the current request and records mutating calls."""

    def identify(self) -> Caller:
        """The caller of the current request."""
        ...

    def audit(
        self, caller: Caller, tool: str, pane: str | None, outcome: str, code: str | None
    ) -> None:
        """Record one mutating call (content-free)."""
        ...


class SingleClientAccess:
    """One client with every scope (stdio, or the single-token HTTP mode)."""

    def __init__(self, name: str = "stdio") -> None:
        self._caller = Caller(name, SCOPES)

    def identify(self) -> Caller:
        """The single client, holding every scope."""
        return self._caller

    def audit(
        self, caller: Caller, tool: str, pane: str | None, outcome: str, code: str | None
    ) -> None:
        """No audit file in this mode."""


def check_scope(caller: Caller, scope: str) -> Caller:
    """Return ``caller`` if it holds ``scope``; raise forbidden otherwise."""
    if scope not in caller.scopes:
        raise PanewardenError(
            ErrorCode.FORBIDDEN, f"client {caller.name!r} lacks the {scope!r} scope"
        )
    return caller
