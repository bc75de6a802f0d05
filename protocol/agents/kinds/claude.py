"""Claude Code (npm ``@anthropic-ai/claude-code``): its folder-trust prompt, its
fullscreen-renderer offer at start-up and its Bash-command permission dialog, all
measured (``tests/captured/claude``; the tool dialog reached with a fake model on
loopback). Esc declines the trust prompt (trusting is rule-creating and refused, with
``dialog_refused``); "Not now" declines the fullscreen offer (accepting is refused).
It reports its state over OSC 7501 once the pane answers the probe. ``reviewer_start``
may choose its model and effort.
"""

from __future__ import annotations

from protocol.agents.dialog_kit import (
    ALLOW_ONCE,
    DENY_ONCE,
    ESC,
    MENU_OPTION,
    DialogPlan,
    DialogScreen,
    navigate,
    norm,
    numbered_menu,
    refuse,
    refuse_answer,
)
from protocol.agents.spec import NO_LAUNCH_RULES, AgentSpec

_CLAUDE_TRUST_OPTIONS = ("no, exit", "yes, i trust this folder")
_CLAUDE_TRUST_HINT = "enter to confirm · esc to cancel"
_CLAUDE_QUESTION = "do you want to proceed?"
_CLAUDE_TOOL_HINT = "esc to cancel"
# Only the shell-command dialog is measured (claude-code 2.1.332 against a fake model:
# tests/captured/claude/permission_*). Edit/create dialogs have other headers: refused.
_CLAUDE_TOOL_HEADER = "bash command"
_CLAUDE_HEADER_ROWS = 12


# Measured (2.1.332, tests/realcli/test_real_startup_screens.py): a HOME whose
# ~/.claude.json has no fullscreenUpsellSeenCount >= 3 opens on this offer, even with
# CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1; "Yes, try it" writes the renderer into the
# user's settings for good, "Not now" changes nothing but the offer's counter.
_CLAUDE_UPSELL_QUESTION = "try the new fullscreen renderer?"
_CLAUDE_UPSELL_OPTIONS = ("yes, try it", "not now")
_CLAUDE_UPSELL_ROWS = 8


# Measured (2.1.332): with the user settings pinning another permissions.defaultMode
# (what panewarden needs for Bash dialogs) and no hasSeenAutoDefaultNudge in
# ~/.claude.json, it opens on this offer; "Yes" writes defaultMode "auto" into the user
# settings for good (no more dialogs), "No" records only that the offer was seen.
_CLAUDE_AUTO_QUESTION = "make auto mode your default permission mode?"
_CLAUDE_AUTO_OPTIONS = ("yes, set auto mode as my default permission mode", "no, keep manual mode")
_CLAUDE_AUTO_ROWS = 10


def recognise(screen: DialogScreen, answer: str) -> DialogPlan:
    """Claude Code's folder-trust prompt, its fullscreen-renderer offer and its
    Bash-command permission dialog."""
    questions = [row for row, line in enumerate(screen.lines) if norm(line) == _CLAUDE_QUESTION]
    if questions:
        return _tool_dialog(screen, answer, questions)
    upsells = [
        row for row, line in enumerate(screen.lines) if norm(line) == _CLAUDE_UPSELL_QUESTION
    ]
    if upsells:
        return _upsell(screen, answer, upsells)
    nudges = [row for row, line in enumerate(screen.lines) if norm(line) == _CLAUDE_AUTO_QUESTION]
    if nudges:
        return _auto_nudge(screen, answer, nudges)
    rows = [row for row, line in enumerate(screen.lines) if line.strip()]
    texts = [norm(screen.lines[row].strip().removeprefix("❯")) for row in rows]
    shaped = (
        len(texts) >= 4
        and texts[-1] == _CLAUDE_TRUST_HINT
        and tuple(texts[-3:-1]) == _CLAUDE_TRUST_OPTIONS
        and "accessing workspace:" in texts
    )
    if not shaped:
        raise refuse(
            "no Claude Code folder-trust prompt or Bash-command permission dialog is on screen"
        )
    if answer == ALLOW_ONCE:
        raise refuse_answer("trusting a folder is rule-creating and is never selected")
    top = texts.index("accessing workspace:")
    # Measured (tests/captured/claude/startup): Esc declines and Claude Code exits.
    return DialogPlan((ESC,), tuple(texts[top:]))


def _upsell(screen: DialogScreen, answer: str, questions: list[int]) -> DialogPlan:
    """The measured offer (2.1.332)::

      Try the new fullscreen renderer?
      · <three feature rows>
      ❯ 1. Yes, try it
        2. Not now
      Enter to confirm · Esc to cancel

    ``deny_once`` moves to "Not now" and confirms; ``allow_once`` is refused.
    """
    lines = screen.lines
    if len(questions) != 1:
        raise refuse("more than one Claude Code fullscreen offer is on screen")
    question = questions[0]
    first = next(
        (
            row
            for row in range(question + 1, min(len(lines), question + _CLAUDE_UPSELL_ROWS))
            if MENU_OPTION.match(lines[row])
        ),
        None,
    )
    if first is None:
        raise refuse("the Claude Code fullscreen offer shows no options")
    menu = numbered_menu(lines, first, _CLAUDE_TRUST_HINT)
    if menu.labels != _CLAUDE_UPSELL_OPTIONS:
        raise refuse("the Claude Code fullscreen offer does not offer 'Yes, try it' / 'Not now'")
    if answer == ALLOW_ONCE:
        raise refuse_answer(
            "accepting the fullscreen renderer changes Claude Code's settings for good"
        )
    fingerprint = (_CLAUDE_UPSELL_QUESTION, *menu.labels, norm(lines[menu.hint_row]))
    return DialogPlan(navigate(screen, menu.focus, menu.labels.index("not now")), fingerprint)


