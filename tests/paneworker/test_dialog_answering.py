"""answer_dialog on a real PTY: the exact planned keys, or nothing at all.

The request handler runs against a scripted agent (``scripted_pane``); refusals are
checked on the agent's log of every byte it read.
"""

from __future__ import annotations

import select
import time
from collections.abc import Callable

import pytest

from paneworker.requests.dialog_answering import DIALOG_REDRAW_TIMEOUT_S, DIALOG_SETTLE_MAX_S
from protocol.messages import AnswerDialog, Failed, Ok, WriteInput
from tests.paneworker.dialog_screens import (
    BLOCKED,
    CLAUDE_AUTO_OFFER,
    CLAUDE_OFFER,
    DEMO_DIALOG,
    DEVIN_OPTIONS,
    DOWN,
    ENTER,
    ESC,
    OC_REFUSED,
    SCREENS,
    claude_at,
    crlf,
    devin_dialog,
    kiro_dialog,
    opencode_dialog,
    recorded_at,
    refocus,
)
from tests.paneworker.scripted_pane import (
    ScriptedPane,
    blocked_on,
    code_of,
)

ANSWERED = [
    ("opencode", [opencode_dialog() + BLOCKED], "allow_once", ENTER),
    ("opencode", [opencode_dialog() + BLOCKED], "deny_once", ESC),
    ("kiro", [kiro_dialog(0) + BLOCKED], "allow_once", ENTER),
    (
        "kiro",
        [kiro_dialog(0) + BLOCKED, kiro_dialog(1), kiro_dialog(2)],
        "deny_once",
        DOWN + DOWN + ENTER,
    ),
    ("devin", [devin_dialog(0) + BLOCKED], "allow_once", ENTER),
    (
        "devin",
        [devin_dialog(0) + BLOCKED, devin_dialog(1), devin_dialog(2), devin_dialog(3)],
        "deny_once",
        DOWN * 3 + ENTER,
    ),
    ("claude", [claude_at(1452).decode()], "deny_once", ESC),
    ("demo", [DEMO_DIALOG + BLOCKED], "allow_once", ENTER),
]


@pytest.mark.parametrize(
    ("agent", "frames", "answer", "expected"),
    ANSWERED,
    ids=[f"{a}-{ans}" for a, _, ans, _ in ANSWERED],
)
def test_answer_dialog_types_exactly_the_planned_keys(
    scripted: Callable[..., ScriptedPane],
    agent: str,
    frames: list[str],
    answer: str,
    expected: bytes,
) -> None:
    pane = blocked_on(scripted(agent, frames), "")
    reply = pane.answer(answer)
    assert isinstance(reply, Ok), reply
    assert pane.typed() == expected


REFUSED = [
    ("opencode", [OC_REFUSED["highlight-on-always"] + BLOCKED], "allow_once"),
    ("opencode", [OC_REFUSED["reverse-on-allow"] + BLOCKED], "allow_once"),
    ("opencode", [OC_REFUSED["mixed-within-allow"] + BLOCKED], "allow_once"),
    ("opencode", [OC_REFUSED["default-on-allow"] + BLOCKED], "allow_once"),
    ("opencode", [OC_REFUSED["all-equal"] + BLOCKED], "allow_once"),
    ("opencode", [opencode_dialog(hint="enter confirm") + BLOCKED], "deny_once"),
    (
        "kiro",
        [crlf((SCREENS / "kiro" / "subagent_approval.txt").read_text()) + BLOCKED],
        "deny_once",
    ),
    ("kiro", [kiro_dialog(0).replace("ESC to close", "") + BLOCKED], "allow_once"),
    ("devin", [devin_dialog(command="Edit a.py") + BLOCKED], "allow_once"),
    ("devin", [devin_dialog(options=DEVIN_OPTIONS[:3]) + BLOCKED], "deny_once"),
    ("codex", [opencode_dialog() + BLOCKED], "deny_once"),
    ("generic", [DEMO_DIALOG + BLOCKED], "allow_once"),
]


