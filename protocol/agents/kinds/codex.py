"""Codex (npm ``@openai/codex``): its command approval, measured against a fake model
(``tests/captured/codex``), and its sign-in screen (read ``blocked``/``auth``).
"""

from __future__ import annotations

from protocol.agents.dialog_kit import (
    DENY_ONCE,
    ESC,
    MENU_OPTION,
    DialogPlan,
    DialogScreen,
    navigate,
    norm,
    numbered_menu,
    refuse,
)
from protocol.agents.spec import NO_LAUNCH_RULES, AgentSpec

_CODEX_QUESTION = "would you like to run the following command?"
_CODEX_HINT = "press enter to confirm or esc to cancel"
_CODEX_ALLOW = "yes, proceed (y)"
_CODEX_DENY = "no, and tell codex what to do differently (esc)"
_CODEX_BODY_ROWS = 12


def recognise(screen: DialogScreen, answer: str) -> DialogPlan:
    """Codex's command approval (measured, 0.171.0 against a fake model)::

      Would you like to run the following command?
      Environment: local
      Reason: <justification>
      $ <command>
    › 1. Yes, proceed (y)
      2. Yes, and don't ask again for commands that start with `…` (p)
      3. No, and tell Codex what to do differently (esc)
      Press enter to confirm or esc to cancel
    """
    lines = screen.lines
    questions = [row for row, line in enumerate(lines) if norm(line) == _CODEX_QUESTION]
    if len(questions) != 1:
        raise refuse("no single Codex command approval is on screen")
    question = questions[0]
    first = next(
        (
            row
            for row in range(question + 1, min(question + _CODEX_BODY_ROWS, len(lines)))
            if MENU_OPTION.match(lines[row])
        ),
        None,
    )
    if first is None:
        raise refuse("the Codex approval shows no options")
    body = [norm(lines[row]) for row in range(question, first) if lines[row].strip()]
    if not any(line.startswith("$ ") for line in body):
        raise refuse("the Codex approval is not about a shell command")
    menu = numbered_menu(lines, first, _CODEX_HINT)
    if menu.labels.count(_CODEX_ALLOW) != 1 or menu.labels.count(_CODEX_DENY) != 1:
        raise refuse("the Codex approval does not offer one 'Yes, proceed' and one 'No'")
    fingerprint = (*body, *menu.labels, norm(lines[menu.hint_row]))
    if answer == DENY_ONCE:
        # Measured: Esc is the "No, and tell Codex what to do differently (esc)" option;
        # the command does not run and the turn ends.
        return DialogPlan((ESC,), fingerprint)
    return DialogPlan(navigate(screen, menu.focus, menu.labels.index(_CODEX_ALLOW)), fingerprint)


SPEC = AgentSpec(
    name="codex",
    evidence="measured",
    rules="codex",
    dialogs=recognise,
    enter_after_echo=False,
    submit_sign="turn",
    launch=NO_LAUNCH_RULES,
    model_flags=None,
    summary="Codex: OSC 7501 status, command approvals, sign-in screen",
    home_writable=(".codex/",),
    home_programs=(".codex/config.toml", ".codex/AGENTS.md", ".codex/prompts/"),
    credentials=(".codex/auth.json",),
    choice_interrupt=b"\x1b",  # its dialogs' documented cancel key (measured)
)
