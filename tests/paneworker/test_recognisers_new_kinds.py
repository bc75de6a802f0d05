"""Kilo Code's and Aider's recognisers on their recorded dialogs (``tests/captured``).

The recordings (7.7.7 and 0.86.2 against the fake model) are cut at their marks: the whole
dialog, Kilo's reject panel after Esc, and every earlier read. What is checked: the exact
keys of each answer; zero bytes (a refusal) on every read before the dialog is whole, and
on a dialog changed in any part the plan rests on; Kilo's second step is planned only on the
reject panel of the same command; Aider's "Don't ask again" and bare Enter are never planned.
"""

from __future__ import annotations

import json

import pytest

from paneworker.requests.dialog_answering import dialog_screen
from protocol.agents.dialog_kit import DialogPlan
from protocol.errors import PanewardenError
from tests.paneworker.dialog_screens import CAPTURED, ENTER, ESC, recogniser_for, terminal_with


def mark(cli: str, scenario: str, name: str) -> bytes:
    meta = json.loads((CAPTURED / cli / f"{scenario}.json").read_text())
    (offset,) = [m["offset"] for m in meta["marks"] if m["name"] == name]
    return (CAPTURED / cli / f"{scenario}.bin").read_bytes()[:offset]


def chunk_ends(cli: str, scenario: str, upto: int) -> list[int]:
    meta = json.loads((CAPTURED / cli / f"{scenario}.json").read_text())
    return [end for _t, end in meta["chunks"] if end < upto]


def plan(cli: str, data: bytes, answer: str) -> DialogPlan:
    return recogniser_for(cli)(dialog_screen(terminal_with(data, 120, 40)), answer)


def refused(cli: str, data: bytes, answer: str) -> str:
    with pytest.raises(PanewardenError) as caught:
        plan(cli, data, answer)
    assert caught.value.code.value == "dialog_unrecognized"
    return caught.value.message


def rewrite(data: bytes, old: str, new: str) -> bytes:
    """``data`` plus bytes that redraw the one row containing ``old`` with ``new``."""
    lines = terminal_with(data, 120, 40).display_lines()
    (row,) = [r for r, line in enumerate(lines) if old in line]
    text = lines[row].replace(old, new)
    return data + f"\x1b[{row + 1};1H\x1b[2K{text}".encode()


KILO = ("kilo", "permission_deny")
AIDER = ("aider", "permission_allow")


def test_kilo_dialog_allow_is_enter_and_deny_is_esc_then_enter() -> None:
    dialog = mark(*KILO, "dialog")
    allow = plan("kilo", dialog, "allow_once")
    deny = plan("kilo", dialog, "deny_once")
    assert allow.steps == (ENTER,)
    assert deny.steps == (ESC, ENTER)
    assert deny.fingerprint == allow.fingerprint
    assert "touch deny.marker" in allow.fingerprint[1]


def test_kilo_reject_panel_continues_only_the_same_denial() -> None:
    panel = mark(*KILO, "reject_panel")
    second = plan("kilo", panel, "deny_once")
    assert second.steps == (ENTER,)
    assert second.fingerprint == plan("kilo", mark(*KILO, "dialog"), "deny_once").fingerprint
    refused("kilo", panel, "allow_once")
    # Another command pending above the panel: another dialog, so the worker refuses it
    # with dialog_changed (its fingerprint differs).
    other = rewrite(panel, "$ touch deny.marker", "$ touch other.marker")
    assert plan("kilo", other, "deny_once").fingerprint != second.fingerprint
    # Text typed into the panel's input: not the measured empty panel.
    typed = rewrite(panel, "Tell Kilo what to do differently", "Tell Kilo what to do differently")
    lines = terminal_with(typed, 120, 40).display_lines()
    (ask,) = [r for r, line in enumerate(lines) if "Tell Kilo what to do differently" in line]
    typed += f"\x1b[{ask + 3};1H\x1b[2K  ┃  rm -rf /".encode()
    refused("kilo", typed, "deny_once")


