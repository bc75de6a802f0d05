"""Dialog recognisers: read a permission dialog off the screen and plan the keys.

A recogniser sees the whole visible screen and returns the exact bytes that
answer ``allow_once`` or ``deny_once``, or refuses with a typed error. It never
plans a rule-creating option ("always allow", "trust", …). Agents without a
measured recogniser (``generic`` included) never have a dialog answered.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from protocol.errors import ErrorCode, PanewardenError

ENTER = b"\r"
ESC = b"\x1b"


@dataclass(frozen=True)
class DialogPlan:
    """The keys to press and the dialog text they were planned against."""

    keys: bytes
    fingerprint: tuple[str, ...]


Recogniser = Callable[[Sequence[str], str], DialogPlan]


def _demo(lines: Sequence[str], answer: str) -> DialogPlan:
    """The bundled demo agent's dialog (design §11), matched line by line."""
    stripped = [line.rstrip() for line in lines]
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
        if answer == "deny_once":
            return DialogPlan(ESC, fingerprint)
        if marks == [True, False, False]:
            return DialogPlan(ENTER, fingerprint)
        raise PanewardenError(
            ErrorCode.DIALOG_UNRECOGNIZED,
            "the dialog's highlight is not on 'Allow once'; nothing was sent",
        )
    raise PanewardenError(
        ErrorCode.DIALOG_UNRECOGNIZED, "no complete demo permission dialog is on screen"
    )


def _unmeasured(lines: Sequence[str], answer: str) -> DialogPlan:
    raise PanewardenError(
        ErrorCode.DIALOG_UNRECOGNIZED,
        "this pane's agent kind has no measured dialog recogniser; nothing was sent",
    )


def recogniser_for(agent: str) -> Recogniser:
    """The recogniser for an agent kind; unmeasured kinds always refuse."""
    if agent == "demo":
        return _demo
    return _unmeasured
