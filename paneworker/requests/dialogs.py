"""Dialog recognisers: read a permission dialog off the screen and plan the keys.

A recogniser sees the whole visible screen (text, and styled cells where the
highlight is a colour) and returns the exact bytes that answer ``allow_once`` or
``deny_once``, or refuses with ``dialog_unrecognized``. It never plans a
rule-creating option ("always allow", "allow for this session", "trust", "don't ask
again", Devin's bypass):
those labels are never the target of a plan and Enter is only planned while the
focus is on the target.

A plan is one or more *steps*; each step's bytes are written in a loop step of
their own. When a plan has several steps (arrows, then Enter), the request handler
re-runs the recogniser on the fresh screen before each later step and refuses with
``dialog_changed`` unless the dialog's fingerprint is unchanged and the focus moved
as planned. The fingerprint leaves out the focus marker, so moving the focus does
not change it; any other change (another command, other options) does.

What each recogniser rests on (``docs/operations.md``, "Agent kinds", has the full table):

- ``demo``: the bundled demo agent's dialog (docs/design.md §11), measured by the e2e tests.
- ``opencode``: the shell-command dialog of opencode-ai 1.18.33, measured against a fake
  model on loopback (``tests/captured/opencode/permission_*``: ``Allow once`` highlighted by
  a background colour only), and OpenCode 2.2.7's layout as measured by OpenAB Shepherd.
- ``kiro``, ``devin``: inferred from public descriptions of their screens; the
  keys are the ones the dialogs' own hints name (arrows, Enter).
- ``claude``: the folder-trust prompt (Esc declines it and Claude Code exits; trusting is
  rule-creating and refused) and the Bash-command permission dialog, both measured
  (``tests/captured/claude``; the tool dialog reached with a fake model on loopback).
- ``codex``: the command approval, measured the same way (``tests/captured/codex``).
- ``gemini``: the shell-command confirmation and the folder-trust prompt of gemini-cli
  0.61.0 (``tests/captured/gemini``; trusting is refused, Esc declines and Gemini exits).
- ``qwen``: the shell-command confirmation of qwen-code 0.24.4 (``tests/captured/qwen``);
  its folder-trust prompt is recognised and refused both ways (every answer is saved).
- ``generic`` and every other kind: always refuse.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from paneworker.screen.terminal import Cell, Terminal
from protocol.errors import ErrorCode, PanewardenError

ENTER = b"\r"
ESC = b"\x1b"

ALLOW_ONCE = "allow_once"
DENY_ONCE = "deny_once"


@dataclass(frozen=True)
class DialogScreen:
    """What a recogniser may look at: the visible rows and their styled cells."""

    lines: tuple[str, ...]
    cell_rows: Callable[[int], Sequence[Cell]]
    application_cursor_keys: bool = False

    @classmethod
    def from_terminal(cls, terminal: Terminal) -> DialogScreen:
        """A view of ``terminal``'s visible screen as it is now."""
        return cls(
            lines=tuple(terminal.display_lines()),
            cell_rows=terminal.cells,
            application_cursor_keys=terminal.application_cursor_keys,
        )

    def cells(self, row: int) -> Sequence[Cell]:
        """Styled cells of a visible row (a wide character's second cell is ``""``)."""
        return self.cell_rows(row)

    def arrow(self, direction: str) -> bytes:
        """The bytes of an arrow key (``A`` up, ``B`` down) in the program's cursor-key mode."""
        return (b"\x1bO" if self.application_cursor_keys else b"\x1b[") + direction.encode()


@dataclass(frozen=True)
class DialogPlan:
    """The keys to press, one loop step per entry, and the dialog they were planned on."""

    steps: tuple[bytes, ...]
    fingerprint: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.steps or not all(self.steps):
            raise ValueError("a plan has at least one step and no empty step")

    @property
    def keys(self) -> bytes:
        """The bytes of the first step."""
        return self.steps[0]


