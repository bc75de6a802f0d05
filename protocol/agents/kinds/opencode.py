"""OpenCode (npm ``opencode-ai``): its shell permission dialog and its launch rules.

The dialog of opencode-ai 1.18.33 was measured against a fake model on loopback
(``tests/captured/opencode/permission_*``: ``Allow once`` highlighted by a background
colour only), and OpenCode 2.2.7's layout as measured by OpenAB Shepherd. ``allow_once``
needs the highlight read from colours. A profile may not start it with an auto-approve
flag (``--auto``, ``--auto-*``, ``autoaccept``, ``auto-accept``, ``auto_accept``).
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
    text_columns,
)
from protocol.agents.spec import AgentSpec, LaunchRules

# OpenCode approves every permission prompt without a dialog when started with one of
# these; matched as case-insensitive substrings, so `--auto-share` is refused as well
# (a false positive we accept rather than miss a spelling).
AUTO_APPROVE_MARKERS = ("--auto", "autoaccept", "auto-accept", "auto_accept")


def auto_approve_flag(args: Sequence[str]) -> tuple[int, str] | None:
    """The first element of ``args`` holding one of OpenCode's auto-approve spellings."""
    for index, arg in enumerate(args):
        folded = arg.casefold()
        if any(marker in folded for marker in AUTO_APPROVE_MARKERS):
            return index, "it skips every permission dialog"
    return None


_OC_TITLE = "△ Permission required"
# opencode-ai 1.18.33 (measured) names the middle option "Allow always"; OpenCode 2.2.7
# (Shepherd) "Always allow". Either way it is rule-creating and never the target.
_OC_LABELS = ("Allow once", ("Always allow", "Allow always"), "Reject")
_OC_BORDER = " \t┃│▌▐|"
# 1.18.33 puts a "# Shell command" header between the title and the "$ command" line;
# other headers (e.g. "← Access external directory") are other dialogs, not measured.
_OC_SHELL_HEADER = "# Shell command"


def _command_row(lines: Sequence[str], top: int) -> int:
    """The row of the dialog's ``$ command`` (or 2.2.7's ``→ Edit path``) line."""
    rows = [row for row in range(top + 1, len(lines)) if lines[row].strip(_OC_BORDER)]
    if not rows:
        raise refuse("the OpenCode dialog shows no '$ command' or '→ Edit path' line")
    first = lines[rows[0]].strip(_OC_BORDER)
    if first == _OC_SHELL_HEADER:
        # Measured layout (1.18.33): header, blank row, "$ command".
        if len(rows) < 2 or not lines[rows[1]].strip(_OC_BORDER).startswith("$ "):
            raise refuse("the OpenCode shell dialog shows no '$ command' line")
        return rows[1]
    if not first.startswith(("$ ", "→ Edit ")):
        raise refuse("the OpenCode dialog shows no '$ command' or '→ Edit path' line")
    return rows[0]


def recognise(screen: DialogScreen, answer: str) -> DialogPlan:
    """OpenCode's permission dialog; ``allow_once`` needs the highlight read from colours."""
    lines = screen.lines
    titles = [row for row, line in enumerate(lines) if _OC_TITLE in line]
    if len(titles) != 1:
        raise refuse("no single OpenCode 'Permission required' dialog is on screen")
    top = titles[0]
    command_row = _command_row(lines, top)
    found: list[tuple[int, int]] = []
    shown: list[str] = []
    for choices in _OC_LABELS:
        spots = [
            (row, index, label)
            for label in ((choices,) if isinstance(choices, str) else choices)
            for row in range(top, len(lines))
            for index in occurrences(lines[row], label)
        ]
        if len(spots) != 1:
            name = choices if isinstance(choices, str) else " / ".join(choices)
            raise refuse(f"the OpenCode dialog does not show '{name}' exactly once")
        found.append(spots[0][:2])
        shown.append(spots[0][2])
    if found != sorted(found) or found[0][0] <= command_row:
        raise refuse("the OpenCode dialog's options are not Allow once, Always allow, Reject")
    hint_row = next(
        (row for row in range(found[-1][0], len(lines)) if "ctrl+f" in lines[row]), None
    )
    if hint_row is None:
        raise refuse("the OpenCode dialog shows no 'ctrl+f' hint")
    fingerprint = tuple(lines[top : hint_row + 1])
    if answer == DENY_ONCE:
        # Measured (1.18.33, live and tests/captured/opencode/permission_deny): Esc rejects,
        # the command does not run and the turn ends; Shepherd measured the same on 2.2.7.
        return DialogPlan((ESC,), fingerprint)
    allow, always, reject = (
        label_background(screen, row, index, label)
        for (row, index), label in zip(found, shown, strict=True)
    )
    if allow == "default":
        raise refuse("'Allow once' has the default background, so it is not highlighted")
    if always != reject or allow == always:
        raise refuse("the highlight is not on 'Allow once' alone")
    return DialogPlan((ENTER,), fingerprint)


def label_background(screen: DialogScreen, row: int, index: int, label: str) -> str:
    """The one background of a label's cells; refuses on reverse video or mixed colours.

    Shared with Kilo Code, whose dialog is OpenCode's."""
    cells = screen.cells(row)
    text, columns = text_columns(cells)
    if text.rstrip() != screen.lines[row] or text[index : index + len(label)] != label:
        raise refuse("the screen's text and its cells disagree")
    picked = [cells[columns[index + k]] for k in range(len(label))]
    if any(cell.reverse for cell in picked):
        raise refuse(f"'{label}' is drawn in reverse video")
    backgrounds = {cell.bg for cell in picked}
    if len(backgrounds) != 1:
        raise refuse(f"'{label}' has mixed backgrounds")
    return backgrounds.pop()


SPEC = AgentSpec(
    name="opencode",
    evidence="measured",
    rules="opencode",
    dialogs=recognise,
    enter_after_echo=False,
    submit_sign="turn",
    launch=LaunchRules(
        cli_names=("opencode",),
        refusal="auto-approve flag refused for opencode",
        refused_flag=auto_approve_flag,
    ),
    model_flags=None,
    summary="OpenCode: screen status, its shell permission dialog; auto-approve flags refused",
    home_writable=(
        ".local/share/opencode/",
        ".local/state/opencode/",
        ".cache/opencode/",
        ".config/opencode/",
    ),
    home_programs=(
        ".config/opencode/opencode.json",
        ".config/opencode/opencode.jsonc",
        ".config/opencode/config.json",
        ".config/opencode/AGENTS.md",
        ".config/opencode/plugin/",
        ".config/opencode/agent/",
        ".config/opencode/command/",
    ),
    credentials=(".local/share/opencode/auth.json", ".local/share/opencode/mcp-auth.json"),
    choice_interrupt=b"\x1b",  # its dialogs' documented cancel key (measured)
)