def _auto_nudge(screen: DialogScreen, answer: str, questions: list[int]) -> DialogPlan:
    """The measured offer (2.1.332), options without numbers under a ``❯`` focus::

      Make auto mode your default permission mode?
      <two rows of explanation>
      ❯ Yes, set auto mode as my default permission mode
        No, keep manual mode

    The two options must be the last non-empty rows, in that order, with one focus.
    """
    lines = screen.lines
    if len(questions) != 1:
        raise refuse("more than one Claude Code auto-mode offer is on screen")
    rows = [
        row
        for row in range(questions[0] + 1, min(len(lines), questions[0] + _CLAUDE_AUTO_ROWS))
        if lines[row].strip()
    ]
    if any(lines[row].strip() for row in range(questions[0] + _CLAUDE_AUTO_ROWS, len(lines))):
        raise refuse("the Claude Code auto-mode offer is followed by other text")
    options = rows[-2:]
    focused = [lines[row].strip().startswith("❯") for row in options]
    labels = tuple(norm(lines[row].strip().removeprefix("❯")) for row in options)
    if labels != _CLAUDE_AUTO_OPTIONS or focused.count(True) != 1:
        raise refuse("the Claude Code auto-mode offer does not show its two options with one focus")
    if answer == ALLOW_ONCE:
        raise refuse_answer(
            "making auto mode the default changes Claude Code's settings for good"
            " (it would ask before nothing)"
        )
    fingerprint = (_CLAUDE_AUTO_QUESTION, *labels)
    return DialogPlan(navigate(screen, focused.index(True), 1), fingerprint)


def _tool_dialog(screen: DialogScreen, answer: str, questions: list[int]) -> DialogPlan:
    """The measured layout (2.1.332)::

    ──────────────
     Bash command
     [Tip: …]
     <description>
    ╌╌╌╌╌╌╌╌╌╌╌╌╌╌
     <command>
    ╌╌╌╌╌╌╌╌╌╌╌╌╌╌
     Do you want to proceed?
     ❯ 1. Yes
       2. Yes, and always allow access to <dir> from this project
       3. Yes, and switch to auto mode · …
       4. No
     Esc to cancel · Tab to amend
    """
    lines = screen.lines
    if len(questions) != 1:
        raise refuse("more than one Claude Code permission question is on screen")
    question = questions[0]
    headers = [
        row
        for row in range(max(0, question - _CLAUDE_HEADER_ROWS), question)
        if norm(lines[row]) == _CLAUDE_TOOL_HEADER and row > 0 and "─" in lines[row - 1]
    ]
    if len(headers) != 1:
        raise refuse("the Claude Code permission dialog is not about a Bash command")
    menu = numbered_menu(lines, question + 1, _CLAUDE_TOOL_HINT)
    if menu.labels.count("yes") != 1 or menu.labels.count("no") != 1:
        raise refuse("the Claude Code dialog does not offer one plain 'Yes' and one 'No'")
    body = [norm(lines[row]) for row in range(headers[0], question + 1) if lines[row].strip()]
    fingerprint = (*body, *menu.labels, norm(lines[menu.hint_row]))
    if answer == DENY_ONCE:
        # Measured: Esc (the dialog's own "Esc to cancel") rejects the call, the command
        # does not run and Claude ends the turn ("Interrupted by user").
        return DialogPlan((ESC,), fingerprint)
    return DialogPlan(navigate(screen, menu.focus, menu.labels.index("yes")), fingerprint)


SPEC = AgentSpec(
    name="claude",
    evidence="measured",
    rules="claude",
    dialogs=recognise,
    enter_after_echo=False,
    submit_sign="turn",
    launch=NO_LAUNCH_RULES,
    model_flags=("--model", "--effort"),
    summary=(
        "Claude Code: OSC 7501 status, Bash and folder-trust dialogs, fullscreen offer,"
        " reviewer model flags"
    ),
    home_writable=(".claude/", ".claude.json", ".cache/claude/", ".config/claude/"),
    home_programs=(
        ".claude.json",
        ".claude/settings.json",
        ".claude/settings.local.json",
        ".claude/CLAUDE.md",
        ".claude/hooks/",
        ".claude/plugins/",
        ".claude/commands/",
        ".claude/agents/",
        ".claude/skills/",
        ".config/claude/settings.json",
    ),
    credentials=(".claude/.credentials.json", ".claude.json", ".config/claude/.credentials.json"),
    choice_interrupt=b"\x1b",  # its dialogs' documented cancel key (measured)
)