Recogniser = Callable[[DialogScreen, str], DialogPlan]


def _refuse(message: str) -> PanewardenError:
    return PanewardenError(ErrorCode.DIALOG_UNRECOGNIZED, message + "; nothing was sent")


def _norm(text: str) -> str:
    """Lower-cased with runs of whitespace collapsed, for comparing labels."""
    return " ".join(text.split()).lower()


def _navigate(screen: DialogScreen, focus: int, target: int) -> tuple[bytes, ...]:
    """Arrow presses from ``focus`` to ``target`` (one step each), then Enter."""
    arrow = screen.arrow("B" if target > focus else "A")
    return (arrow,) * abs(target - focus) + (ENTER,)


# ---------------------------------------------------------------- demo


def _demo(screen: DialogScreen, answer: str) -> DialogPlan:
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
        raise _refuse("the dialog's highlight is not on 'Allow once'")
    raise _refuse("no complete demo permission dialog is on screen")


# ---------------------------------------------------------------- opencode

_OC_TITLE = "△ Permission required"
# opencode-ai 1.18.33 (measured) names the middle option "Allow always"; OpenCode 2.2.7
# (Shepherd) "Always allow". Either way it is rule-creating and never the target.
_OC_LABELS = ("Allow once", ("Always allow", "Allow always"), "Reject")
_OC_BORDER = " \t┃│▌▐|"
# 1.18.33 puts a "# Shell command" header between the title and the "$ command" line;
# other headers (e.g. "← Access external directory") are other dialogs, not measured.
_OC_SHELL_HEADER = "# Shell command"


def _text_columns(cells: Sequence[Cell]) -> tuple[str, list[int]]:
    """A row's text and, for each character of it, the column of its cell."""
    chars: list[str] = []
    columns: list[int] = []
    for column, cell in enumerate(cells):
        for char in cell.char:
            chars.append(char)
            columns.append(column)
    return "".join(chars), columns


def _occurrences(line: str, label: str) -> list[int]:
    return [m.start() for m in re.finditer(re.escape(label), line)]


def _opencode_command_row(lines: Sequence[str], top: int) -> int:
    """The row of the dialog's ``$ command`` (or 2.2.7's ``→ Edit path``) line."""
    rows = [row for row in range(top + 1, len(lines)) if lines[row].strip(_OC_BORDER)]
    if not rows:
        raise _refuse("the OpenCode dialog shows no '$ command' or '→ Edit path' line")
    first = lines[rows[0]].strip(_OC_BORDER)
    if first == _OC_SHELL_HEADER:
        # Measured layout (1.18.33): header, blank row, "$ command".
        if len(rows) < 2 or not lines[rows[1]].strip(_OC_BORDER).startswith("$ "):
            raise _refuse("the OpenCode shell dialog shows no '$ command' line")
        return rows[1]
    if not first.startswith(("$ ", "→ Edit ")):
        raise _refuse("the OpenCode dialog shows no '$ command' or '→ Edit path' line")
    return rows[0]


