"""Dialog recognisers and answer_dialog: the exact keys, or nothing at all.

Two levels. The recognisers are fed screens built from real bytes through the pane
terminal (OpenCode's highlight from SGR streams, palette ``48;5;N`` and truecolor
``48;2;r;g;b``). ``answer_dialog`` itself runs in a ``RequestHandler`` against a real
program on a real PTY: a scripted agent that draws its frames, logs every byte it
reads and draws the next frame after each read. Refusals are checked on that log:
after the reply, a marker is typed and the log must hold the marker and nothing else.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import select
import signal
import struct
import sys
import termios
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from paneworker.procs.program import Program
from paneworker.requests.dialog_answering import DIALOG_REDRAW_TIMEOUT_S, DIALOG_SETTLE_MAX_S
from paneworker.requests.dialogs import DialogPlan, DialogScreen, recogniser_for
from paneworker.requests.handler import RequestHandler
from paneworker.requests.pane_io import PaneIO
from paneworker.requests.prompt_delivery import SUBMIT_ACK_TIMEOUT_S
from paneworker.screen.state import ScreenState
from paneworker.screen.terminal import Terminal
from protocol import PROTOCOL_VERSION
from protocol.boot import BootRecord
from protocol.errors import PanewardenError
from protocol.messages import AnswerDialog, Failed, Ok, ToSupervisor, WriteInput
from tests.paneworker.emulators import EMULATOR

CAPTURED = Path(__file__).resolve().parent.parent / "captured"
SCREENS = Path(__file__).resolve().parent / "screens"

ENTER, ESC, UP, DOWN = b"\r", b"\x1b", b"\x1b[A", b"\x1b[B"
BLOCKED = "\x1b]7501;state=blocked:kind=permission\x1b\\"
HOME = "\x1b[H\x1b[2J"


def terminal_with(data: str | bytes, cols: int = 100, rows: int = 30) -> Terminal:
    term = Terminal(cols, rows, reply=lambda _d: None, on_report=lambda _r: None, emulator=EMULATOR)
    term.feed(data.encode() if isinstance(data, str) else data)
    return term


def plan(agent: str, data: str | bytes, answer: str) -> DialogPlan:
    return recogniser_for(agent)(DialogScreen.from_terminal(terminal_with(data)), answer)


def refusal(agent: str, data: str | bytes, answer: str) -> str:
    with pytest.raises(PanewardenError) as caught:
        plan(agent, data, answer)
    assert caught.value.code.value == "dialog_unrecognized"
    return caught.value.message


def crlf(text: str) -> str:
    return text.replace("\n", "\r\n")


# -- screens --------------------------------------------------------------------------


def palette(index: int) -> str:
    return f"\x1b[48;5;{index}m"


def truecolor(r: int, g: int, b: int) -> str:
    return f"\x1b[48;2;{r};{g};{b}m"


def button(label: str, style: str) -> str:
    return f"{style} {label} \x1b[0m"


def opencode_dialog(
    allow: str = palette(33),
    always: str = palette(236),
    reject: str = palette(236),
    *,
    command: str = "$ rm -rf build",
    hint: str = "ctrl+f fullscreen  ⇆ select  enter confirm",
    labels: tuple[str, str, str] = ("Allow once", "Always allow", "Reject"),
) -> str:
    """An OpenCode-style permission dialog; each label's background is its style."""
    first, second, third = labels
    buttons = f"{button(first, allow)}  {button(second, always)}  {button(third, reject)}"
    return crlf(
        f"{HOME}  ┃  hello, please clean the build dir\n"
        "     ▣  Build · Big Pickle\n\n"
        "  ┃  △ Permission required\n"
        f"  ┃  {command}\n"
        "  ┃\n"
        f"  ┃  {buttons}          {hint}\n"
    )


def kiro_dialog(focus: int = 0, command: str = "pwd", options: int = 3) -> str:
    labels = ["Yes, single permission", "Trust, always allow in this session", "No (Tab to edit)"]
    if options == 2:
        labels = [labels[0], labels[2]]
    rows = [(" ❯ " if i == focus else "   ") + label for i, label in enumerate(labels)]
    return crlf(
        f"{HOME}> show me where I am\n\n↓ Shell {command}\n\n shell requires approval\n"
        + "\n".join(rows)
        + "\n"
        + "─" * 60
        + "\nESC to close · ↑↓ to navigate · ↵ to select · Tab to edit\n"
    )


DEVIN_OPTIONS = (
    "Yes  (Approve once)",
    "Yes, allow `sleep` commands",
    "Yes, always allow `sleep` commands",
    "No",
)


def devin_dialog(
    focus: int = 0, command: str = "$ sleep 30", options: tuple[str, ...] = DEVIN_OPTIONS
) -> str:
    rows = [f"{'❭' if i == focus else '·'} {i + 1} {label}" for i, label in enumerate(options)]
    return crlf(
        f"{HOME}❭ wait half a minute\n\n⏺ Running command\n  └ {command}\n\n"
        + "\n".join(rows)
        + "\n↑↓ select · ↵ confirm · esc cancel\n"
    )


def claude_at(offset: int, scenario: str = "trusted") -> bytes:
    return (CAPTURED / "claude" / f"{scenario}.bin").read_bytes()[:offset]


DEMO_DIALOG = crlf((SCREENS / "demo" / "dialog.txt").read_text())


# -- 1. recognisers: OpenCode's highlight from styled cells ---------------------------