@pytest.mark.parametrize(
    ("agent", "frames", "answer"),
    REFUSED,
    ids=[f"{a}-{ans}-{i}" for i, (a, _, ans) in enumerate(REFUSED)],
)
def test_every_refusal_types_nothing(
    scripted: Callable[..., ScriptedPane],
    agent: str,
    frames: list[str],
    answer: str,
) -> None:
    pane = blocked_on(scripted(agent, frames), "")
    assert code_of(pane.answer(answer)) == "dialog_unrecognized"
    assert pane.typed() == b""


REFUSED_ANSWERS = [
    ("claude", [claude_at(1569).decode()], "allow_once"),  # trusting the folder
    ("claude", [CLAUDE_OFFER + BLOCKED], "allow_once"),  # the fullscreen renderer
    ("claude", [CLAUDE_AUTO_OFFER + BLOCKED], "allow_once"),  # auto mode as the default
]


@pytest.mark.parametrize(
    ("agent", "frames", "answer"),
    REFUSED_ANSWERS,
    ids=[f"{a}-{ans}-{i}" for i, (a, _, ans) in enumerate(REFUSED_ANSWERS)],
)
def test_an_answer_that_changes_configuration_for_good_is_refused(
    scripted: Callable[..., ScriptedPane],
    agent: str,
    frames: list[str],
    answer: str,
) -> None:
    pane = blocked_on(scripted(agent, frames), "")
    assert code_of(pane.answer(answer)) == "dialog_refused"
    assert pane.typed() == b""


def test_no_dialog_and_wrong_turn_type_nothing(
    scripted: Callable[..., ScriptedPane],
) -> None:
    pane = scripted("kiro", [kiro_dialog(0)])  # drawn, but the pane is not blocked
    pane.pump_until(lambda: pane.shows("requires approval"))
    assert code_of(pane.answer("allow_once")) == "no_dialog"
    pane.screen.feed(BLOCKED.encode())
    assert code_of(pane.answer("allow_once", expect_turn=5)) == "cursor_mismatch"
    assert pane.typed() == b""


def test_output_already_on_the_pty_is_read_before_the_check(
    scripted: Callable[..., ScriptedPane],
) -> None:
    """The program moved the highlight just before the request: the move is seen, not missed."""
    moved = OC_REFUSED["highlight-on-always"]
    pane = blocked_on(scripted("opencode", [opencode_dialog() + BLOCKED, moved]), "Allow once")
    assert pane.program is not None
    pane.program.queue_input(b"?")  # makes the agent draw frame 1; we do not read it here
    pane.program.flush()
    ready, _, _ = select.select([pane.program.fd], [], [], 5)
    assert ready
    assert code_of(pane.answer("allow_once")) == "dialog_unrecognized"
    assert pane.typed() == b"?"


def test_a_dialog_replaced_between_keys_is_refused_as_changed(
    scripted: Callable[..., ScriptedPane],
) -> None:
    """After the first Down the agent draws another command's dialog: Enter is never sent."""
    frames = [kiro_dialog(0) + BLOCKED, kiro_dialog(1, command="rm -rf /")]
    pane = blocked_on(scripted("kiro", frames), "Shell pwd")
    reply = pane.answer("deny_once")
    assert code_of(reply) == "dialog_changed", reply
    assert pane.typed() == DOWN


def test_a_focus_that_jumps_the_wrong_way_is_refused_as_changed(
    scripted: Callable[..., ScriptedPane],
) -> None:
    frames = [devin_dialog(0) + BLOCKED, devin_dialog(3)]  # Down moved the focus by three
    pane = blocked_on(scripted("devin", frames), "Approve once")
    assert code_of(pane.answer("deny_once")) == "dialog_changed"
    assert pane.typed() == DOWN


def test_leaving_the_dialog_between_keys_is_refused_as_changed(
    scripted: Callable[..., ScriptedPane],
) -> None:
    frames = [kiro_dialog(0) + BLOCKED, "\x1b]7501;state=working\x1b\\" + kiro_dialog(1)]
    pane = blocked_on(scripted("kiro", frames), "Shell pwd")
    assert code_of(pane.answer("deny_once")) == "dialog_changed"
    assert pane.typed() == DOWN