def _opencode(screen: DialogScreen, answer: str) -> DialogPlan:
    """OpenCode's permission dialog; ``allow_once`` needs the highlight read from colours."""
    lines = screen.lines
    titles = [row for row, line in enumerate(lines) if _OC_TITLE in line]
    if len(titles) != 1:
        raise _refuse("no single OpenCode 'Permission required' dialog is on screen")
    top = titles[0]
    command_row = _opencode_command_row(lines, top)
    found: list[tuple[int, int]] = []
    shown: list[str] = []
    for choices in _OC_LABELS:
        spots = [
            (row, index, label)
            for label in ((choices,) if isinstance(choices, str) else choices)
            for row in range(top, len(lines))
            for index in _occurrences(lines[row], label)
        ]
        if len(spots) != 1:
            name = choices if isinstance(choices, str) else " / ".join(choices)
            raise _refuse(f"the OpenCode dialog does not show '{name}' exactly once")
        found.append(spots[0][:2])
        shown.append(spots[0][2])
    if found != sorted(found) or found[0][0] <= command_row:
        raise _refuse("the OpenCode dialog's options are not Allow once, Always allow, Reject")
    hint_row = next(
        (row for row in range(found[-1][0], len(lines)) if "ctrl+f" in lines[row]), None
    )
    if hint_row is None:
        raise _refuse("the OpenCode dialog shows no 'ctrl+f' hint")
    fingerprint = tuple(lines[top : hint_row + 1])
    if answer == DENY_ONCE:
        # Measured (1.18.33, live and tests/captured/opencode/permission_deny): Esc rejects,
        # the command does not run and the turn ends; Shepherd measured the same on 2.2.7.
        return DialogPlan((ESC,), fingerprint)
    allow, always, reject = (
        _label_background(screen, row, index, label)
        for (row, index), label in zip(found, shown, strict=True)
    )
    if allow == "default":
        raise _refuse("'Allow once' has the default background, so it is not highlighted")
    if always != reject or allow == always:
        raise _refuse("the highlight is not on 'Allow once' alone")
    return DialogPlan((ENTER,), fingerprint)


def _label_background(screen: DialogScreen, row: int, index: int, label: str) -> str:
    """The one background of a label's cells; refuses on reverse video or mixed colours."""
    cells = screen.cells(row)
    text, columns = _text_columns(cells)
    if text.rstrip() != screen.lines[row] or text[index : index + len(label)] != label:
        raise _refuse("the screen's text and its cells disagree")
    picked = [cells[columns[index + k]] for k in range(len(label))]
    if any(cell.reverse for cell in picked):
        raise _refuse(f"'{label}' is drawn in reverse video")
    backgrounds = {cell.bg for cell in picked}
    if len(backgrounds) != 1:
        raise _refuse(f"'{label}' has mixed backgrounds")
    return backgrounds.pop()


# ---------------------------------------------------------------- kiro

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


def _kiro(screen: DialogScreen, answer: str) -> DialogPlan:
    """Kiro's tool approval: a focus marker on a list, moved with arrows, chosen with Enter."""
    lines = screen.lines
    titles = [row for row, line in enumerate(lines) if _KIRO_TITLE.match(line)]
    if len(titles) != 1:
        raise _refuse("no single Kiro '… requires approval' dialog is on screen")
    top = titles[0]
    title = _norm(lines[top])
    if any(tool in title for tool in _KIRO_REFUSED_TOOLS):
        raise _refuse("Kiro web search approvals are not answered")
    labels: list[str] = []
    focus: list[int] = []
    row = top + 1
    while row < len(lines):
        text = lines[row].strip()
        focused = text.startswith(_KIRO_FOCUS)
        label = _norm(text.removeprefix(_KIRO_FOCUS))
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
        raise _refuse("the Kiro dialog's options are not followed by its 'esc to close' hint")
    single = labels.count(_KIRO_ALLOW) == 1 and labels.count(_KIRO_DENY) == 1
    if not single or len(set(labels)) != len(labels):
        raise _refuse("the Kiro dialog does not offer one single-permission Yes and one No")
    if len(focus) != 1:
        raise _refuse("the Kiro dialog has no single focused option")
    fingerprint = (*_context_above(lines, top), title, *labels, _norm(lines[hint_row]))
    target = labels.index(_KIRO_ALLOW if answer == ALLOW_ONCE else _KIRO_DENY)
    return DialogPlan(_navigate(screen, focus[0], target), fingerprint)


def _context_above(lines: Sequence[str], top: int) -> tuple[str, ...]:
    """The paragraph just above a dialog's title (Kiro shows the tool call there)."""
    row = top - 1
    while row >= 0 and not lines[row].strip():
        row -= 1
    context: list[str] = []
    while row >= 0 and lines[row].strip() and len(context) < _KIRO_CONTEXT_ROWS:
        context.append(_norm(lines[row]))
        row -= 1
    return tuple(reversed(context))


