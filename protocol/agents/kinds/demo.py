"""The bundled demo agent (``supervisor.demo.agent``; docs/design.md §11).

Its dialog is matched line by line, measured by the e2e tests; it reports its state over
OSC 7501, so its screen rules are only a fallback.
"""

from __future__ import annotations

from protocol.agents.dialog_kit import (
    DENY_ONCE,
    ENTER,
    ESC,
    DialogPlan,
    DialogScreen,
    refuse,
)
from protocol.agents.spec import NO_LAUNCH_RULES, AgentSpec


def recognise(screen: DialogScreen, answer: str) -> DialogPlan:
    """The bundled demo agent's dialog (docs/design.md §11), matched line by line."""
    stripped = [line.rstrip() for line in screen.lines]
    for top, line in enumerate(stripped):
        if line.strip() != "Permission required":
            continue
        block = stripped[top : top + 6]
        if len(block) < 6:
            break
        command, allow, always, deny, hint = block[1:]
        shaped = (
            command.startswith("Run shell command: ")
            and allow.strip().endswith("Allow once")
            and always.strip().endswith("Always allow")
            and deny.strip().endswith("Deny")
            and hint.strip() == "enter confirm · esc cancel"
        )
        if not shaped:
            continue
        marks = [row.lstrip()[:1] == "›" for row in (allow, always, deny)]
        fingerprint = tuple(block)
        if answer == DENY_ONCE:
            return DialogPlan((ESC,), fingerprint)
        if marks == [True, False, False]:
            return DialogPlan((ENTER,), fingerprint)
        raise refuse("the dialog's highlight is not on 'Allow once'")
    raise refuse("no complete demo permission dialog is on screen")


SPEC = AgentSpec(
    name="demo",
    evidence="measured",
    rules="demo",
    dialogs=recognise,
    enter_after_echo=False,
    submit_sign="turn_or_cleared",
    launch=NO_LAUNCH_RULES,
    model_flags=None,
    summary="the bundled demo agent: OSC 7501 status, its permission dialog (docs/design.md §11)",
    home_writable=(),
    home_programs=(),
    credentials=(),
    choice_interrupt=b"\x1b",  # its dialogs' documented cancel key (measured)
)
