"""The pane's status machine: lifecycle, agent state, blocked kind, turn and seq.

Pure and dependency-free. Inputs are the agent state a source decided (an OSC 7501
root record or a screen rule), lifecycle changes and the facts that a dialog was
denied or the turn interrupted. Rules (docs/design.md §4):
- ``seq`` +1 on every recorded change of (state, kind, lifecycle); never decreases.
- ``turn`` +1 when the pane goes ``working`` outside a turn, or straight to a
  ``blocked`` permission dialog outside a turn (after a finished turn, idle, or a screen
  no rule matched: a brief ``working`` may go unseen); ``blocked`` -> ``working`` stays
  in the same turn. Before the first client input (``note_input``) no turn opens: a
  program's own start-up activity (Codex reports working then idle right after its
  first idle) is not a turn, so a client's first prompt to a fresh pane is always
  turn 1.
- An ``idle`` that ends a turn is reported as ``done`` (agents such as OpenCode and
  Claude never report ``done``), or ``cancelled`` when the turn was denied at a dialog
  or interrupted.
"""

from __future__ import annotations

from collections import deque

from protocol.messages import (
    AgentState,
    BlockedKind,
    Lifecycle,
    PaneStatusFields,
    StatusSource,
    TokenUsage,
)
from protocol.status import ENDED_LIFECYCLES, SETTLED_STATES, state_after_death
from protocol.timing import STATUS_HISTORY_RECORDS

# States a program may report, mapped to the pane's agent state.
REPORTED_STATES: frozenset[str] = frozenset(
    {"idle", "working", "done", "blocked", "error", "clear", "unknown"}
)
_TURN_ENDING: frozenset[str] = frozenset({"done", "error", "cancelled"})


class StatusMachine:
    """Derives the pane status from reported agent states; see the module docstring."""

    def __init__(self, *, seq: int = 0, turn: int = 0) -> None:
        self.lifecycle: Lifecycle = "starting"
        self.state: AgentState = "unknown"
        self.kind: BlockedKind | None = None
        self.turn = turn
        self.seq = seq
        self.source: StatusSource = "none"
        self.exit_code: int | None = None
        # The agent's own token count (ACP panes): carried by records, not a change.
        self.usage: TokenUsage | None = None
        self._in_turn = False
        self._turn_cancelled = False
        self._input_seen = turn > 0
        # Every recorded change, newest last (sent with Hello to a restarted supervisor).
        self.history: deque[PaneStatusFields] = deque(maxlen=STATUS_HISTORY_RECORDS)

    def _recorded(self) -> None:
        self.seq += 1
        self.history.append(self.snapshot())

    def snapshot(self) -> PaneStatusFields:
        """The current record, as sent to the supervisor."""
        return PaneStatusFields(
            lifecycle=self.lifecycle,
            state=self.state,
            kind=self.kind,
            turn=self.turn,
            seq=self.seq,
            source=self.source,
            exit_code=self.exit_code,
            usage=self.usage,
        )

    @property
    def settled(self) -> bool:
        """True when a client waiting for the turn may act (docs/design.md §4 'Settled')."""
        return self.lifecycle in ENDED_LIFECYCLES or self.state in SETTLED_STATES

    def set_lifecycle(self, lifecycle: Lifecycle, exit_code: int | None = None) -> bool:
        """Record a lifecycle change; returns True when it changed the record."""
        if lifecycle == self.lifecycle and exit_code == self.exit_code:
            return False
        self.lifecycle = lifecycle
        self.exit_code = exit_code
        if lifecycle in ENDED_LIFECYCLES:
            state, kind = state_after_death(self.state, self.kind)
            if (state, kind) != (self.state, self.kind):
                self.state, self.kind = state, kind
                self._in_turn = False
        self._recorded()
        return True

    @property
    def input_seen(self) -> bool:
        """True once a client submitted input (or the pane was re-adopted mid-session)."""
        return self._input_seen

    def note_input(self) -> None:
        """A client submitted input: from now on ``working`` opens turns."""
        self._input_seen = True

    def note_cancel(self) -> None:
        """The current turn was denied at a dialog or interrupted by the client.

        A screen declined before any input (a start-up offer) ends no turn: the idle
        after it stays ``idle``.
        """
        if self._in_turn or (self.state == "blocked" and self._input_seen):
            self._turn_cancelled = True

    def apply(self, reported: str, kind: str | None, source: StatusSource) -> bool:
        """Apply a state decided by ``source``; returns True when the record changed."""
        if reported not in REPORTED_STATES:
            return False
        new_kind: BlockedKind | None = None
        new_state: AgentState
        if reported == "clear":
            # The program withdrew its report; the turn (if any) is still open so
            # that an OpenCode-style ``clear`` then ``idle`` still ends it as done.
            new_state = "unknown"
        elif reported == "working":
            new_state = "working"
            if not self._in_turn and self._input_seen:
                # (start) | IDLE | DONE | CANCELLED | ERROR -> WORKING: a new turn
                self.turn += 1
                self._in_turn = True
                self._turn_cancelled = False
        elif reported == "blocked":
            new_state = "blocked"
            new_kind = _blocked_kind(kind)
            if (
                not self._in_turn
                and self._input_seen
                and new_kind == "permission"
                and self.state != "blocked"
            ):
                # IDLE | DONE | CANCELLED | ERROR | UNKNOWN -> BLOCKED(permission): asking
                # to use a tool means work began, even if a brief `working` was never seen
                # (screen rules need two agreeing looks, and a screen between two frames
                # may match no rule at all). Before the first input (a trust prompt at
                # start) it does not.
                self.turn += 1
                self._in_turn = True
                self._turn_cancelled = False
        elif reported == "idle":
            if self._in_turn or self._turn_cancelled:
                # WORKING/BLOCKED -> IDLE ends the turn: done, or cancelled after a deny.
                new_state = "cancelled" if self._turn_cancelled else "done"
            elif self.state in ("done", "cancelled"):
                # An idle repeated after a finished turn says nothing new.
                new_state = self.state
            else:
                new_state = "idle"
        else:
            new_state = _agent_state(reported)
        if new_state in _TURN_ENDING or (new_state == "idle" and not self._in_turn):
            self._in_turn = False
            self._turn_cancelled = False
        if new_state == self.state and new_kind == self.kind:
            # Nothing recorded changed; ``source`` keeps naming who decided the record.
            return False
        self.state, self.kind = new_state, new_kind
        self.source = source
        self._recorded()
        return True


def _blocked_kind(kind: str | None) -> BlockedKind:
    if kind == "question":
        return "question"
    if kind == "auth":
        return "auth"
    # A blocked report without a recognised kind is treated as the most guarded kind.
    return "permission"


def _agent_state(reported: str) -> AgentState:
    if reported == "done":
        return "done"
    if reported == "error":
        return "error"
    return "unknown"