# ---------------------------------------------------------------- devin

_DEVIN_OPTION = re.compile(r"^\s*([❭·])\s*(\d+)\s+(\S.*?)\s*$")
_DEVIN_ALLOW = "yes (approve once)"
_DEVIN_DENY = "no"
_DEVIN_REQUEST_ROWS = 6


def _devin(screen: DialogScreen, answer: str) -> DialogPlan:
    """Devin's shell-command permission prompt: numbered options under a ``❭`` focus."""
    lines = screen.lines
    hints = [
        row
        for row, line in enumerate(lines)
        if all(word in line.lower() for word in ("select", "confirm", "esc cancel"))
    ]
    if len(hints) != 1:
        raise _refuse("no single Devin permission prompt is on screen")
    hint_row = hints[0]
    parsed: list[tuple[str, int, str]] = []
    row = hint_row - 1
    while row >= 0 and (match := _DEVIN_OPTION.match(lines[row])):
        parsed.append((match[1], int(match[2]), _norm(match[3])))
        row -= 1
    parsed.reverse()
    if [number for _, number, _ in parsed] != list(range(1, len(parsed) + 1)):
        raise _refuse("the Devin prompt's options are not numbered 1..n above its hint")
    labels = [label for _, _, label in parsed]
    focus = [index for index, (mark, _, _) in enumerate(parsed) if mark == "❭"]
    request = [_norm(lines[r]) for r in range(max(0, row - _DEVIN_REQUEST_ROWS + 1), row + 1)]
    if not any("$ " in line for line in request):
        # Shepherd measured shell-command prompts only.
        raise _refuse("the Devin prompt is not about a shell command")
    if labels.count(_DEVIN_ALLOW) != 1 or labels.count(_DEVIN_DENY) != 1:
        raise _refuse("the Devin prompt does not offer one 'Yes (Approve once)' and one 'No'")
    if len(focus) != 1:
        raise _refuse("the Devin prompt has no single focused option")
    fingerprint = (*[line for line in request if line], *labels, _norm(lines[hint_row]))
    target = labels.index(_DEVIN_ALLOW if answer == ALLOW_ONCE else _DEVIN_DENY)
    return DialogPlan(_navigate(screen, focus[0], target), fingerprint)


# ---------------------------------------------------------------- numbered menus

_MENU_OPTION = re.compile(r"^\s*(?P<focus>[❯›])?\s*(?P<number>\d+)\.\s+(?P<label>\S.*?)\s*$")


@dataclass(frozen=True)
class _Menu:
    """A numbered option list under a focus marker, as Claude Code and Codex draw it."""

    labels: tuple[str, ...]
    focus: int
    hint_row: int


def _numbered_menu(lines: Sequence[str], first: int, hint: str) -> _Menu:
    """Parse the options from row ``first`` down to the row holding ``hint``.

    A row that is not an option continues the option above it (a long label wraps). The
    options must be numbered 1..n, in order, with exactly one focus marker.
    """
    labels: list[str] = []
    numbers: list[int] = []
    focus: list[int] = []
    gap = False  # a blank row seen after the options: only the hint may follow
    for row in range(first, len(lines)):
        text = lines[row]
        if hint in _norm(text):
            if numbers != list(range(1, len(numbers) + 1)) or not labels or len(focus) != 1:
                raise _refuse("the dialog's options are not numbered 1..n with one focus")
            return _Menu(tuple(labels), focus[0], row)
        if not text.strip():
            gap = bool(labels)
            continue
        if gap or (not labels and not _MENU_OPTION.match(text)):
            raise _refuse("the dialog's option list is interrupted")
        match = _MENU_OPTION.match(text)
        if match:
            if match["focus"]:
                focus.append(len(labels))
            numbers.append(int(match["number"]))
            labels.append(_norm(match["label"]))
        else:
            labels[-1] = f"{labels[-1]} {_norm(text)}"
    raise _refuse(f"the dialog's options are not followed by its '{hint}' hint")