@pytest.mark.parametrize(
    ("allow", "others"),
    [
        (palette(33), palette(236)),
        (truecolor(250, 178, 131), truecolor(40, 40, 40)),
        (palette(1), "\x1b[0m"),  # the other two on the default background
        (truecolor(0, 0, 238), palette(236)),
    ],
    ids=["palette", "truecolor", "others-default", "mixed-notations"],
)
def test_opencode_allow_once_is_enter_only_with_allow_once_highlighted(
    allow: str, others: str
) -> None:
    result = plan("opencode", opencode_dialog(allow, others, others), "allow_once")
    assert result.steps == (ENTER,)
    assert result.fingerprint[0].endswith("△ Permission required")


def test_opencode_deny_once_is_esc_whatever_the_highlight() -> None:
    assert plan("opencode", opencode_dialog(), "deny_once").steps == (ESC,)
    same = palette(236)
    assert plan("opencode", opencode_dialog(same, same, same), "deny_once").steps == (ESC,)


def test_opencode_edit_dialogs_are_recognised_too() -> None:
    screen = opencode_dialog(command="→ Edit src/app.py")
    assert plan("opencode", screen, "allow_once").steps == (ENTER,)


REV = "\x1b[7m"
OC_REFUSED = {
    "all-equal": opencode_dialog(palette(236), palette(236), palette(236)),
    "highlight-on-always": opencode_dialog(palette(236), palette(33), palette(236)),
    "highlight-on-reject": opencode_dialog(palette(236), palette(236), palette(33)),
    "others-differ": opencode_dialog(palette(33), palette(236), palette(237)),
    "default-on-allow": opencode_dialog("\x1b[0m", palette(236), palette(236)),
    "reverse-on-allow": opencode_dialog(REV + palette(33), palette(236), palette(236)),
    "reverse-on-reject": opencode_dialog(palette(33), palette(236), REV + palette(236)),
    "reverse-only": opencode_dialog(REV, "\x1b[0m", "\x1b[0m"),
    "mixed-within-allow": opencode_dialog(palette(33), palette(236), palette(236)).replace(
        "Allow once", f"Allow{palette(34)} once"
    ),
    "same-value-truecolor-and-palette": opencode_dialog(
        truecolor(0x26, 0x26, 0x26), palette(235), palette(235)
    ),
}


@pytest.mark.parametrize("case", list(OC_REFUSED))
def test_opencode_allow_once_refuses_any_other_highlight(case: str) -> None:
    refusal("opencode", OC_REFUSED[case], "allow_once")


@pytest.mark.parametrize(
    "screen",
    [
        opencode_dialog(hint="⇆ select  enter confirm"),
        opencode_dialog(command="rm -rf build"),
        opencode_dialog(labels=("Always allow", "Allow once", "Reject")),
        opencode_dialog(labels=("Allow once", "Always allow", "Deny")),
        opencode_dialog(command="$ echo Reject"),
        opencode_dialog() + opencode_dialog().replace(HOME, ""),
        crlf(f"{HOME}  Permission required\n  $ ls\n  Allow once  Always allow  Reject  ctrl+f\n"),
        "",
    ],
    ids=[
        "no-ctrl+f-hint",
        "no-command-line",
        "wrong-order",
        "unknown-option",
        "label-in-command",
        "two-dialogs",
        "no-title-glyph",
        "blank",
    ],
)
def test_opencode_refuses_both_answers_unless_the_whole_dialog_is_shown(screen: str) -> None:
    refusal("opencode", screen, "allow_once")
    refusal("opencode", screen, "deny_once")


def test_opencode_compares_colours_as_values_not_notations() -> None:
    # 48;5;235 and 48;2;38;38;38 are the same colour value: the two others match.
    screen = opencode_dialog(palette(33), palette(235), truecolor(0x26, 0x26, 0x26))
    assert plan("opencode", screen, "allow_once").steps == (ENTER,)


# -- 2. recognisers: Kiro and Devin (focus marker, arrows, Enter) ---------------------


def test_kiro_plans_from_the_focus_to_its_target_and_never_enter_elsewhere() -> None:
    assert plan("kiro", kiro_dialog(0), "allow_once").steps == (ENTER,)
    assert plan("kiro", kiro_dialog(0), "deny_once").steps == (DOWN, DOWN, ENTER)
    assert plan("kiro", kiro_dialog(1), "allow_once").steps == (UP, ENTER)
    assert plan("kiro", kiro_dialog(2), "deny_once").steps == (ENTER,)
    assert plan("kiro", kiro_dialog(0, options=2), "deny_once").steps == (DOWN, ENTER)
    # The focus moves with the plan; the fingerprint does not.
    prints = {plan("kiro", kiro_dialog(f), "deny_once").fingerprint for f in range(3)}
    assert len(prints) == 1


def test_kiro_arrows_follow_the_programs_cursor_key_mode() -> None:
    screen = "\x1b[?1h" + kiro_dialog(0)
    assert plan("kiro", screen, "deny_once").steps == (b"\x1bOB", b"\x1bOB", ENTER)


def test_kiro_fixture_dialog_is_recognised() -> None:
    screen = crlf((SCREENS / "kiro" / "tool_approval.txt").read_text())
    assert plan("kiro", screen, "allow_once").steps == (ENTER,)