def test_a_dialog_that_never_redraws_is_refused_after_the_bound(
    scripted: Callable[..., ScriptedPane],
) -> None:
    pane = blocked_on(scripted("kiro", [kiro_dialog(0) + BLOCKED]), "Shell pwd")
    rid = 99
    pane.requests.handle(AnswerDialog(rid=rid, answer="deny_once"))
    pane.pump_until(lambda: pane.unseen() == DOWN)
    pane.clock.frozen = True
    pane.clock.now = time.monotonic() + DIALOG_REDRAW_TIMEOUT_S + 1
    pane.pump_until(lambda: pane.reply(rid) is not None)
    reply = pane.reply(rid)
    assert reply is not None and code_of(reply) == "dialog_changed"
    assert "did not react" in reply.message  # type: ignore[union-attr]
    pane.clock.frozen = False
    assert pane.typed() == DOWN


def test_the_dialog_changed_between_plan_and_press_in_the_pane_screen(
    scripted: Callable[..., ScriptedPane],
) -> None:
    """Bytes fed to the worker's screen after the first key: the next key is refused."""
    pane = blocked_on(scripted("devin", [devin_dialog(0) + BLOCKED]), "Approve once")
    rid = 7
    pane.requests.handle(AnswerDialog(rid=rid, answer="deny_once"))
    pane.pump_until(lambda: pane.unseen() == DOWN)
    pane.screen.feed(devin_dialog(1, command="$ rm -rf ~").encode())
    pane.pump_until(lambda: pane.reply(rid) is not None)
    assert code_of(pane.reply(rid)) == "dialog_changed"  # type: ignore[arg-type]
    assert pane.typed() == DOWN


def test_while_keys_are_pressed_other_input_and_answers_are_refused(
    scripted: Callable[..., ScriptedPane],
) -> None:
    frames = [kiro_dialog(0) + BLOCKED, kiro_dialog(1), kiro_dialog(2)]
    pane = blocked_on(scripted("kiro", frames), "Shell pwd")
    pane.requests.handle(AnswerDialog(rid=1, answer="deny_once"))
    pane.requests.handle(AnswerDialog(rid=2, answer="allow_once"))
    pane.requests.handle(WriteInput(rid=3, text="sneaky"))
    pane.pump_until(lambda: pane.reply(1) is not None)
    assert [code_of(pane.reply(r)) for r in (1, 2, 3)] == [  # type: ignore[arg-type]
        "ok",
        "dialog_changed",
        "pane_blocked",
    ]
    assert pane.typed() == DOWN + DOWN + ENTER


def test_a_screen_decided_block_is_answered_too(
    scripted: Callable[..., ScriptedPane],
) -> None:
    """Kiro sends no OSC 7501: the pane is blocked by its screen rules, then answered."""
    pane = scripted("kiro", [kiro_dialog(0)])
    pane.pump_until(lambda: pane.screen.status.state == "blocked")
    assert pane.screen.status.source == "screen"
    assert isinstance(pane.answer("allow_once"), Ok)
    assert pane.typed() == ENTER


def test_the_first_key_waits_for_the_pane_to_be_quiet(
    scripted: Callable[..., ScriptedPane],
) -> None:
    """Measured on Claude Code 2.1.332: an Esc sent as its trust prompt's start-up queries
    were being answered was dropped; 0.25 s later it worked. Keys wait for quiet."""
    pane = blocked_on(scripted("opencode", [opencode_dialog() + BLOCKED], settle_s=0.2), "")
    pane.clock.freeze()
    pane.screen.feed(b"\x1b[c")  # a query answered just now: the pane is busy
    pane.requests.handle(AnswerDialog(rid=5, answer="deny_once"))
    pane.clock.now += 0.1
    pane.requests.run_due(pane.clock())
    assert pane.reply(5) is None
    assert pane.typed() == b"\x1b[?62;22c"  # the answer to the query, and no key yet
    pane.clock.now += 0.15
    assert isinstance(pane.wait_reply(5), Ok)
    assert pane.typed() == ESC