# ---------------------------------------------------------------- claude

_CLAUDE_TRUST_OPTIONS = ("no, exit", "yes, i trust this folder")
_CLAUDE_TRUST_HINT = "enter to confirm · esc to cancel"
_CLAUDE_QUESTION = "do you want to proceed?"
_CLAUDE_TOOL_HINT = "esc to cancel"
# Only the shell-command dialog is measured (claude-code 2.1.332 against a fake model:
# tests/captured/claude/permission_*). Edit/create dialogs have other headers: refused.
_CLAUDE_TOOL_HEADER = "bash command"
_CLAUDE_HEADER_ROWS = 12


def _claude(screen: DialogScreen, answer: str) -> DialogPlan:
    """Claude Code's folder-trust prompt and its Bash-command permission dialog."""
    questions = [row for row, line in enumerate(screen.lines) if _norm(line) == _CLAUDE_QUESTION]
    if questions:
        return _claude_tool(screen, answer, questions)
    rows = [row for row, line in enumerate(screen.lines) if line.strip()]
    texts = [_norm(screen.lines[row].strip().removeprefix("❯")) for row in rows]
    shaped = (
        len(texts) >= 4
        and texts[-1] == _CLAUDE_TRUST_HINT
        and tuple(texts[-3:-1]) == _CLAUDE_TRUST_OPTIONS
        and "accessing workspace:" in texts
    )
    if not shaped:
        raise _refuse(
            "no Claude Code folder-trust prompt or Bash-command permission dialog is on screen"
        )
    if answer == ALLOW_ONCE:
        raise _refuse("trusting a folder is rule-creating and is never selected")
    top = texts.index("accessing workspace:")
    # Measured (tests/captured/claude/startup): Esc declines and Claude Code exits.
    return DialogPlan((ESC,), tuple(texts[top:]))


def _claude_tool(screen: DialogScreen, answer: str, questions: list[int]) -> DialogPlan:
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
        raise _refuse("more than one Claude Code permission question is on screen")
    question = questions[0]
    headers = [
        row
        for row in range(max(0, question - _CLAUDE_HEADER_ROWS), question)
        if _norm(lines[row]) == _CLAUDE_TOOL_HEADER and row > 0 and "─" in lines[row - 1]
    ]
    if len(headers) != 1:
        raise _refuse("the Claude Code permission dialog is not about a Bash command")
    menu = _numbered_menu(lines, question + 1, _CLAUDE_TOOL_HINT)
    if menu.labels.count("yes") != 1 or menu.labels.count("no") != 1:
        raise _refuse("the Claude Code dialog does not offer one plain 'Yes' and one 'No'")
    body = [_norm(lines[row]) for row in range(headers[0], question + 1) if lines[row].strip()]
    fingerprint = (*body, *menu.labels, _norm(lines[menu.hint_row]))
    if answer == DENY_ONCE:
        # Measured: Esc (the dialog's own "Esc to cancel") rejects the call, the command
        # does not run and Claude ends the turn ("Interrupted by user").
        return DialogPlan((ESC,), fingerprint)
    return DialogPlan(_navigate(screen, menu.focus, menu.labels.index("yes")), fingerprint)


# ---------------------------------------------------------------- codex

_CODEX_QUESTION = "would you like to run the following command?"
_CODEX_HINT = "press enter to confirm or esc to cancel"
_CODEX_ALLOW = "yes, proceed (y)"
_CODEX_DENY = "no, and tell codex what to do differently (esc)"
_CODEX_BODY_ROWS = 12