@pytest.mark.parametrize(
    "screen",
    [
        crlf((SCREENS / "kiro" / "subagent_approval.txt").read_text()),
        kiro_dialog(0).replace(" shell requires approval", " web_search requires approval"),
        kiro_dialog(0).replace("ESC to close", "ESC to quit"),
        kiro_dialog(0).replace("   No (Tab to edit)", "   Maybe later"),
        kiro_dialog(0).replace(" ❯ Yes", "   Yes"),
        kiro_dialog(0).replace("   No (Tab", " ❯ No (Tab"),
        kiro_dialog(0) + kiro_dialog(0).replace(HOME, ""),
        crlf((SCREENS / "kiro" / "prose_permission.txt").read_text()),
    ],
    ids=[
        "subagents",
        "web-search",
        "no-hint",
        "unknown-option",
        "no-focus",
        "two-focus",
        "two-dialogs",
        "prose",
    ],
)
def test_kiro_refuses_what_it_does_not_know(screen: str) -> None:
    refusal("kiro", screen, "allow_once")
    refusal("kiro", screen, "deny_once")


def test_devin_plans_approve_once_or_no_and_never_stops_on_another_option() -> None:
    assert plan("devin", devin_dialog(0), "allow_once").steps == (ENTER,)
    assert plan("devin", devin_dialog(0), "deny_once").steps == (DOWN, DOWN, DOWN, ENTER)
    assert plan("devin", devin_dialog(2), "allow_once").steps == (UP, UP, ENTER)
    bypass = (*DEVIN_OPTIONS[:3], "Yes, and bypass permissions", "No")
    assert plan("devin", devin_dialog(3, options=bypass), "allow_once").steps == (
        UP,
        UP,
        UP,
        ENTER,
    )
    assert plan("devin", devin_dialog(3, options=bypass), "deny_once").steps == (DOWN, ENTER)


@pytest.mark.parametrize(
    "screen",
    [
        devin_dialog(command="Edit src/app.py"),
        devin_dialog(options=("Yes", *DEVIN_OPTIONS[1:])),
        devin_dialog(options=DEVIN_OPTIONS[:3]),
        devin_dialog().replace("· 3", "· 4"),
        devin_dialog().replace("❭ 1", "· 1"),
        devin_dialog().replace("esc cancel", "esc back"),
        crlf((SCREENS / "devin" / "trust.txt").read_text()),
        crlf((SCREENS / "devin" / "prose_permission.txt").read_text()),
    ],
    ids=[
        "not-a-shell-command",
        "no-approve-once",
        "no-no",
        "bad-numbering",
        "no-focus",
        "no-hint",
        "trust-prompt",
        "prose",
    ],
)
def test_devin_refuses_what_it_does_not_know(screen: str) -> None:
    refusal("devin", screen, "allow_once")
    refusal("devin", screen, "deny_once")


# -- 3. recognisers: Claude's trust prompt, other kinds' dialogs, generic, demo -----------


def test_claude_trust_prompt_is_only_ever_declined_with_esc() -> None:
    for offset in (1452, 1569):  # focus on "No, exit", then on "Yes, I trust"
        assert plan("claude", claude_at(offset), "deny_once").steps == (ESC,)
        assert "rule-creating" in refusal("claude", claude_at(offset), "allow_once")


def test_claude_refuses_its_other_screens() -> None:
    for offset in (4095, 4181):  # the main prompt
        refusal("claude", claude_at(offset), "deny_once")
    refusal("claude", crlf((SCREENS / "claude" / "tool_permission.txt").read_text()), "deny_once")
    refusal("claude", claude_at(1880, "startup"), "deny_once")  # the trust prompt, then exit


# -- 3b. recognisers on the real dialogs (tests/tools/fake_model.py, 120x40) ---------------


@functools.cache
def captured_dialog(cli: str, scenario: str) -> bytes:
    """The recorded bytes up to the first read that shows the whole permission dialog."""
    data = (CAPTURED / cli / f"{scenario}.bin").read_bytes()
    chunks = json.loads((CAPTURED / cli / f"{scenario}.json").read_text())["chunks"]
    ends = {
        "opencode": "ctrl+f",
        "claude": "esc to cancel",
        "codex": "press enter to confirm",
        "gemini": "no, suggest changes (esc)",
        "qwen": "waiting for user confirmation",
    }
    term = terminal_with(b"", 120, 40)
    start = 0
    for _t, end in chunks:
        term.feed(data[start:end])
        start = end
        text = "\n".join(term.display_lines()).lower()
        if ends[cli] in text and ("allow once" in text or "1. yes" in text):
            return data[:end]
    raise AssertionError(f"no dialog in {cli}/{scenario}")


def real_plan(cli: str, data: bytes, answer: str) -> DialogPlan:
    return recogniser_for(cli)(DialogScreen.from_terminal(terminal_with(data, 120, 40)), answer)


def real_refusal(cli: str, data: bytes, answer: str) -> str:
    with pytest.raises(PanewardenError) as caught:
        real_plan(cli, data, answer)
    assert caught.value.code.value == "dialog_unrecognized"
    return caught.value.message


def refocus(data: bytes, old: str, new: str, shown: bytes | None = None) -> bytes:
    """``data`` plus bytes that rewrite the one row starting with ``old`` as ``new``
    (the row looked for on the screen ``shown`` draws, ``data``'s by default)."""
    lines = terminal_with(data if shown is None else shown, 120, 40).display_lines()
    (row,) = [r for r, line in enumerate(lines) if line.startswith(old)]
    return data + f"\x1b[{row + 1};1H\x1b[2K{new}".encode()


