"""Devin's CLI: inferred from public descriptions of its screens, not measured.

Only its shell-command permission prompt is answered (numbered options under a ``❭``
focus); its bypass option is never the target.
"""

from __future__ import annotations

import re

from protocol.agents.dialog_kit import (
    ALLOW_ONCE,
    DialogPlan,
    DialogScreen,
    navigate,
    norm,
    refuse,
)
from protocol.agents.spec import NO_LAUNCH_RULES, AgentSpec

_DEVIN_OPTION = re.compile(r"^\s*([❭·])\s*(\d+)\s+(\S.*?)\s*$")
_DEVIN_ALLOW = "yes (approve once)"
_DEVIN_DENY = "no"
_DEVIN_REQUEST_ROWS = 6


def recognise(screen: DialogScreen, answer: str) -> DialogPlan:
    """Devin's shell-command permission prompt: numbered options under a ``❭`` focus."""
    lines = screen.lines
    hints = [
        row
        for row, line in enumerate(lines)
        if all(word in line.lower() for word in ("select", "confirm", "esc cancel"))
    ]
    if len(hints) != 1:
        raise refuse("no single Devin permission prompt is on screen")
    hint_row = hints[0]
    parsed: list[tuple[str, int, str]] = []
    row = hint_row - 1
    while row >= 0 and (match := _DEVIN_OPTION.match(lines[row])):
        parsed.append((match[1], int(match[2]), norm(match[3])))
        row -= 1
    parsed.reverse()
    if [number for _, number, _ in parsed] != list(range(1, len(parsed) + 1)):
        raise refuse("the Devin prompt's options are not numbered 1..n above its hint")
    labels = [label for _, _, label in parsed]
    focus = [index for index, (mark, _, _) in enumerate(parsed) if mark == "❭"]
    request = [norm(lines[r]) for r in range(max(0, row - _DEVIN_REQUEST_ROWS + 1), row + 1)]
    if not any("$ " in line for line in request):
        # Shepherd measured shell-command prompts only.
        raise refuse("the Devin prompt is not about a shell command")
    if labels.count(_DEVIN_ALLOW) != 1 or labels.count(_DEVIN_DENY) != 1:
        raise refuse("the Devin prompt does not offer one 'Yes (Approve once)' and one 'No'")
    if len(focus) != 1:
        raise refuse("the Devin prompt has no single focused option")
    fingerprint = (*[line for line in request if line], *labels, norm(lines[hint_row]))
    target = labels.index(_DEVIN_ALLOW if answer == ALLOW_ONCE else _DEVIN_DENY)
    return DialogPlan(navigate(screen, focus[0], target), fingerprint)


SPEC = AgentSpec(
    name="devin",
    evidence="inferred",
    rules="devin",
    dialogs=recognise,
    enter_after_echo=False,
    submit_sign="turn_or_cleared",
    launch=NO_LAUNCH_RULES,
    model_flags=None,
    summary="Devin: inferred from public descriptions, not measured",
    home_writable=(".devin/", ".config/devin/", ".local/share/devin/"),
    home_programs=(".config/devin/config.json", ".config/devin/settings.json"),
    credentials=(".config/devin/credentials.json", ".local/share/devin/credentials.json"),
    choice_interrupt=b"\x03",  # no cancel key of its choices was measured
)
