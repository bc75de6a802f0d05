"""Kilo Code (npm ``@kilocode/cli``, an OpenCode fork): its permission dialog, launch rules.

Measured on 7.7.7 against the fake model on loopback (tests/realcli, docs/operations.md
"Agent kinds"). The dialog is OpenCode's (``△ Permission required``, a ``# <description>``
header, ``$ command``, then ``Allow once   Allow always   Reject``, ``Allow once``
highlighted by a background colour), with one difference: rejecting opens a second
panel, ``△ Reject permission`` / ``Tell Kilo what to do differently``, where Enter
confirms the rejection (with no message) and Esc goes back to the first panel. So
``deny_once`` is two steps, Esc then Enter, and the second is pressed only when the
second panel is up for the same command.

Both panels name the command only in the first; the transcript row above the dialog
(``$ command``, the pending call) names it in both, so that row is the fingerprint.
"""

from __future__ import annotations

from collections.abc import Sequence

from protocol.agents.dialog_kit import (
    DENY_ONCE,
    ENTER,
    ESC,
    DialogPlan,
    DialogScreen,
    occurrences,
    refuse,
)
from protocol.agents.kinds import opencode
from protocol.agents.spec import AgentSpec, LaunchRules

_TITLE = "△ Permission required"
_REJECT_TITLE = "△ Reject permission"
_REJECT_ASK = "Tell Kilo what to do differently"
_LABELS = ("Allow once", "Allow always", "Reject")
_BORDER = " \t┃│▌▐|╹"
# Kilo's own auto-approval spellings on top of OpenCode's (strings of 7.7.7's binary).
AUTO_APPROVE_MARKERS = (*opencode.AUTO_APPROVE_MARKERS, "yolo", "dangerously-skip-permissions")
# Variables that carry a permission config ("bash": "allow" turns the dialog off): a
# profile may not set them; the user's own config file is the operator's to check.
REFUSED_ENV = ("KILO_PERMISSION", "KILO_CONFIG_CONTENT", "KILO_CONFIG", "KILO_CONFIG_DIR")


def auto_approve_flag(args: Sequence[str]) -> tuple[int, str] | None:
    """The first element of ``args`` holding one of Kilo's auto-approve spellings."""
    for index, arg in enumerate(args):
        folded = arg.casefold()
        if any(marker in folded for marker in AUTO_APPROVE_MARKERS):
            return index, "it skips every permission dialog"
    return None


def _rows(lines: Sequence[str], top: int) -> list[int]:
    return [row for row in range(top + 1, len(lines)) if lines[row].strip(_BORDER)]


def _pending(lines: Sequence[str], top: int) -> str:
    """The transcript's pending ``$ command`` row above the dialog."""
    for row in range(top - 1, -1, -1):
        text = lines[row].strip(_BORDER)
        if text.startswith("$ "):
            return text
    raise refuse("the Kilo dialog has no pending '$ command' above it")


def recognise(screen: DialogScreen, answer: str) -> DialogPlan:
    """Kilo's permission dialog, or its reject panel (deny only)."""
    lines = screen.lines
    firsts = [row for row, line in enumerate(lines) if _TITLE in line]
    rejects = [row for row, line in enumerate(lines) if _REJECT_TITLE in line]
    if len(firsts) + len(rejects) != 1:
        raise refuse("no single Kilo permission dialog is on screen")
    if rejects:
        return _reject_panel(screen, rejects[0], answer)
    top = firsts[0]
    rows = _rows(lines, top)
    if len(rows) < 2 or not lines[rows[0]].strip(_BORDER).startswith("# "):
        raise refuse("the Kilo dialog shows no '# description' header")
    command = lines[rows[1]].strip(_BORDER)
    if not command.startswith("$ "):
        raise refuse("the Kilo dialog shows no '$ command' line")
    pending = _pending(lines, top)
    if pending != command:
        raise refuse("the Kilo dialog's command is not the pending call above it")
    found: list[tuple[int, int]] = []
    for label in _LABELS:
        spots = [
            (row, index)
            for row in range(rows[1] + 1, len(lines))
            for index in occurrences(lines[row], label)
        ]
        if len(spots) != 1:
            raise refuse(f"the Kilo dialog does not show '{label}' exactly once")
        found.append(spots[0])
    if found != sorted(found) or "ctrl+f" not in lines[found[-1][0]]:
        raise refuse("the Kilo dialog's options are not Allow once, Allow always, Reject")
    fingerprint = ("kilo permission", pending)
    if answer == DENY_ONCE:
        # Measured (7.7.7): Esc opens the reject panel, whose Enter rejects: the command
        # does not run and the turn ends.
        return DialogPlan((ESC, ENTER), fingerprint)
    allow, always, reject = (
        opencode.label_background(screen, row, index, label)
        for (row, index), label in zip(found, _LABELS, strict=True)
    )
    if allow == "default":
        raise refuse("'Allow once' has the default background, so it is not highlighted")
    if always != reject or allow == always:
        raise refuse("the highlight is not on 'Allow once' alone")
    return DialogPlan((ENTER,), fingerprint)


def _reject_panel(screen: DialogScreen, top: int, answer: str) -> DialogPlan:
    """The second panel of a rejection: Enter with an empty message confirms it."""
    if answer != DENY_ONCE:
        raise refuse("Kilo's reject panel is up: only deny_once continues it")
    lines = screen.lines
    rows = _rows(lines, top)
    if not rows or lines[rows[0]].strip(_BORDER) != _REJECT_ASK:
        raise refuse("the Kilo reject panel does not ask what to do differently")
    if len(rows) < 2:
        raise refuse("the Kilo reject panel shows no 'enter confirm' hint")
    hint = lines[rows[1]]
    if "enter confirm" not in hint or "esc cancel" not in hint:
        # Typed text in its input, or another panel: not the measured empty panel.
        raise refuse("the Kilo reject panel is not empty above its 'enter confirm' hint")
    return DialogPlan((ENTER,), ("kilo permission", _pending(lines, top)))


SPEC = AgentSpec(
    name="kilo",
    evidence="measured",
    rules="kilo",
    dialogs=recognise,
    enter_after_echo=False,
    submit_sign="turn",
    launch=LaunchRules(
        cli_names=("kilo",),
        refusal="auto-approval refused for kilo",
        refused_flag=auto_approve_flag,
        refused_env=REFUSED_ENV,
        refused_env_why="it can carry a permission config that allows tools without a dialog",
    ),
    model_flags=None,
    summary="Kilo Code: screen status, its permission dialog and reject panel; auto-approval "
    "flags and permission variables refused",
    home_writable=(
        ".local/share/kilo/",
        ".local/state/kilo/",
        ".cache/kilo/",
        ".config/kilo/",
        # Measured: 7.7.7 writes its TUI's state and its own sandbox's policy there too.
        ".local/share/opentui/",
        ".local/state/kilo-sandbox-policy/",
    ),
    home_programs=(
        ".config/kilo/kilo.json",
        ".config/kilo/kilo.jsonc",
        ".config/kilo/opencode.json",
        ".config/kilo/config.json",
        ".config/kilo/plugin/",
        ".config/kilo/agent/",
        ".config/kilo/command/",
    ),
    credentials=(".local/share/kilo/auth.json", ".local/share/kilo/mcp-auth.json"),
    choice_interrupt=b"\x03",  # its Esc opens a reject panel, which cancels nothing
)
