"""Dialog recognisers: the exact keys for ``allow_once``/``deny_once``, or a refusal.

Each agent kind's recogniser (its spec in ``protocol.agents.kinds``) is fed screens
built from real bytes through the pane terminal: synthetic dialogs, the recorded dialogs
of the real CLIs (``tests/captured``), and screens that must be refused.
"""

from __future__ import annotations

import functools
import json

import pytest

from paneworker.requests.dialog_answering import (
    dialog_screen,
)
from protocol.agents.dialog_kit import DialogPlan
from protocol.errors import PanewardenError
from tests.paneworker.dialog_screens import (
    CAPTURED,
    CLAUDE_AUTO_OFFER,
    CLAUDE_OFFER,
    DEMO_DIALOG,
    DEVIN_OPTIONS,
    DOWN,
    ENTER,
    ESC,
    HOME,
    OC_REFUSED,
    SCREENS,
    UP,
    claude_at,
    crlf,
    devin_dialog,
    kiro_dialog,
    opencode_dialog,
    palette,
    plan,
    recogniser_for,
    refocus,
    refusal,
    terminal_with,
    truecolor,
)

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
        refused = refusal("claude", claude_at(offset), "allow_once", "dialog_refused")
        assert "rule-creating" in refused


def test_claude_fullscreen_offer_is_declined_with_not_now_and_never_accepted() -> None:
    """Measured on 2.1.332 (a HOME that has started Claude before): "Not now" changes
    nothing for good, "Yes, try it" writes the renderer into its settings."""
    assert plan("claude", CLAUDE_OFFER, "deny_once").steps == (DOWN, ENTER)
    moved = CLAUDE_OFFER.replace("❯ 1. Yes, try it", "  1. Yes, try it").replace(
        "    2. Not now", "  ❯ 2. Not now"
    )
    assert plan("claude", moved, "deny_once").steps == (ENTER,)
    for screen in (CLAUDE_OFFER, moved):
        refused = refusal("claude", screen, "allow_once", "dialog_refused")
        assert "settings for good" in refused
    # Another option, or no hint under them: not the measured offer.
    other = CLAUDE_OFFER.replace("2. Not now", "2. Always")
    refusal("claude", other, "deny_once")
    refusal("claude", CLAUDE_OFFER.replace("Enter to confirm", "Enter to go"), "deny_once")


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
    return recogniser_for(cli)(dialog_screen(terminal_with(data, 120, 40)), answer)


def real_refusal(cli: str, data: bytes, answer: str, code: str = "dialog_unrecognized") -> str:
    with pytest.raises(PanewardenError) as caught:
        real_plan(cli, data, answer)
    assert caught.value.code.value == code
    return caught.value.message


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


@pytest.mark.parametrize("agent", ["codex", "generic", "aider", "pi", "gemini", "qwen"])
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
        assert "saved for good" in real_refusal("gemini", trust, "allow_once", "dialog_refused")
        # Measured: Esc ends Gemini CLI and saves nothing.
        assert real_plan("gemini", trust, "deny_once").steps == (ESC,)
    for offset in (15888, 20039):
        trust = recorded_at("qwen", "trust", offset)
        # Both "Trust folder" and "Don't trust (esc)" are saved in trustedFolders.json.
        assert "saved for good" in real_refusal("qwen", trust, "allow_once", "dialog_refused")
        assert "saved for good" in real_refusal("qwen", trust, "deny_once", "dialog_refused")


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


def test_claude_auto_mode_offer_keeps_manual_mode_and_is_never_accepted() -> None:
    """Measured on 2.1.332: "Yes" writes defaultMode "auto" (no more dialogs) for good."""
    assert plan("claude", CLAUDE_AUTO_OFFER, "deny_once").steps == (DOWN, ENTER)
    refused = refusal("claude", CLAUDE_AUTO_OFFER, "allow_once", "dialog_refused")
    assert "settings for good" in refused
    moved = CLAUDE_AUTO_OFFER.replace("❯ Yes, set", "  Yes, set").replace(
        "    No, keep", "  ❯ No, keep"
    )
    assert plan("claude", moved, "deny_once").steps == (ENTER,)
    refusal("claude", CLAUDE_AUTO_OFFER.replace("No, keep manual mode", "No"), "deny_once")
    refusal("claude", CLAUDE_AUTO_OFFER + "\r\n\r\n  typed text", "deny_once")