def _codex(screen: DialogScreen, answer: str) -> DialogPlan:
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
    questions = [row for row, line in enumerate(lines) if _norm(line) == _CODEX_QUESTION]
    if len(questions) != 1:
        raise _refuse("no single Codex command approval is on screen")
    question = questions[0]
    first = next(
        (
            row
            for row in range(question + 1, min(question + _CODEX_BODY_ROWS, len(lines)))
            if _MENU_OPTION.match(lines[row])
        ),
        None,
    )
    if first is None:
        raise _refuse("the Codex approval shows no options")
    body = [_norm(lines[row]) for row in range(question, first) if lines[row].strip()]
    if not any(line.startswith("$ ") for line in body):
        raise _refuse("the Codex approval is not about a shell command")
    menu = _numbered_menu(lines, first, _CODEX_HINT)
    if menu.labels.count(_CODEX_ALLOW) != 1 or menu.labels.count(_CODEX_DENY) != 1:
        raise _refuse("the Codex approval does not offer one 'Yes, proceed' and one 'No'")
    fingerprint = (*body, *menu.labels, _norm(lines[menu.hint_row]))
    if answer == DENY_ONCE:
        # Measured: Esc is the "No, and tell Codex what to do differently (esc)" option;
        # the command does not run and the turn ends.
        return DialogPlan((ESC,), fingerprint)
    return DialogPlan(_navigate(screen, menu.focus, menu.labels.index(_CODEX_ALLOW)), fingerprint)


# ---------------------------------------------------------------- gemini and qwen

# A numbered option under Gemini's "●" or Qwen's "›" focus marker.
_RADIO_OPTION = re.compile(r"^(?P<focus>[●›])?\s*(?P<number>\d+)\.\s+(?P<label>\S.*?)$")
_BOX_SIDES = "│ "
_BLANK_BOX_ROW = re.compile(r"^\s*│\s*│\s*$")


def _unboxed(line: str) -> str:
    """A row of a box-drawn dialog without the outer box's side borders, normalised."""
    text = line.strip()
    if text.startswith("│") and text.endswith("│") and len(text) > 1:
        text = text[1:-1]
    return _norm(text.strip(_BOX_SIDES))


@dataclass(frozen=True)
class _Radio:
    """Numbered options 1..n with exactly one focus, and the row just after them."""

    labels: tuple[str, ...]
    focus: int
    end_row: int


def _radio_options(rows: Sequence[str], first: int) -> _Radio:
    """Parse numbered options from ``first`` (blank rows before them are skipped).

    ``rows`` are already normalised (:func:`_unboxed`); the options end at the first
    row that is not one, which is returned as ``end_row`` for the caller to check.
    """
    row = first
    while row < len(rows) and not rows[row]:
        row += 1
    labels: list[str] = []
    numbers: list[int] = []
    focus: list[int] = []
    while row < len(rows) and (match := _RADIO_OPTION.match(rows[row])):
        if match["focus"]:
            focus.append(len(labels))
        numbers.append(int(match["number"]))
        labels.append(match["label"])
        row += 1
    if not labels or numbers != list(range(1, len(labels) + 1)) or len(focus) != 1:
        raise _refuse("the dialog's options are not numbered 1..n with one focus")
    return _Radio(tuple(labels), focus[0], row)


_GEMINI_QUESTION = "allow execution of [shell]?"
_GEMINI_HEADER = "? shell "
_GEMINI_ALLOW = "allow once"
_GEMINI_DENY = "no, suggest changes (esc)"
# "Allow for this session" remembers the approval until Gemini exits: never the target.
_GEMINI_OPTIONS = frozenset({_GEMINI_ALLOW, "allow for this session", _GEMINI_DENY})
_GEMINI_TRUST_QUESTION = "do you trust the files in this folder?"
_GEMINI_TRUST_OPTIONS = ("trust folder (", "trust parent folder (", "don't trust")
_GEMINI_BODY_ROWS = 16


