"""What a pane status means, for both processes: which states are settled, which
lifecycles are final, and what a dead program's state becomes.

The worker's status machine applies these rules to the records it makes; the supervisor
applies the same ones when it makes the one record of its own (a worker found dead) and
when it waits on a pane's history.
"""

from __future__ import annotations

from protocol.messages import AgentState, BlockedKind, PaneStatusFields

# Agent states at which a client waiting for a turn may act (docs/design.md §4).
SETTLED_STATES: frozenset[str] = frozenset({"idle", "done", "blocked", "error", "cancelled"})
# Lifecycles after which the pane will never reach another state: its program exited, or
# its worker was lost.
ENDED_LIFECYCLES: frozenset[str] = frozenset({"exited", "lost"})
# What ``wait_status`` waits for unless told otherwise: a settled state or an ended pane.
SETTLED: frozenset[str] = SETTLED_STATES | ENDED_LIFECYCLES


def is_settled(status: PaneStatusFields) -> bool:
    """True when the record is settled: a settled state, or a pane that ended."""
    return status.state in SETTLED_STATES or status.lifecycle in ENDED_LIFECYCLES


def has_ended(status: PaneStatusFields) -> bool:
    """True when the pane's program or worker is gone: no other state will come."""
    return status.lifecycle in ENDED_LIFECYCLES


def state_after_death(
    state: AgentState, kind: BlockedKind | None
) -> tuple[AgentState, BlockedKind | None]:
    """A program that died is neither working nor waiting on a dialog any more: those
    states become ``unknown``; every other state is kept (with its kind)."""
    if state in ("working", "blocked"):
        return "unknown", None
    return state, kind