@pytest.mark.parametrize("cli", ["opencode", "claude", "codex", "gemini", "qwen"])
@pytest.mark.parametrize("scenario", ["permission_allow", "permission_deny"])
def test_real_dialogs_are_answered_with_enter_or_esc(cli: str, scenario: str) -> None:
    data = captured_dialog(cli, scenario)
    assert real_plan(cli, data, "allow_once").steps == (ENTER,)
    assert real_plan(cli, data, "deny_once").steps == (ESC,)


def test_real_opencode_dialog_reads_the_highlight_from_colours() -> None:
    data = captured_dialog("opencode", "permission_allow")
    # Measured: 'Allow once' on 48;2;255;175;95, the others on 48;2;28;28;28.
    hint = "  ctrl+f fullscreen  ⇆ select  enter confirm"
    repaint = refocus(
        data,
        "  ┃   Allow once   Allow always   Reject",
        "  ┃\x1b[48;2;28;28;28m   Allow once \x1b[48;2;255;175;95m Allow always \x1b[48;2;28;28;28m"
        f"  Reject{hint}\x1b[0m",
    )
    assert "highlight" in real_refusal("opencode", repaint, "allow_once")
    assert real_plan("opencode", repaint, "deny_once").steps == (ESC,)


def test_real_opencode_external_directory_dialog_is_refused() -> None:
    data = captured_dialog("opencode", "permission_allow")
    other = refocus(data, "  ┃    # Shell command", "  ┃    ← Access external directory /tmp")
    real_refusal("opencode", other, "allow_once")
    real_refusal("opencode", other, "deny_once")


def test_real_claude_dialog_moves_the_focus_back_to_yes_never_to_a_rule() -> None:
    data = captured_dialog("claude", "permission_allow")
    moved = refocus(refocus(data, " ❯ 1. Yes", "   1. Yes"), "   4. No", " ❯ 4. No")
    assert real_plan("claude", moved, "allow_once").steps == (UP, UP, UP, ENTER)
    assert real_plan("claude", moved, "deny_once").steps == (ESC,)
    # The fingerprint ignores the focus, so the handler can follow the arrows.
    assert (
        real_plan("claude", moved, "allow_once").fingerprint
        == real_plan("claude", data, "allow_once").fingerprint
    )


def test_real_claude_dialog_is_refused_when_incomplete_or_not_bash() -> None:
    data = captured_dialog("claude", "permission_allow")
    real_refusal("claude", refocus(data, " Esc to cancel · Tab to amend", ""), "deny_once")
    real_refusal("claude", refocus(data, " Bash command", " Edit file"), "allow_once")
    two_yes = refocus(data, "   4. No", "   4. Yes")
    assert "one plain" in real_refusal("claude", two_yes, "allow_once")
    no_focus = refocus(data, " ❯ 1. Yes", "   1. Yes")
    real_refusal("claude", no_focus, "allow_once")


def test_real_codex_dialog_moves_the_focus_back_to_proceed() -> None:
    data = captured_dialog("codex", "permission_allow")
    moved = refocus(
        refocus(data, "› 1. Yes, proceed (y)", "  1. Yes, proceed (y)"),
        "  3. No, and tell Codex what to do differently (esc)",
        "› 3. No, and tell Codex what to do differently (esc)",
    )
    assert real_plan("codex", moved, "allow_once").steps == (UP, UP, ENTER)
    assert real_plan("codex", moved, "deny_once").steps == (ESC,)
    real_refusal(
        "codex", refocus(data, "  Press enter to confirm or esc to cancel", ""), "deny_once"
    )


@pytest.mark.parametrize("agent", ["codex", "generic", "aider", "gemini", "qwen"])
def test_unmeasured_kinds_refuse_even_a_perfect_dialog(agent: str) -> None:
    signin = (CAPTURED / "codex" / "signin_menu.bin").read_bytes()[:1771]
    for screen in (opencode_dialog(), kiro_dialog(), devin_dialog(), DEMO_DIALOG, signin):
        refusal(agent, screen, "allow_once")
        refusal(agent, screen, "deny_once")


# -- 3c. Gemini CLI 0.61.0 and Qwen Code 0.24.4 (recorded, fake model) -----------------

GEMINI_ROWS = (
    "│ ● 1. Allow once",
    "│   2. Allow for this session",
    "│   3. No, suggest changes (esc)",
)
QWEN_ROWS = (
    "   › 1. Yes, allow once",
    "     2. Always allow run 'touch *' commands in this project",
    "     3. Always allow run 'touch *' commands for this user",
    "     4. No, suggest changes (esc)",
)


def test_real_gemini_dialog_moves_the_focus_back_never_to_a_rule() -> None:
    data = captured_dialog("gemini", "permission_allow")
    moved = refocus(
        refocus(data, GEMINI_ROWS[0], "│   1. Allow once"),
        GEMINI_ROWS[2],
        "│ ● 3. No, suggest changes (esc)",
    )
    assert real_plan("gemini", moved, "allow_once").steps == (UP, UP, ENTER)
    assert real_plan("gemini", moved, "deny_once").steps == (ESC,)
    assert (
        real_plan("gemini", moved, "allow_once").fingerprint
        == real_plan("gemini", data, "allow_once").fingerprint
    )
    # On "Allow for this session" Enter would remember the approval: arrows back first.
    session = refocus(
        refocus(data, GEMINI_ROWS[0], "│   1. Allow once"), GEMINI_ROWS[1], "│ ● 2. Allow for …"
    )
    real_refusal("gemini", session, "allow_once")  # and a label it does not know: refused
    session = refocus(
        refocus(data, GEMINI_ROWS[0], "│   1. Allow once"),
        GEMINI_ROWS[1],
        "│ ● 2. Allow for this session",
    )
    assert real_plan("gemini", session, "allow_once").steps == (UP, ENTER)