def _gemini(screen: DialogScreen, answer: str) -> DialogPlan:
    """Gemini CLI's shell-command confirmation and its folder-trust prompt."""
    rows = [_unboxed(line) for line in screen.lines]
    trust = [row for row, text in enumerate(rows) if text == _GEMINI_TRUST_QUESTION]
    if trust:
        return _gemini_trust(screen, rows, trust, answer)
    questions = [row for row, text in enumerate(rows) if text == _GEMINI_QUESTION]
    if len(questions) != 1:
        raise _refuse("no single Gemini CLI shell-command confirmation is on screen")
    question = questions[0]
    headers = [
        row
        for row in range(max(0, question - _GEMINI_BODY_ROWS), question)
        if rows[row].startswith(_GEMINI_HEADER)
    ]
    if len(headers) != 1:
        raise _refuse("the Gemini CLI confirmation is not about a shell command")
    radio = _radio_options(rows, question + 1)
    _gemini_check_closed(screen, radio.end_row)
    if not set(radio.labels) <= _GEMINI_OPTIONS or len(set(radio.labels)) != len(radio.labels):
        raise _refuse("the Gemini CLI confirmation offers options that were never measured")
    if _GEMINI_ALLOW not in radio.labels or _GEMINI_DENY not in radio.labels:
        raise _refuse("the Gemini CLI confirmation does not offer 'Allow once' and 'No'")
    body = [rows[row] for row in range(headers[0], question + 1) if rows[row]]
    fingerprint = (*body, *radio.labels)
    if answer == DENY_ONCE:
        # Measured (0.61.0, tests/captured/gemini/permission_deny and live): Esc is the
        # "No, suggest changes (esc)" option; the command does not run ("Request
        # cancelled.") and no further model call is made.
        return DialogPlan((ESC,), fingerprint)
    target = radio.labels.index(_GEMINI_ALLOW)
    return DialogPlan(_navigate(screen, radio.focus, target), fingerprint)


def _gemini_check_closed(screen: DialogScreen, row: int) -> None:
    """The options must be followed by the dialog box's bottom border (blank rows inside
    the box allowed): the whole dialog is on screen."""
    lines = screen.lines
    while row < len(lines) and _BLANK_BOX_ROW.match(lines[row]):
        row += 1
    if row >= len(lines) or not lines[row].lstrip().startswith("╰"):
        raise _refuse("the Gemini CLI dialog is not complete on screen")


def _gemini_trust(
    screen: DialogScreen, rows: Sequence[str], questions: list[int], answer: str
) -> DialogPlan:
    """The folder-trust prompt (0.61.0): ``● 1. Trust folder (<dir>)``,
    ``2. Trust parent folder (<dir>)``, ``3. Don't trust``, inside a box."""
    if len(questions) != 1:
        raise _refuse("more than one Gemini CLI folder-trust prompt is on screen")
    radio = _radio_options(rows, _first_option_row(rows, questions[0] + 1))
    _gemini_check_closed(screen, radio.end_row)
    shaped = len(radio.labels) == len(_GEMINI_TRUST_OPTIONS) and all(
        label.startswith(prefix)
        for label, prefix in zip(radio.labels, _GEMINI_TRUST_OPTIONS, strict=True)
    )
    if not shaped:
        raise _refuse("the Gemini CLI folder-trust prompt does not show its three options")
    if answer == ALLOW_ONCE:
        raise _refuse("trusting a folder is saved for good and is never selected")
    # Measured (0.61.0, live): Esc ends Gemini CLI ("A folder trust level must be selected
    # to continue. Exiting since escape was pressed.") and saves nothing. "3. Don't trust"
    # would be saved in trustedFolders.json: never pressed.
    return DialogPlan((ESC,), (rows[questions[0]], *radio.labels))


def _first_option_row(rows: Sequence[str], row: int) -> int:
    """The first numbered option at or below ``row`` (past the trust prompt's text)."""
    while row < len(rows) and not _RADIO_OPTION.match(rows[row]):
        row += 1
    return row