def test_kilo_reads_before_the_dialog_is_whole_send_nothing() -> None:
    dialog = mark(*KILO, "dialog")
    data = (CAPTURED / "kilo" / "permission_deny.bin").read_bytes()
    typed = len(mark(*KILO, "typed"))
    cut = [end for end in chunk_ends(*KILO, len(dialog)) if end > typed]
    assert cut, "the recording has reads between the prompt and the dialog"
    for end in cut:
        screen = terminal_with(data[:end], 120, 40).display_lines()
        if any("ctrl+f" in line for line in screen) and any("Reject" in line for line in screen):
            continue  # the whole dialog already
        refused("kilo", data[:end], "allow_once")
        refused("kilo", data[:end], "deny_once")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("Allow always", "Allow  ever "),
        ("Allow once", "Allow twice"),
        ("△ Permission required", "△ Permission granted"),
        ("$ touch deny.marker", "$ rm -rf deny.marker"),
        ("ctrl+f fullscreen", "                 "),
    ],
)
def test_a_changed_kilo_dialog_is_refused(old: str, new: str) -> None:
    dialog = mark(*KILO, "dialog")
    changed = rewrite(dialog, old, new) if old != "$ touch deny.marker" else dialog
    if old == "$ touch deny.marker":
        # The dialog's own command row (the second occurrence is the pending call above).
        lines = terminal_with(dialog, 120, 40).display_lines()
        rows = [r for r, line in enumerate(lines) if old in line]
        changed = dialog + f"\x1b[{rows[-1] + 1};1H\x1b[2K  ┃  {new}".encode()
    refused("kilo", changed, "allow_once")
    refused("kilo", changed, "deny_once")


def test_aider_question_is_y_or_n_then_enter() -> None:
    dialog = mark(*AIDER, "dialog")
    allow = plan("aider", dialog, "allow_once")
    deny = plan("aider", dialog, "deny_once")
    assert allow.steps == (b"y\r",)
    assert deny.steps == (b"n\r",)
    assert allow.fingerprint == deny.fingerprint
    assert "touch allow.marker" in allow.fingerprint[0]


def test_aider_reads_before_the_question_is_whole_send_nothing() -> None:
    dialog = mark(*AIDER, "dialog")
    data = (CAPTURED / "aider" / "permission_allow.bin").read_bytes()
    for end in chunk_ends(*AIDER, len(dialog)):
        lines = [line for line in terminal_with(data[:end], 120, 40).display_lines() if line]
        if lines and lines[-1].rstrip().endswith("[Yes]:"):
            continue
        refused("aider", data[:end], "allow_once")
        refused("aider", data[:end], "deny_once")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("[Yes]:", "[Yes]: y"),  # something typed after the question
        ("Run shell command?", "Run shell commands?"),  # several commands, not measured
        ("(D)on't ask again [Yes]:", "(A)ll [Yes]:"),
        ("Run shell command?", "Add command output to the chat?"),
    ],
)
def test_a_changed_aider_question_is_refused(old: str, new: str) -> None:
    refused("aider", rewrite(mark(*AIDER, "dialog"), old, new), "allow_once")
    refused("aider", rewrite(mark(*AIDER, "dialog"), old, new), "deny_once")


def test_the_aider_screen_after_the_answer_is_refused() -> None:
    refused("aider", mark(*AIDER, "allowed"), "allow_once")


def test_aider_allow_once_carries_the_output_question_and_deny_once_nothing() -> None:
    """Measured on 0.86.2: a command that printed is followed by "Add command output to
    the chat?"; allow_once answers it y Enter, never "Don't ask again" or a bare Enter."""
    dialog = mark(*AIDER, "dialog")
    allow = plan("aider", dialog, "allow_once")
    assert plan("aider", dialog, "deny_once").follow_up is None
    assert allow.follow_up is not None
    asked = rewrite(dialog, "Run shell command?", "Add command output to the chat?")
    screen = dialog_screen(terminal_with(asked, 120, 40))
    assert allow.follow_up(screen, "allow_once").steps == (b"y\r",)
    # The command question itself, something typed after it, another question: not it.
    for other in (
        dialog,
        rewrite(asked, "[Yes]:", "[Yes]: y"),
        rewrite(asked, "(D)on't ask again [Yes]:", "[Yes]:"),
    ):
        with pytest.raises(PanewardenError):
            allow.follow_up(dialog_screen(terminal_with(other, 120, 40)), "allow_once")
