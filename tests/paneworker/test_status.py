"""The status machine: lifecycle, state, kind, turn and seq rules (docs/design.md §4)."""

from __future__ import annotations

import pytest

from paneworker.status.machine import StatusMachine
from protocol.messages import StatusSource


def running(*, prompted: bool = True) -> StatusMachine:
    """A running pane; ``prompted``: a client has already submitted input."""
    machine = StatusMachine()
    assert machine.set_lifecycle("running")
    if prompted:
        machine.note_input()
    return machine


def feed(machine: StatusMachine, *states: str) -> list[tuple[str, int, int]]:
    out: list[tuple[str, int, int]] = []
    for item in states:
        state, _, kind = item.partition(":")
        machine.apply(state, kind or None, "osc7501")
        out.append((machine.state, machine.turn, machine.seq))
    return out


def source_of(machine: StatusMachine) -> StatusSource:
    """Read afresh: mypy would keep ``machine.source`` narrowed from an earlier assert."""
    return machine.source


def test_a_turn_starts_at_working_and_ends_at_done() -> None:
    m = running()
    assert m.seq == 1 and m.turn == 0
    assert feed(m, "idle", "working", "done") == [("idle", 0, 2), ("working", 1, 3), ("done", 1, 4)]
    assert feed(m, "working", "done") == [("working", 2, 5), ("done", 2, 6)]


def test_a_dialog_inside_a_turn_keeps_the_turn() -> None:
    m = running()
    feed(m, "idle", "working", "blocked:permission", "working", "done")
    assert (m.state, m.turn) == ("done", 1)


def test_an_idle_that_ends_a_turn_is_done_or_cancelled_after_a_deny() -> None:
    m = running()
    feed(m, "idle", "working", "idle")
    assert (m.state, m.turn) == ("done", 1)
    feed(m, "working", "blocked:permission")
    m.note_cancel()
    feed(m, "idle")
    assert (m.state, m.turn) == ("cancelled", 2)
    # A repeated idle after a finished turn records nothing new.
    seq = m.seq
    assert not m.apply("idle", None, "osc7501")
    assert m.seq == seq and m.state == "cancelled"


def test_clear_then_idle_still_ends_the_turn_as_done() -> None:
    m = running()
    assert feed(m, "idle", "working", "clear", "idle")[-1][0] == "done"


def test_seq_moves_only_on_recorded_changes() -> None:
    m = running()
    feed(m, "idle")
    seq = m.seq
    assert not m.apply("idle", None, "screen")
    assert m.seq == seq and m.source == "osc7501"  # source names who decided the record
    assert m.apply("blocked", "question", "screen") and m.seq == seq + 1
    assert m.apply("blocked", "auth", "screen") and m.seq == seq + 2  # kind counts
    assert source_of(m) == "screen"


def test_a_permission_dialog_straight_after_a_finished_turn_opens_a_new_turn() -> None:
    m = running()
    feed(m, "idle", "working", "done")
    feed(m, "blocked:permission")
    assert (m.state, m.turn) == ("blocked", 2)
    feed(m, "working", "done")
    assert (m.state, m.turn) == ("done", 2)


@pytest.mark.parametrize("between", ["clear", "unknown"])
def test_a_permission_dialog_after_an_unclear_screen_opens_the_turn(between: str) -> None:
    # Codex, 1 run in ~20: after the prompt its screen matched no rule for a moment
    # (unknown), then its dialog showed before a `working` was ever decided. The prompt's
    # turn began all the same: the dialog must not read as turn 0.
    m = running(prompted=False)
    feed(m, "idle")
    m.note_input()
    feed(m, between, "blocked:permission")
    assert (m.state, m.turn) == ("blocked", 1)
    feed(m, "working", "idle")
    assert (m.state, m.turn) == ("done", 1)


def test_start_up_activity_before_the_first_input_opens_no_turn() -> None:
    # Codex reports working then idle right after its first idle, before any prompt.
    m = running(prompted=False)
    assert feed(m, "idle", "working", "idle") == [
        ("idle", 0, 2),
        ("working", 0, 3),
        ("idle", 0, 4),
    ]
    feed(m, "blocked:permission", "idle")
    assert (m.state, m.turn) == ("idle", 0)
    m.note_input()
    assert feed(m, "working", "done") == [("working", 1, 7), ("done", 1, 8)]


def test_a_trust_prompt_at_start_is_not_a_turn() -> None:
    m = running(prompted=False)
    feed(m, "blocked:permission")
    assert (m.state, m.turn) == ("blocked", 0)
    m.note_cancel()  # declined: no turn was open, so none is cancelled
    feed(m, "idle")
    assert (m.state, m.turn) == ("idle", 0)


def test_a_dialog_denied_in_a_turn_still_cancels_it() -> None:
    m = running()
    feed(m, "idle", "blocked:permission")
    assert (m.state, m.turn) == ("blocked", 1)
    m.note_cancel()
    feed(m, "idle")
    assert (m.state, m.turn) == ("cancelled", 1)


@pytest.mark.parametrize("kind", ["question", "auth"])
def test_other_blocked_kinds_after_idle_are_not_a_turn(kind: str) -> None:
    m = running()
    feed(m, "idle", f"blocked:{kind}")
    assert (m.state, m.kind, m.turn) == ("blocked", kind, 0)


def test_exit_clears_working_and_blocked_and_bumps_seq() -> None:
    m = running()
    feed(m, "idle", "working")
    seq = m.seq
    assert m.set_lifecycle("exited", exit_code=3)
    assert (m.lifecycle, m.state, m.exit_code, m.seq) == ("exited", "unknown", 3, seq + 1)
    assert m.settled


def test_unknown_reported_states_are_ignored() -> None:
    m = running()
    seq = m.seq
    assert not m.apply("sleeping", None, "osc7501")
    assert m.seq == seq