_QWEN_QUESTION = re.compile(r"^allow execution of: '.+'\?$")
_QWEN_HEADER = "? shell "
_QWEN_ALLOW = "yes, allow once"
_QWEN_DENY = "no, suggest changes (esc)"
# "Always allow …" options write permanent rules (project or user settings).
_QWEN_RULE_PREFIX = "always allow "
_QWEN_WAITING = "waiting for user confirmation..."
_QWEN_BODY_ROWS = 8
_QWEN_TRUST_QUESTION = "do you trust this folder?"


def _qwen(screen: DialogScreen, answer: str) -> DialogPlan:
    """Qwen Code's shell-command confirmation (0.24.4, measured against a fake model)::

    ? Shell <command> (<description>) ←
       <command>
     Allow execution of: '<root command>'?
     › 1. Yes, allow once
       2. Always allow run '<root> *' commands in this project
       3. Always allow run '<root> *' commands for this user
       4. No, suggest changes (esc)
    ⠏ Waiting for user confirmation...
    """
    rows = [_norm(line) for line in screen.lines]
    if any(_unboxed(line) == _QWEN_TRUST_QUESTION for line in screen.lines):
        # Measured (0.24.4 with security.folderTrust.enabled): both "Trust folder" and
        # "Don't trust (esc)" are saved in trustedFolders.json.
        raise _refuse("every answer to Qwen Code's folder-trust prompt is saved for good")
    questions = [row for row, text in enumerate(rows) if _QWEN_QUESTION.match(text)]
    if len(questions) != 1:
        raise _refuse("no single Qwen Code shell-command confirmation is on screen")
    question = questions[0]
    headers = [
        row
        for row in range(max(0, question - _QWEN_BODY_ROWS), question)
        if rows[row].startswith(_QWEN_HEADER)
    ]
    if len(headers) != 1:
        raise _refuse("the Qwen Code confirmation is not about a shell command")
    radio = _radio_options(rows, question + 1)
    tail = next((row for row in range(radio.end_row, len(rows)) if rows[row]), None)
    if tail is None or not rows[tail].endswith(_QWEN_WAITING):
        raise _refuse("the Qwen Code dialog is not complete on screen")
    known = all(
        label in (_QWEN_ALLOW, _QWEN_DENY) or label.startswith(_QWEN_RULE_PREFIX)
        for label in radio.labels
    )
    if not known or radio.labels.count(_QWEN_ALLOW) != 1 or radio.labels.count(_QWEN_DENY) != 1:
        raise _refuse("the Qwen Code confirmation does not offer one 'Yes, allow once', one 'No'")
    body = [rows[row] for row in range(headers[0], question + 1) if rows[row]]
    fingerprint = (*body, *radio.labels)
    if answer == DENY_ONCE:
        # Measured (0.24.4, tests/captured/qwen/permission_deny and live): Esc is the
        # "No, suggest changes (esc)" option; nothing runs and no further model call.
        return DialogPlan((ESC,), fingerprint)
    target = radio.labels.index(_QWEN_ALLOW)
    return DialogPlan(_navigate(screen, radio.focus, target), fingerprint)


def _unmeasured(screen: DialogScreen, answer: str) -> DialogPlan:
    raise _refuse("this pane's agent kind has no measured dialog recogniser")


def has_recogniser(agent: str) -> bool:
    """False for agent kinds whose dialogs are never answered (generic, unmeasured)."""
    return recogniser_for(agent) is not _unmeasured


def recogniser_for(agent: str) -> Recogniser:
    """The recogniser for an agent kind; other kinds (generic, …) always refuse."""
    match agent:
        case "demo":
            return _demo
        case "opencode":
            return _opencode
        case "kiro":
            return _kiro
        case "devin":
            return _devin
        case "claude":
            return _claude
        case "codex":
            return _codex
        case "gemini":
            return _gemini
        case "qwen":
            return _qwen
        case _:
            return _unmeasured