def test_a_dialog_replaced_while_settling_types_nothing(
    scripted: Callable[..., ScriptedPane],
) -> None:
    pane = blocked_on(scripted("kiro", [kiro_dialog(0) + BLOCKED], settle_s=0.2), "Shell pwd")
    pane.clock.freeze()
    pane.screen.feed(b"x")
    pane.requests.handle(AnswerDialog(rid=6, answer="allow_once"))
    pane.screen.feed(kiro_dialog(0, command="rm -rf /").encode())
    pane.clock.now += 0.5
    reply = pane.wait_reply(6)
    assert isinstance(reply, Failed) and reply.code == "dialog_changed", reply
    assert pane.typed() == b""


def test_a_pane_that_never_goes_quiet_is_answered_after_the_bound(
    scripted: Callable[..., ScriptedPane],
) -> None:
    pane = blocked_on(scripted("opencode", [opencode_dialog() + BLOCKED], settle_s=0.2), "")
    pane.clock.freeze()
    pane.requests.handle(AnswerDialog(rid=8, answer="allow_once"))
    for _ in range(int(DIALOG_SETTLE_MAX_S / 0.1)):
        pane.screen.feed(b"\x1b[1;1H")  # output every 0.1 s, as a spinner would
        pane.clock.now += 0.1
        pane.requests.run_due(pane.clock())
    pane.screen.feed(b"\x1b[1;1H")
    pane.clock.now += 0.15  # past the bound, still busy: pressed anyway
    assert isinstance(pane.wait_reply(8), Ok)
    assert pane.typed() == ENTER


def test_a_dialog_drawn_after_the_blocked_report_is_waited_for(
    scripted: Callable[..., ScriptedPane],
) -> None:
    """Claude and Codex report blocked 0.3-0.9 s before they draw the dialog: the answer
    waits for it (bounded) instead of refusing, and presses only the recognised keys."""
    pane = scripted("demo", [BLOCKED], appear_s=2.0)
    pane.pump_until(lambda: pane.screen.status.state == "blocked")
    pane.typed()
    pane.requests.handle(AnswerDialog(rid=11, answer="allow_once"))
    pane.pump_for(0.3)
    assert pane.reply(11) is None and pane.unseen() == b""  # nothing typed, still waiting
    pane.screen.feed(DEMO_DIALOG.encode())  # the dialog appears
    reply = pane.wait_reply(11)
    assert isinstance(reply, Ok), reply
    assert pane.typed() == ENTER


def test_a_dialog_that_never_appears_is_refused_after_the_bound_with_nothing_typed(
    scripted: Callable[..., ScriptedPane],
) -> None:
    pane = scripted("demo", [BLOCKED + DEMO_DIALOG.replace("Deny", "Maybe")], appear_s=2.0)
    pane.pump_until(lambda: pane.screen.status.state == "blocked" and pane.shows("Maybe"))
    pane.typed()
    pane.clock.freeze()
    pane.requests.handle(AnswerDialog(rid=12, answer="allow_once"))
    pane.clock.now += 1.0
    pane.requests.run_due(pane.clock())
    assert pane.reply(12) is None
    pane.clock.now += 1.1
    reply = pane.wait_reply(12)
    assert isinstance(reply, Failed) and reply.code == "dialog_unrecognized", reply
    pane.clock.frozen = False
    assert pane.typed() == b""


def test_an_agent_without_a_recogniser_is_refused_at_once(
    scripted: Callable[..., ScriptedPane],
) -> None:
    pane = blocked_on(scripted("generic", [DEMO_DIALOG + BLOCKED], appear_s=60.0), "")
    pane.clock.freeze()
    reply = pane.answer("allow_once")
    assert isinstance(reply, Failed) and reply.code == "dialog_unrecognized", reply
    pane.clock.frozen = False
    assert pane.typed() == b""


def test_the_answer_cursor_is_taken_before_the_key(
    scripted: Callable[..., ScriptedPane],
) -> None:
    """The demo agent settles at once after Enter; the reply's seq is still before it."""
    pane = blocked_on(scripted("demo", [DEMO_DIALOG + BLOCKED, "\x1b]7501;state=done\x1b\\"]), "")
    before = pane.screen.status.seq
    reply = pane.answer("allow_once")
    assert isinstance(reply, Ok), reply
    pane.pump_until(lambda: pane.screen.status.state == "done")
    assert reply.seq == before < pane.screen.status.seq


