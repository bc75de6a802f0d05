"""What every dialog recogniser is built from: the screen it sees, the plan it returns.

A recogniser (one per agent kind, in its spec module under ``protocol.agents.kinds``)
sees the whole visible screen (text, and styled cells where the highlight is a colour)
and returns the exact bytes that answer ``allow_once`` or ``deny_once``, or refuses with
``dialog_unrecognized``. It never plans a rule-creating option ("always allow", "allow
for this session", "trust", "don't ask again", Devin's bypass): those labels are never
the target of a plan and Enter is only planned while the focus is on the target.

A plan is one or more *steps*; each step's bytes are written in a loop step of their
own. When a plan has several steps (arrows, then Enter), the worker re-runs the
recogniser on the fresh screen before each later step and refuses with
``dialog_changed`` unless the dialog's fingerprint is unchanged and the focus moved as
planned. The fingerprint leaves out the focus marker, so moving the focus does not
change it; any other change (another command, other options) does.

Pure functions over text: the worker builds a :class:`DialogScreen` from its terminal.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from protocol.errors import ErrorCode, PanewardenError


class StyledCell(Protocol):
    """One screen cell as a recogniser compares it (the worker's cells have more).

    Colours: ``"default"``, an ANSI colour name, or six hex digits.
    """

    @property
    def char(self) -> str: ...

    @property
    def bg(self) -> str: ...

    @property
    def reverse(self) -> bool: ...


ENTER = b"\r"
ESC = b"\x1b"

ALLOW_ONCE = "allow_once"
DENY_ONCE = "deny_once"


@dataclass(frozen=True)
class DialogScreen:
    """What a recogniser may look at: the visible rows and their styled cells."""

    lines: tuple[str, ...]
    cell_rows: Callable[[int], Sequence[StyledCell]]
    application_cursor_keys: bool = False

    def cells(self, row: int) -> Sequence[StyledCell]:
        """Styled cells of a visible row (a wide character's second cell is ``""``)."""
        return self.cell_rows(row)

    def arrow(self, direction: str) -> bytes:
        """The bytes of an arrow key (``A`` up, ``B`` down) in the program's cursor-key mode."""
        return (b"\x1bO" if self.application_cursor_keys else b"\x1b[") + direction.encode()


@dataclass(frozen=True)
class DialogPlan:
    """The keys to press, one loop step per entry, and the dialog they were planned on.

    ``follow_up``: a recogniser of the question the program asks next, in the same turn,
    as part of the same choice (Aider's "Add command output to the chat?" after a command
    it was allowed to run). The worker answers it with the same answer when it shows,
    while the turn lasts; None: the answer ends with the last step.
    """

    steps: tuple[bytes, ...]
    fingerprint: tuple[str, ...]
    follow_up: Recogniser | None = None

    def __post_init__(self) -> None:
        if not self.steps or not all(self.steps):
            raise ValueError("a plan has at least one step and no empty step")

    @property
    def keys(self) -> bytes:
        """The bytes of the first step."""
        return self.steps[0]


Recogniser = Callable[[DialogScreen, str], DialogPlan]


def refuse(message: str) -> PanewardenError:
    """The ``dialog_unrecognized`` error a recogniser raises: nothing is pressed."""
    return PanewardenError(ErrorCode.DIALOG_UNRECOGNIZED, message + "; nothing was sent")


def refuse_answer(message: str) -> PanewardenError:
    """The ``dialog_refused`` error: the dialog is recognised, but this answer would change
    the program's configuration or trust for good, so it is never pressed."""
    return PanewardenError(ErrorCode.DIALOG_REFUSED, message + "; nothing was sent")


def norm(text: str) -> str:
    """Lower-cased with runs of whitespace collapsed, for comparing labels."""
    return " ".join(text.split()).lower()


def navigate(screen: DialogScreen, focus: int, target: int) -> tuple[bytes, ...]:
    """Arrow presses from ``focus`` to ``target`` (one step each), then Enter."""
    arrow = screen.arrow("B" if target > focus else "A")
    return (arrow,) * abs(target - focus) + (ENTER,)


def text_columns(cells: Sequence[StyledCell]) -> tuple[str, list[int]]:
    """A row's text and, for each character of it, the column of its cell."""
    chars: list[str] = []
    columns: list[int] = []
    for column, cell in enumerate(cells):
        for char in cell.char:
            chars.append(char)
            columns.append(column)
    return "".join(chars), columns


def occurrences(line: str, label: str) -> list[int]:
    return [m.start() for m in re.finditer(re.escape(label), line)]


# ------------------------------------------------ numbered menus (Claude Code, Codex)

MENU_OPTION = re.compile(r"^\s*(?P<focus>[❯›])?\s*(?P<number>\d+)\.\s+(?P<label>\S.*?)\s*$")


@dataclass(frozen=True)
class Menu:
    """A numbered option list under a focus marker, as Claude Code and Codex draw it."""

    labels: tuple[str, ...]
    focus: int
    hint_row: int


def numbered_menu(lines: Sequence[str], first: int, hint: str) -> Menu:
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
        if hint in norm(text):
            if numbers != list(range(1, len(numbers) + 1)) or not labels or len(focus) != 1:
                raise refuse("the dialog's options are not numbered 1..n with one focus")
            return Menu(tuple(labels), focus[0], row)
        if not text.strip():
            gap = bool(labels)
            continue
        if gap or (not labels and not MENU_OPTION.match(text)):
            raise refuse("the dialog's option list is interrupted")
        match = MENU_OPTION.match(text)
        if match:
            if match["focus"]:
                focus.append(len(labels))
            numbers.append(int(match["number"]))
            labels.append(norm(match["label"]))
        else:
            labels[-1] = f"{labels[-1]} {norm(text)}"
    raise refuse(f"the dialog's options are not followed by its '{hint}' hint")


# ------------------------------------------ radio options in boxes (Gemini CLI, Qwen Code)

# A numbered option under Gemini's "●" or Qwen's "›" focus marker.
RADIO_OPTION = re.compile(r"^(?P<focus>[●›])?\s*(?P<number>\d+)\.\s+(?P<label>\S.*?)$")
BOX_SIDES = "│ "
BLANK_BOX_ROW = re.compile(r"^\s*│\s*│\s*$")


def unboxed(line: str) -> str:
    """A row of a box-drawn dialog without the outer box's side borders, normalised."""
    text = line.strip()
    if text.startswith("│") and text.endswith("│") and len(text) > 1:
        text = text[1:-1]
    return norm(text.strip(BOX_SIDES))


@dataclass(frozen=True)
class Radio:
    """Numbered options 1..n with exactly one focus, and the row just after them."""

    labels: tuple[str, ...]
    focus: int
    end_row: int


def radio_options(rows: Sequence[str], first: int) -> Radio:
    """Parse numbered options from ``first`` (blank rows before them are skipped).

    ``rows`` are already normalised (:func:`unboxed`); the options end at the first
    row that is not one, which is returned as ``end_row`` for the caller to check.
    """
    row = first
    while row < len(rows) and not rows[row]:
        row += 1
    labels: list[str] = []
    numbers: list[int] = []
    focus: list[int] = []
    while row < len(rows) and (match := RADIO_OPTION.match(rows[row])):
        if match["focus"]:
            focus.append(len(labels))
        numbers.append(int(match["number"]))
        labels.append(match["label"])
        row += 1
    if not labels or numbers != list(range(1, len(labels) + 1)) or len(focus) != 1:
        raise refuse("the dialog's options are not numbered 1..n with one focus")
    return Radio(tuple(labels), focus[0], row)