def test_real_qwen_dialog_moves_the_focus_back_never_to_a_rule() -> None:
    data = captured_dialog("qwen", "permission_allow")
    moved = refocus(
        refocus(data, QWEN_ROWS[0], "     1. Yes, allow once"),
        QWEN_ROWS[2],
        "   › 3. Always allow run 'touch *' commands for this user",
    )
    assert real_plan("qwen", moved, "allow_once").steps == (UP, UP, ENTER)
    assert real_plan("qwen", moved, "deny_once").steps == (ESC,)
    assert (
        real_plan("qwen", moved, "allow_once").fingerprint
        == real_plan("qwen", data, "allow_once").fingerprint
    )


GEMINI_REFUSED = {
    "no-bottom-border": ("╰─", ""),
    "last-option-missing": (GEMINI_ROWS[2], "│"),
    "permanent-option": (GEMINI_ROWS[1], "│   2. Allow for all future sessions"),
    "two-allow-once": (GEMINI_ROWS[1], "│   2. Allow once"),
    "no-focus": (GEMINI_ROWS[0], "│   1. Allow once"),
    "two-focus": (GEMINI_ROWS[1], "│ ● 2. Allow for this session"),
    "not-a-shell-call": ("│ ? Shell  touch", "│ ? WriteFile  notes.txt"),
    "another-question": ("│ Allow execution of [Shell]?", "│ Apply this change?"),
}
QWEN_REFUSED = {
    "no-waiting-line": ("  ⠏ Waiting for user confirmation", ""),
    "last-option-missing": (QWEN_ROWS[3], ""),
    "unknown-option": (QWEN_ROWS[1], "     2. Yes, allow all edits"),
    "two-allow-once": (QWEN_ROWS[3], "     4. Yes, allow once"),
    "no-focus": (QWEN_ROWS[0], "     1. Yes, allow once"),
    "not-a-shell-call": ("  ? Shell touch", "  ? WriteFile notes.txt"),
}


@pytest.mark.parametrize("case", list(GEMINI_REFUSED))
def test_real_gemini_dialog_refuses_both_answers_unless_whole_and_measured(case: str) -> None:
    old, new = GEMINI_REFUSED[case]
    changed = refocus(captured_dialog("gemini", "permission_deny"), old, new)
    real_refusal("gemini", changed, "allow_once")
    real_refusal("gemini", changed, "deny_once")


@pytest.mark.parametrize("case", list(QWEN_REFUSED))
def test_real_qwen_dialog_refuses_both_answers_unless_whole_and_measured(case: str) -> None:
    old, new = QWEN_REFUSED[case]
    changed = refocus(captured_dialog("qwen", "permission_deny"), old, new)
    real_refusal("qwen", changed, "allow_once")
    real_refusal("qwen", changed, "deny_once")


def recorded_at(cli: str, scenario: str, offset: int) -> bytes:
    return (CAPTURED / cli / f"{scenario}.bin").read_bytes()[:offset]


def test_real_trust_prompts_never_trust_a_folder() -> None:
    for scenario, offset in (("startup", 9303), ("startup", 12385), ("trusted", 9303)):
        trust = recorded_at("gemini", scenario, offset)
        assert "saved for good" in real_refusal("gemini", trust, "allow_once")
        # Measured: Esc ends Gemini CLI and saves nothing.
        assert real_plan("gemini", trust, "deny_once").steps == (ESC,)
    for offset in (15888, 20039):
        trust = recorded_at("qwen", "trust", offset)
        # Both "Trust folder" and "Don't trust (esc)" are saved in trustedFolders.json.
        assert "saved for good" in real_refusal("qwen", trust, "allow_once")
        assert "saved for good" in real_refusal("qwen", trust, "deny_once")


def test_gemini_and_qwen_refuse_their_sign_in_screens_and_other_agents_dialogs() -> None:
    others = [
        recorded_at("gemini", "trusted", 26447),  # the auth menu
        recorded_at("qwen", "startup", 22849),  # the provider menu
        recorded_at("gemini", "prompt_reply", 35194),  # idle
        recorded_at("qwen", "prompt_reply", 137339),
        captured_dialog("codex", "permission_allow"),
        captured_dialog("claude", "permission_allow"),
        captured_dialog("opencode", "permission_allow"),
    ]
    for data in others:
        for cli in ("gemini", "qwen"):
            for answer in ("allow_once", "deny_once"):
                real_refusal(cli, data, answer)
    real_refusal("qwen", captured_dialog("gemini", "permission_allow"), "deny_once")
    real_refusal("gemini", captured_dialog("qwen", "permission_allow"), "deny_once")


def test_demo_recogniser_keeps_its_behaviour() -> None:
    assert plan("demo", DEMO_DIALOG, "allow_once").steps == (ENTER,)
    assert plan("demo", DEMO_DIALOG, "deny_once").steps == (ESC,)
    moved = DEMO_DIALOG.replace("› Allow once", "  Allow once").replace(
        "  Always allow", "› Always allow"
    )
    assert "highlight" in refusal("demo", moved, "allow_once")
    assert plan("demo", moved, "deny_once").steps == (ESC,)


# -- 4. answer_dialog on a real PTY ------------------------------------------------------

