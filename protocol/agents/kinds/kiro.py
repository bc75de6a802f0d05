"""Kiro (``kiro-cli``): inferred from public descriptions of its screens, not measured.

The keys are the ones the dialog's own hints name (arrows, Enter); web-search approvals
are refused, as OpenAB Shepherd refused them on kiro-cli 3.3.0.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from protocol.agents.dialog_kit import (
    ALLOW_ONCE,
    DialogPlan,
    DialogScreen,
    navigate,
    norm,
    refuse,
)
from protocol.agents.spec import NO_LAUNCH_RULES, AgentSpec

_KIRO_TITLE = re.compile(r"^\s*(\S.*?)\s+requires approval\s*$")
_KIRO_ALLOW = "yes, single permission"
_KIRO_DENY = "no (tab to edit)"
_KIRO_OPTIONS = frozenset(
    {
        _KIRO_ALLOW,
        _KIRO_DENY,
        "trust, always allow",
        "trust, always allow in this session",
        "trust, allow all for this session",
    }
)
_KIRO_FOCUS = "❯"
# The tool call (e.g. "↓ Shell pwd") sits in the paragraph above the title; it is part
# of the fingerprint, so a dialog about another command is another dialog.
_KIRO_CONTEXT_ROWS = 4
# Shepherd refused these kinds on kiro-cli 3.3.0; we keep refusing them.
_KIRO_REFUSED_TOOLS = ("web_search", "web search")


def recognise(screen: DialogScreen, answer: str) -> DialogPlan:
    """Kiro's tool approval: a focus marker on a list, moved with arrows, chosen with Enter."""
    lines = screen.lines
    titles = [row for row, line in enumerate(lines) if _KIRO_TITLE.match(line)]
    if len(titles) != 1:
        raise refuse("no single Kiro '… requires approval' dialog is on screen")
    top = titles[0]
    title = norm(lines[top])
    if any(tool in title for tool in _KIRO_REFUSED_TOOLS):
        raise refuse("Kiro web search approvals are not answered")
    labels: list[str] = []
    focus: list[int] = []
    row = top + 1
    while row < len(lines):
        text = lines[row].strip()
        focused = text.startswith(_KIRO_FOCUS)
        label = norm(text.removeprefix(_KIRO_FOCUS))
        if label not in _KIRO_OPTIONS:
            break
        if focused:
            focus.append(len(labels))
        labels.append(label)
        row += 1
    hint_row = next(
        (r for r in range(row, min(row + 3, len(lines))) if "esc to close" in lines[r].lower()),
        None,
    )
    # Only blank rows or a horizontal rule may sit between the options and the hint.
    between = [lines[r] for r in range(row, hint_row if hint_row is not None else row)]
    if hint_row is None or any(line.strip() and "─" not in line for line in between):
        raise refuse("the Kiro dialog's options are not followed by its 'esc to close' hint")
    single = labels.count(_KIRO_ALLOW) == 1 and labels.count(_KIRO_DENY) == 1
    if not single or len(set(labels)) != len(labels):
        raise refuse("the Kiro dialog does not offer one single-permission Yes and one No")
    if len(focus) != 1:
        raise refuse("the Kiro dialog has no single focused option")
    fingerprint = (*_context_above(lines, top), title, *labels, norm(lines[hint_row]))
    target = labels.index(_KIRO_ALLOW if answer == ALLOW_ONCE else _KIRO_DENY)
    return DialogPlan(navigate(screen, focus[0], target), fingerprint)


def _context_above(lines: Sequence[str], top: int) -> tuple[str, ...]:
    """The paragraph just above a dialog's title (Kiro shows the tool call there)."""
    row = top - 1
    while row >= 0 and not lines[row].strip():
        row -= 1
    context: list[str] = []
    while row >= 0 and lines[row].strip() and len(context) < _KIRO_CONTEXT_ROWS:
        context.append(norm(lines[row]))
        row -= 1
    return tuple(reversed(context))


SPEC = AgentSpec(
    name="kiro",
    evidence="inferred",
    rules="kiro",
    dialogs=recognise,
    enter_after_echo=False,
    submit_sign="turn_or_cleared",
    launch=NO_LAUNCH_RULES,
    model_flags=None,
    summary="Kiro: inferred from public descriptions, not measured",
    home_writable=(".kiro/", ".local/share/kiro-cli/"),
    home_programs=(".kiro/settings/", ".kiro/agents/", ".kiro/hooks/"),
    credentials=(".local/share/kiro-cli/data.sqlite3",),
    choice_interrupt=b"\x03",  # no cancel key of its choices was measured
)
