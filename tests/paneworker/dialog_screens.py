"""Dialog screens for the recogniser and answer tests: builders of synthetic dialogs,
recorded CLI dialogs, and a recogniser lookup that refuses as the worker does.

The recognisers are fed screens built from real bytes through the pane terminal
(OpenCode's highlight from SGR streams, palette ``48;5;N`` and truecolor ``48;2;r;g;b``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from paneworker.requests.dialog_answering import (
    dialog_screen,
)
from paneworker.screen.terminal import Terminal
from protocol.agents.dialog_kit import DialogPlan, DialogScreen, Recogniser, refuse
from protocol.agents.table import SPECS
from protocol.errors import PanewardenError
from tests.paneworker.emulators import EMULATOR

CAPTURED = Path(__file__).resolve().parent.parent / "captured"
SCREENS = Path(__file__).resolve().parent / "screens"

ENTER, ESC, UP, DOWN = b"\r", b"\x1b", b"\x1b[A", b"\x1b[B"
BLOCKED = "\x1b]7501;state=blocked:kind=permission\x1b\\"
HOME = "\x1b[H\x1b[2J"


def terminal_with(data: str | bytes, cols: int = 100, rows: int = 30) -> Terminal:
    term = Terminal(cols, rows, reply=lambda _d: None, on_report=lambda _r: None, emulator=EMULATOR)
    term.feed(data.encode() if isinstance(data, str) else data)
    return term


def recogniser_for(agent: str) -> Recogniser:
    """The kind's recogniser; for a kind whose dialogs are never answered (or a name that
    is no kind), one that refuses, as the worker does."""
    spec = SPECS.get(agent)
    if spec is not None and spec.dialogs is not None:
        return spec.dialogs

    def never(screen: DialogScreen, answer: str) -> DialogPlan:
        raise refuse(f"dialogs of {agent!r} are never answered")

    return never


def plan(agent: str, data: str | bytes, answer: str) -> DialogPlan:
    return recogniser_for(agent)(dialog_screen(terminal_with(data)), answer)


def refusal(agent: str, data: str | bytes, answer: str, code: str = "dialog_unrecognized") -> str:
    with pytest.raises(PanewardenError) as caught:
        plan(agent, data, answer)
    assert caught.value.code.value == code
    return caught.value.message


def crlf(text: str) -> str:
    return text.replace("\n", "\r\n")


# -- screens --------------------------------------------------------------------------


def palette(index: int) -> str:
    return f"\x1b[48;5;{index}m"


def truecolor(r: int, g: int, b: int) -> str:
    return f"\x1b[48;2;{r};{g};{b}m"


def button(label: str, style: str) -> str:
    return f"{style} {label} \x1b[0m"


def opencode_dialog(
    allow: str = palette(33),
    always: str = palette(236),
    reject: str = palette(236),
    *,
    command: str = "$ rm -rf build",
    hint: str = "ctrl+f fullscreen  ⇆ select  enter confirm",
    labels: tuple[str, str, str] = ("Allow once", "Always allow", "Reject"),
) -> str:
    """An OpenCode-style permission dialog; each label's background is its style."""
    first, second, third = labels
    buttons = f"{button(first, allow)}  {button(second, always)}  {button(third, reject)}"
    return crlf(
        f"{HOME}  ┃  hello, please clean the build dir\n"
        "     ▣  Build · Big Pickle\n\n"
        "  ┃  △ Permission required\n"
        f"  ┃  {command}\n"
        "  ┃\n"
        f"  ┃  {buttons}          {hint}\n"
    )


def kiro_dialog(focus: int = 0, command: str = "pwd", options: int = 3) -> str:
    labels = ["Yes, single permission", "Trust, always allow in this session", "No (Tab to edit)"]
    if options == 2:
        labels = [labels[0], labels[2]]
    rows = [(" ❯ " if i == focus else "   ") + label for i, label in enumerate(labels)]
    return crlf(
        f"{HOME}> show me where I am\n\n↓ Shell {command}\n\n shell requires approval\n"
        + "\n".join(rows)
        + "\n"
        + "─" * 60
        + "\nESC to close · ↑↓ to navigate · ↵ to select · Tab to edit\n"
    )


DEVIN_OPTIONS = (
    "Yes  (Approve once)",
    "Yes, allow `sleep` commands",
    "Yes, always allow `sleep` commands",
    "No",
)


def devin_dialog(
    focus: int = 0, command: str = "$ sleep 30", options: tuple[str, ...] = DEVIN_OPTIONS
) -> str:
    rows = [f"{'❭' if i == focus else '·'} {i + 1} {label}" for i, label in enumerate(options)]
    return crlf(
        f"{HOME}❭ wait half a minute\n\n⏺ Running command\n  └ {command}\n\n"
        + "\n".join(rows)
        + "\n↑↓ select · ↵ confirm · esc cancel\n"
    )


def claude_at(offset: int, scenario: str = "trusted") -> bytes:
    return (CAPTURED / "claude" / f"{scenario}.bin").read_bytes()[:offset]


DEMO_DIALOG = crlf((SCREENS / "demo" / "dialog.txt").read_text())
# Claude Code 2.1.332's start-up offer, copied from a live pane.
CLAUDE_OFFER = crlf((SCREENS / "claude" / "fullscreen_offer.txt").read_text())
CLAUDE_AUTO_OFFER = crlf((SCREENS / "claude" / "auto_mode_offer.txt").read_text())


def recorded_at(cli: str, scenario: str, offset: int) -> bytes:
    return (CAPTURED / cli / f"{scenario}.bin").read_bytes()[:offset]


REV = "\x1b[7m"
OC_REFUSED = {
    "all-equal": opencode_dialog(palette(236), palette(236), palette(236)),
    "highlight-on-always": opencode_dialog(palette(236), palette(33), palette(236)),
    "highlight-on-reject": opencode_dialog(palette(236), palette(236), palette(33)),
    "others-differ": opencode_dialog(palette(33), palette(236), palette(237)),
    "default-on-allow": opencode_dialog("\x1b[0m", palette(236), palette(236)),
    "reverse-on-allow": opencode_dialog(REV + palette(33), palette(236), palette(236)),
    "reverse-on-reject": opencode_dialog(palette(33), palette(236), REV + palette(236)),
    "reverse-only": opencode_dialog(REV, "\x1b[0m", "\x1b[0m"),
    "mixed-within-allow": opencode_dialog(palette(33), palette(236), palette(236)).replace(
        "Allow once", f"Allow{palette(34)} once"
    ),
    "same-value-truecolor-and-palette": opencode_dialog(
        truecolor(0x26, 0x26, 0x26), palette(235), palette(235)
    ),
}


def refocus(data: bytes, old: str, new: str, shown: bytes | None = None) -> bytes:
    """``data`` plus bytes that rewrite the one row starting with ``old`` as ``new``
    (the row looked for on the screen ``shown`` draws, ``data``'s by default)."""
    lines = terminal_with(data if shown is None else shown, 120, 40).display_lines()
    (row,) = [r for r, line in enumerate(lines) if line.startswith(old)]
    return data + f"\x1b[{row + 1};1H\x1b[2K{new}".encode()