AGENT_SCRIPT = r"""
import json, os, sys, tty
log_path, frames_path = sys.argv[1], sys.argv[2]
with open(frames_path, encoding="utf-8") as f:
    frames = json.load(f)
tty.setraw(0)
def show(index):
    if index < len(frames):
        os.write(1, frames[index].encode())
show(0)
reads = 0
with open(log_path, "ab", buffering=0) as log:
    while True:
        data = os.read(0, 4096)
        if not data:
            break
        log.write(data)
        if b"<end-of-test>" in data:
            continue  # the test's marker is not a key: it draws nothing
        reads += 1
        show(reads)
"""
MARKER = b"<end-of-test>"


class FakeClock:
    def __init__(self) -> None:
        self.now = time.monotonic()
        self.frozen = False

    def __call__(self) -> float:
        return self.now if self.frozen else time.monotonic()

    def freeze(self) -> None:
        """Stop at the present moment; the test moves ``now`` from here."""
        self.now = time.monotonic()
        self.frozen = True


class Link:
    def __init__(self) -> None:
        self.sent: list[ToSupervisor] = []

    def send(self, msg: ToSupervisor) -> None:
        self.sent.append(msg)


class Unclosable:
    """The pane control of a scripted pane: no dialog test closes or re-introduces it."""

    def introduce(self) -> None:
        raise AssertionError("a dialog test never asks a pane to introduce itself")

    def close(self, grace_s: float) -> tuple[int | None, int]:
        raise AssertionError("a dialog test never closes its pane through a request")


class ScriptedPane:
    """The parts of a PaneWorker a RequestHandler uses, around a scripted agent on a PTY.

    Frame 0 is drawn at start; frame N after the agent's N-th read of its input (the
    test's marker does not count).
    """

    def __init__(
        self,
        tmp_path: Path,
        agent: str,
        frames: list[str],
        script: str = AGENT_SCRIPT,
        settle_s: float = 0.0,
        appear_s: float = 0.0,
        size: tuple[int, int] = (100, 30),
    ) -> None:
        self.log = tmp_path / "typed.log"
        self.log.write_bytes(b"")
        frames_path = tmp_path / "frames.json"
        frames_path.write_text(json.dumps(frames))
        script_path = tmp_path / "agent.py"
        script_path.write_text(script)
        argv = [sys.executable, str(script_path), str(self.log), str(frames_path)]
        env = {"PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8", "TERM": "xterm-256color"}
        self.boot = BootRecord(
            protocol_version=PROTOCOL_VERSION,
            pane="t",
            instance="i",
            secret=b"s",
            endpoint="ipc:///nonexistent",
            agent=agent,
            argv=argv,
            cwd=str(tmp_path),
            env=env,
            cols=size[0],
            rows=size[1],
        )
        self.link = Link()
        self.clock = FakeClock()
        self.screen = ScreenState(self.boot, self.link.send, clock=self.clock)
        self.program: Program | None = Program(argv, str(tmp_path), env, *size)
        self.screen.attach(self.program)
        self.screen.status.set_lifecycle("running")
        self.requests = RequestHandler(
            PaneIO(lambda: self.program, self.screen, self.link.send),
            Unclosable(),
            agent,
            clock=self.clock,
            dialog_settle_s=settle_s,
            dialog_appear_s=appear_s,
        )
        self._rid = 0
        self._seen = 0

    def pump_until(self, done: Callable[[], bool], timeout_s: float = 5.0) -> None:
        """Run the worker loop's parts (read, timers, rules) until ``done``; bounded."""
        prog = self.program
        assert prog is not None
        deadline = time.monotonic() + timeout_s
        while not done():
            assert time.monotonic() < deadline, self.screen.terminal.display_lines()
            ready, _, _ = select.select([prog.fd], [], [], 0.02)
            if ready and (data := prog.read()):
                self.screen.feed(data)
            self.requests.run_due(self.clock())
            self.screen.after_step()

    def pump_for(self, seconds: float) -> None:
        """Run the worker loop's parts for ``seconds``: to show that nothing happens."""
        end = time.monotonic() + seconds
        self.pump_until(lambda: time.monotonic() >= end, seconds + 5.0)

    def shows(self, text: str) -> bool:
        return text in "\n".join(self.screen.terminal.display_lines())

    def answer(self, answer: str, **extra: object) -> Ok | Failed:
        self._rid += 1
        rid = self._rid
        self.requests.handle(AnswerDialog(rid=rid, answer=answer, **extra))  # type: ignore[arg-type]
        return self.wait_reply(rid)

    def wait_reply(self, rid: int, timeout_s: float = 5.0) -> Ok | Failed:
        self.pump_until(lambda: self.reply(rid) is not None, timeout_s)
        reply = self.reply(rid)
        assert reply is not None
        return reply

    def reply(self, rid: int) -> Ok | Failed | None:
        for msg in self.link.sent:
            if isinstance(msg, Ok | Failed) and msg.rid == rid:
                return msg
        return None

    def unseen(self) -> bytes:
        """What the agent logged since the last ``typed``, complete or not."""
        return self.log.read_bytes()[self._seen :]

    def typed(self) -> bytes:
        """What the agent read since the last call, proven complete by a marker typed last."""
        assert self.program is not None
        self.program.queue_input(MARKER)
        self.program.flush()
        self.pump_until(lambda: self.unseen().endswith(MARKER))
        new = self.unseen()
        self._seen += len(new)
        return new.removesuffix(MARKER)

    def close(self) -> None:
        if self.program is None:
            return
        pid = self.program.pid
        self.program.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        self.program = None