# -- 4b. answer_dialog on the recorded Gemini CLI and Qwen Code dialogs ------------------

# The recorded bytes up to the "dialog" mark (a golden point: a clean cut), 120x40.
RECORDED_DIALOG = {"gemini": ("permission_deny", 33608), "qwen": ("permission_deny", 172263)}
COMMAND_ROW = {"gemini": "│ │ touch deny.marker", "qwen": "     touch deny.marker"}
LAST_OPTION = {
    "gemini": "│   3. No, suggest changes (esc)",
    "qwen": "     4. No, suggest changes (esc)",
}


def recorded_frame(cli: str) -> bytes:
    scenario, offset = RECORDED_DIALOG[cli]
    return recorded_at(cli, scenario, offset)


def recorded_pane(
    scripted: Callable[..., ScriptedPane], cli: str, frames: list[bytes], **options: object
) -> ScriptedPane:
    """A pane that shows the recorded frames, blocked by its own rules (no OSC 7501)."""
    pane = scripted(cli, [frame.decode() for frame in frames], size=(120, 40), **options)
    pane.pump_until(lambda: pane.screen.status.state == "blocked")
    pane.typed()  # the terminal's answers to the CLI's start-up queries
    return pane


@pytest.mark.parametrize("cli", ["gemini", "qwen"])
@pytest.mark.parametrize(("answer", "key"), [("allow_once", ENTER), ("deny_once", ESC)])
def test_recorded_dialogs_are_answered_with_one_key(
    scripted: Callable[..., ScriptedPane], cli: str, answer: str, key: bytes
) -> None:
    pane = recorded_pane(scripted, cli, [recorded_frame(cli)])
    assert (pane.screen.status.kind, pane.screen.status.source) == ("permission", "screen")
    reply = pane.answer(answer)
    assert isinstance(reply, Ok), reply
    assert pane.typed() == key


@pytest.mark.parametrize("cli", ["gemini", "qwen"])
def test_a_recorded_dialog_not_drawn_whole_types_nothing(
    scripted: Callable[..., ScriptedPane], cli: str
) -> None:
    """The title already says a confirmation waits, the last option is not drawn (yet):
    nothing is pressed, however long the answer waits for the dialog to complete."""
    cut = refocus(recorded_frame(cli), LAST_OPTION[cli], "")
    pane = recorded_pane(scripted, cli, [cut], appear_s=2.0)
    assert pane.screen.status.kind == "permission"
    pane.clock.freeze()
    for answer, rid in (("allow_once", 21), ("deny_once", 22)):
        pane.requests.handle(AnswerDialog(rid=rid, answer=answer))  # type: ignore[arg-type]
        pane.clock.now += 2.1
        reply = pane.wait_reply(rid)
        assert isinstance(reply, Failed) and reply.code == "dialog_unrecognized", reply
    pane.clock.frozen = False
    assert pane.typed() == b""


@pytest.mark.parametrize("cli", ["gemini", "qwen"])
@pytest.mark.parametrize("answer", ["allow_once", "deny_once"])
def test_a_recorded_dialog_changed_before_the_key_types_nothing(
    scripted: Callable[..., ScriptedPane], cli: str, answer: str
) -> None:
    """Recognised, then another command's dialog is drawn while the pane settles."""
    pane = recorded_pane(scripted, cli, [recorded_frame(cli)], settle_s=0.2)
    pane.clock.freeze()
    pane.screen.feed(b"\x1b[s\x1b[u")  # output just now: the first key waits
    pane.requests.handle(AnswerDialog(rid=23, answer=answer))  # type: ignore[arg-type]
    other = COMMAND_ROW[cli].replace("touch deny.marker", "rm -rf ~")
    pane.screen.feed(refocus(b"", COMMAND_ROW[cli], other, shown=recorded_frame(cli)))
    pane.clock.now += 0.5
    reply = pane.wait_reply(23)
    assert isinstance(reply, Failed) and reply.code == "dialog_changed", reply
    pane.clock.frozen = False
    assert pane.typed() == b""
