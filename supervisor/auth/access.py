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
    """An authenticated caller: a client name, its scopes, and how it reached us."""

    name: str
    scopes: frozenset[str]
    # "http" (a named client or the token file's operator), "stdio", or "pane" (ctl).
    transport: str = "http"
    # The tool groups the operator lets this client see and call (None: every group).
    tool_groups: frozenset[str] | None = None

    @property
    def identity(self) -> str:
        """Who holds a controller lease: ``<transport>:<name>``, e.g. ``http:alice``."""
        return f"{self.transport}:{self.name}"


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

    def __init__(self, name: str = "stdio", transport: str = "stdio") -> None:
        self._caller = Caller(name, SCOPES, transport)

    def identify(self) -> Caller:
        """The single client, holding every scope."""
        return self._caller

    def audit(
        self, caller: Caller, tool: str, pane: str | None, outcome: str, code: str | None
    ) -> None:
        """No audit file in this mode."""


TOOL_GROUPS: frozenset[str] = frozenset({"panes", "coordination", "lanes"})


def visible(caller: Caller, scope: str, group: str) -> bool:
    """True when ``caller`` may see (and call) a tool of ``scope`` in ``group``."""
    return scope in caller.scopes and (caller.tool_groups is None or group in caller.tool_groups)


def check_group(caller: Caller, group: str) -> Caller:
    """Return ``caller`` if the operator lets it use tool ``group``; forbidden otherwise."""
    if caller.tool_groups is not None and group not in caller.tool_groups:
        raise PanewardenError(
            ErrorCode.FORBIDDEN, f"client {caller.name!r} is not given the {group!r} tools"
        )
    return caller


def check_scope(caller: Caller, scope: str) -> Caller:
    """Return ``caller`` if it holds ``scope``; raise forbidden otherwise."""
    if scope not in caller.scopes:
        raise PanewardenError(
            ErrorCode.FORBIDDEN, f"client {caller.name!r} lacks the {scope!r} scope"
        )
    return caller
