"""What a long tool call says it waits for, in its progress notifications.

Asked at each notification (every few seconds), so a handoff names the turn its pane is
on by then: ``waiting for rev's turn 3 to settle (working)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from protocol.errors import PanewardenError
from supervisor.panes.registry import PaneRegistry


def turns_message(registry: PaneRegistry, names: Sequence[str]) -> Callable[[], str]:
    """``waiting for A's turn N to settle (state)`` for each pane of ``names``."""

    def message() -> str:
        parts: list[str] = []
        for name in dict.fromkeys(names):
            try:
                status = registry.get(name).status
            except PanewardenError:
                parts.append(f"{name} (gone)")
                continue
            parts.append(f"{name}'s turn {status.turn} ({status.state})")
        return "waiting for " + ", ".join(parts) + " to settle"

    return message