@pytest.fixture
def scripted(tmp_path: Path) -> Iterator[Callable[..., ScriptedPane]]:
    panes: list[ScriptedPane] = []

    def start(
        agent: str,
        frames: list[str],
        script: str = AGENT_SCRIPT,
        settle_s: float = 0.0,
        appear_s: float = 0.0,
        size: tuple[int, int] = (100, 30),
    ) -> ScriptedPane:
        path = tmp_path / f"p{len(panes)}"
        path.mkdir()
        pane = ScriptedPane(path, agent, frames, script, settle_s, appear_s, size)
        panes.append(pane)
        return pane

    yield start
    for pane in panes:
        pane.close()


def blocked_on(pane: ScriptedPane, text: str) -> ScriptedPane:
    pane.pump_until(lambda: pane.screen.status.state == "blocked" and pane.shows(text))
    pane.typed()  # the terminal's answers to the program's queries, if it asked any
    return pane


def code_of(reply: Ok | Failed) -> str:
    return reply.code if isinstance(reply, Failed) else "ok"


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
    ("claude", [claude_at(1569).decode()], "allow_once"),
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


# -- 5. send_input: a prompt is reported sent only once the program took it -------------

# A line-editing agent. Its first "frame" argument is its mode: "echo" echoes keys and
# answers each Enter; "paste" does the same with bracketed paste on; "report" also
# reports OSC 7501 working on Enter; "ignore" echoes but never takes Enter; "late" shows
# the line only when Enter comes and never takes it; "exit" exits on Enter; "asks" reports
# a permission dialog as soon as a typed line ends with "!" (before any Enter).
LINE_AGENT = r"""
import json, os, sys, tty
log_path, frames_path = sys.argv[1], sys.argv[2]
with open(frames_path, encoding="utf-8") as f:
    mode = json.load(f)[0]
tty.setraw(0)
if mode == "paste":
    os.write(1, b"\x1b[?2004h")
os.write(1, b"> ")
line = b""
with open(log_path, "ab", buffering=0) as log:
    while True:
        data = os.read(0, 4096)
        if not data:
            break
        log.write(data)
        if b"<end-of-test>" in data:
            continue
        for key in data.replace(b"\x1b[200~", b"").replace(b"\x1b[201~", b""):
            if key != 13:
                line += bytes([key])
                if mode not in ("late",):
                    os.write(1, bytes([key]))
                if mode == "asks" and line.endswith(b"!"):
                    os.write(1, b"\r\nAllow it?\x1b]7501;state=blocked:kind=permission\x1b\\")
            elif mode == "exit":
                sys.exit(0)
            elif mode == "late":
                os.write(1, line)
            elif mode != "ignore":
                if mode in ("report", "instant"):
                    os.write(1, b"\x1b]7501;state=working\x1b\\")
                os.write(1, b"\r\nok: " + line + b"\r\n> ")
                if mode == "instant":
                    os.write(1, b"\x1b]7501;state=idle\x1b\\")
                line = b""
"""


def submit(pane: ScriptedPane, text: str, rid: int = 50) -> Ok | Failed:
    pane.pump_until(lambda: pane.shows(">"))
    pane.requests.handle(WriteInput(rid=rid, text=text))
    return pane.wait_reply(rid)


@pytest.mark.parametrize("mode", ["echo", "report", "exit"])
def test_a_taken_prompt_is_acknowledged(scripted: Callable[..., ScriptedPane], mode: str) -> None:
    pane = scripted("generic", [mode], LINE_AGENT)
    reply = submit(pane, "hello there")
    assert isinstance(reply, Ok), reply
    if mode == "report":
        assert reply.turn == 1
    if mode != "exit":
        assert pane.typed() == b"hello there\r"


def test_the_send_input_cursor_is_before_every_status_of_the_turn_it_started(
    scripted: Callable[..., ScriptedPane],
) -> None:
    """An instant program settles its turn before the prompt is acknowledged: the reply's
    seq still lies before that turn's working and done, so a wait after it sees them."""
    pane = scripted("generic", ["instant"], LINE_AGENT)
    pane.pump_until(lambda: pane.shows(">"))
    before = pane.screen.status.seq
    pane.requests.handle(WriteInput(rid=21, text="quick"))
    pane.pump_until(lambda: pane.screen.status.state == "done")
    reply = pane.wait_reply(21)
    assert isinstance(reply, Ok), reply
    assert reply.seq == before
    assert pane.screen.status.seq > before + 1  # working, then done, both after the cursor


def test_prompts_sent_at_once_are_typed_one_after_the_other(
    scripted: Callable[..., ScriptedPane],
) -> None:
    """A second prompt never interleaves its text with the first one's Enter."""
    pane = scripted("generic", ["echo"], LINE_AGENT)
    pane.pump_until(lambda: pane.shows(">"))
    pane.requests.handle(WriteInput(rid=31, text="first"))
    pane.requests.handle(WriteInput(rid=32, text="second"))
    assert isinstance(pane.wait_reply(31), Ok)
    assert isinstance(pane.wait_reply(32), Ok)
    assert pane.typed() == b"first\rsecond\r"


def _pending_bytes(fd: int) -> int:
    """Bytes the PTY holds for the reader (FIONREAD)."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


def test_enter_is_not_pressed_into_a_dialog_reported_after_the_text(
    scripted: Callable[..., ScriptedPane],
) -> None:
    """The program asks for permission while the text sits typed: the report is still
    unread when Enter is due. Enter would answer the dialog; it must not be pressed."""
    pane = scripted("generic", ["asks"], LINE_AGENT)
    pane.pump_until(lambda: pane.shows(">"))
    pane.clock.freeze()
    pane.requests.handle(WriteInput(rid=41, text="go!"))
    assert pane.program is not None
    # Wait (bounded) until the program wrote its whole report, without reading it:
    # the PTY says how many bytes it holds (readable alone was only the first echo).
    written = len(b"go!" + b"\r\nAllow it?\x1b]7501;state=blocked:kind=permission\x1b\\")
    deadline = time.monotonic() + 5
    while _pending_bytes(pane.program.fd) < written:
        assert time.monotonic() < deadline, _pending_bytes(pane.program.fd)
        select.select([], [], [], 0.005)
    pane.clock.now += 1.0  # Enter is due
    pane.requests.run_due(pane.clock())
    reply = pane.reply(41)
    assert isinstance(reply, Failed) and reply.code == "delivery_ambiguous", reply
    pane.clock.frozen = False
    assert pane.typed() == b"go!"


def test_bracketed_paste_is_used_when_the_program_asked_for_it(
    scripted: Callable[..., ScriptedPane],
) -> None:
    pane = scripted("generic", ["paste"], LINE_AGENT)
    pane.pump_until(lambda: pane.screen.terminal.bracketed_paste)
    assert isinstance(submit(pane, "two\nlines"), Ok)
    assert pane.typed() == b"\x1b[200~two\rlines\x1b[201~\r"


# Gemini CLI 0.61.0's paste guard, scaled: an Enter handled within GUARD seconds of a
# bracketed paste is a newline in the prompt, not a submission.
PASTE_GUARD_AGENT = r"""
import json, os, sys, time, tty
log_path, frames_path = sys.argv[1], sys.argv[2]
with open(frames_path, encoding="utf-8") as f:
    GUARD = float(json.load(f)[0])
tty.setraw(0)
os.write(1, b"\x1b[?2004h> ")
line, pasted_at = b"", 0.0
with open(log_path, "ab", buffering=0) as log:
    while True:
        data = os.read(0, 4096)
        if not data:
            break
        log.write(data)
        if b"<end-of-test>" in data:
            continue
        if b"\x1b[200~" in data:
            text = data.split(b"\x1b[200~", 1)[1].split(b"\x1b[201~", 1)[0]
            line += text
            os.write(1, text)
            pasted_at = time.monotonic()
            data = data.split(b"\x1b[201~", 1)[1]
        if b"\r" in data:
            if time.monotonic() - pasted_at < GUARD:
                line += b"\n"
                os.write(1, b"\r\n  ")
            else:
                os.write(1, b"\x1b]7501;state=working\x1b\\")
                os.write(1, b"\r\nok: " + line.replace(b"\n", b" ") + b"\r\n> ")
                line = b""
"""


def test_an_agent_with_a_paste_guard_gets_enter_only_after_the_echo(
    scripted: Callable[..., ScriptedPane],
) -> None:
    """Gemini CLI and Qwen Code panes: Enter waits until the pasted text was drawn and the
    program went quiet, so it submits instead of adding a newline (with the usual 50 ms it
    came inside Gemini's guard and the prompt stayed in its input box)."""
    pane = scripted("gemini", ["0.12"], PASTE_GUARD_AGENT)
    pane.pump_until(lambda: pane.screen.terminal.bracketed_paste and pane.shows(">"))
    reply = submit(pane, "hello there")
    assert isinstance(reply, Ok), reply
    assert reply.turn == pane.screen.status.turn == 1
    pane.pump_until(lambda: pane.shows("ok: hello there"))
    assert pane.typed() == b"\x1b[200~hello there\x1b[201~\r"


def test_a_newline_instead_of_a_submission_is_never_reported_sent(
    scripted: Callable[..., ScriptedPane],
) -> None:
    """Enter became a newline (the program was too busy): the cursor left the typed text's
    row, which for other agents counts as taken; for these it is delivery_ambiguous."""
    pane = scripted("gemini", ["60"], PASTE_GUARD_AGENT)
    pane.pump_until(lambda: pane.screen.terminal.bracketed_paste and pane.shows(">"))
    pane.requests.handle(WriteInput(rid=41, text="hello there"))
    pane.pump_until(lambda: pane.unseen().endswith(b"\r"))
    pane.clock.freeze()
    pane.clock.now += SUBMIT_ACK_TIMEOUT_S + 1
    reply = pane.wait_reply(41)
    assert isinstance(reply, Failed) and reply.code == "delivery_ambiguous", reply
    pane.clock.frozen = False
    assert not pane.shows("ok:") and pane.screen.status.turn == 0


@pytest.mark.parametrize("mode", ["ignore", "late"])
def test_a_prompt_left_in_the_input_line_is_delivery_ambiguous(
    scripted: Callable[..., ScriptedPane], mode: str
) -> None:
    """Enter swallowed, or the text drawn only after Enter: never reported as sent."""
    pane = scripted("generic", [mode], LINE_AGENT)
    pane.pump_until(lambda: pane.shows(">"))
    pane.requests.handle(WriteInput(rid=9, text="hello there"))
    pane.pump_until(lambda: pane.unseen().endswith(b"\r") and pane.shows("hello there"))
    assert pane.reply(9) is None
    pane.clock.frozen = True
    pane.clock.now = time.monotonic() + SUBMIT_ACK_TIMEOUT_S + 1
    reply = pane.wait_reply(9)
    assert isinstance(reply, Failed) and reply.code == "delivery_ambiguous", reply
    pane.clock.frozen = False
    assert pane.typed() == b"hello there\r"
