"""A turn's output is what the screen changed after its prompt was typed: on each
emulator backend, for a line-oriented program, one that scrolls, an Ink-style TUI that
erases and redraws its input box on submit, and a scrollback that no longer lines up."""

from __future__ import annotations

import pytest

from paneworker.screen.state import ScreenState
from paneworker.status.screen_rules import RuleSet
from protocol import PROTOCOL_VERSION
from protocol.boot import BootRecord, PaneLaunch
from tests.paneworker.emulators import ALL

pytestmark = pytest.mark.timeout(60)

ROWS = 8


def _screen(emulator: str) -> ScreenState:
    boot = BootRecord(
        protocol_version=PROTOCOL_VERSION,
        instance="i",
        secret=b"s",
        endpoint="ipc:///nonexistent",
        launch=PaneLaunch(
            pane="t",
            agent="generic",
            argv=["true"],
            cwd="/",
            env={},
            cols=40,
            rows=ROWS,
            emulator=emulator,
        ),
    )
    return ScreenState(boot, lambda _msg: None, rules=RuleSet("none", 1, (), "test"))


@pytest.mark.parametrize("emulator", ALL)
def test_a_line_oriented_turn_starts_at_its_prompt_line(emulator: str) -> None:
    screen = _screen(emulator)
    screen.feed(b"banner\r\n> ")
    screen.mark_input(1)
    screen.feed(b"first\r\nreply: first\r\n> ")
    screen.mark_input(2)
    screen.feed(b"second\r\nreply: second\r\n> ")
    assert screen.turn_text(2, None) == "> second\nreply: second\n>"
    # The first turn's mark still lines up: its output runs to the end of the screen.
    assert screen.turn_text(1, None) == "> first\nreply: first\n> second\nreply: second\n>"
    assert screen.turn_text(2, 2) == "reply: second\n>"
    assert screen.turn_text(3, None) is None  # no input was typed at cursor 3


@pytest.mark.parametrize("emulator", ALL)
def test_a_turn_that_scrolled_keeps_its_lines_from_the_scrollback(emulator: str) -> None:
    screen = _screen(emulator)
    screen.feed(b"".join(b"old %d\r\n" % i for i in range(12)) + b"> ")
    screen.mark_input(5)
    screen.feed(b"go\r\n" + b"".join(b"line %d\r\n" % i for i in range(20)) + b"> ")
    lines = screen.turn_text(5, None)
    assert lines is not None
    assert lines.splitlines() == ["> go", *(f"line {i}" for i in range(20)), ">"]


@pytest.mark.parametrize("emulator", ALL)
def test_a_tui_that_redraws_its_input_box_gives_the_rows_it_rewrote(emulator: str) -> None:
    screen = _screen(emulator)
    box = "╭──────╮\r\n│ >    │\r\n╰──────╯".encode()
    screen.feed(b"earlier answer\r\n" + box + b"\x1b[2A\x1b[5G")  # cursor in the box
    screen.mark_input(9)
    screen.feed("│ > hi │".encode().join([b"\r", b""]))  # the typed text, in the box
    # Submit: erase the box (up one, three erased lines, as Ink does), write the
    # transcript where the box was, then a fresh box below it.
    screen.feed(b"\x1b[1A" + b"\x1b[2K\x1b[1B" * 3 + b"\x1b[3A\r")
    screen.feed(b"> hi\r\nhello there\r\n" + box)
    text = screen.turn_text(9, None)
    assert text is not None
    assert text.splitlines()[:2] == ["> hi", "hello there"], text
    assert "earlier answer" not in text


@pytest.mark.parametrize("emulator", ALL)
def test_no_safe_cut_once_the_scrollback_was_cleared_or_trimmed(emulator: str) -> None:
    screen = _screen(emulator)
    screen.feed(b"".join(b"old %d\r\n" % i for i in range(12)) + b"> ")
    screen.mark_input(1)
    screen.feed(b"x\r\n\x1b[3J\x1b[2J\x1b[Hfresh\r\n")  # the program cleared its scrollback
    assert screen.turn_text(1, None) is None
    # Unchanged since the mark: nothing new, an empty output.
    screen.mark_input(2)
    assert screen.turn_text(2, None) == ""


@pytest.mark.parametrize("emulator", ALL)
def test_no_safe_cut_once_the_scrollback_was_trimmed_at_its_bound(emulator: str) -> None:
    screen = _screen(emulator)
    screen.feed(b"".join(b"old %d\r\n" % i for i in range(12)) + b"> ")
    screen.mark_input(1)
    screen.feed(b"".join(b"new %d\r\n" % i for i in range(5200)))  # past the 5,000 kept
    assert screen.turn_text(1, None) is None


@pytest.mark.parametrize("emulator", ALL)
def test_a_transcript_drawn_again_after_clearing_is_found_by_its_content(
    emulator: str,
) -> None:
    # Claude Code on submit: clear the scrollback and the screen, draw the whole
    # transcript again (now one prompt longer), then the input box.
    screen = _screen(emulator)
    transcript = b"".join(b"turn %d\r\n" % i for i in range(10))
    screen.feed(transcript + b"-----\r\n> ")
    screen.mark_input(4)
    screen.feed(b"\x1b[3J\x1b[2J\x1b[H" + transcript + b"> again\r\nanswer\r\n-----\r\n> ")
    assert screen.turn_text(4, None) == "> again\nanswer\n-----\n>"


@pytest.mark.parametrize("emulator", ALL)
def test_a_banner_repainted_above_the_turn_is_not_part_of_it(emulator: str) -> None:
    # Claude Code's banner logo animates after start-up (for longer on a loaded machine):
    # its row differs from the mark although the turn never touched it. The turn starts
    # at its prompt's echo, below it.
    screen = _screen(emulator)
    screen.feed(b"logo A\r\n> SAY: first\r\nfirst\r\n> ")
    screen.mark_input(3, "SAY: second one")
    screen.feed(b"\x1b[s\x1b[1;1Hlogo B\x1b[u")  # the logo's next frame
    screen.feed(b"SAY: second one\r\nsecond\r\n> ")
    assert screen.turn_text(3, None) == "> SAY: second one\nsecond\n>"
    # A prompt too short to be told from other text keeps the first difference.
    screen.mark_input(4, "y")
    screen.feed(b"\x1b[s\x1b[1;1Hlogo C\x1b[u")
    screen.feed(b"y\r\nyes\r\n> ")
    text = screen.turn_text(4, None)
    assert text is not None and text.startswith("logo C\n"), text


@pytest.mark.parametrize("emulator", ALL)
def test_the_echo_is_looked_for_only_below_the_first_difference(emulator: str) -> None:
    # The same prompt twice: the second turn's output starts at its own echo, not at the
    # first turn's (above the first difference).
    screen = _screen(emulator)
    screen.feed(b"> ")
    screen.mark_input(1, "SAY: again")
    screen.feed(b"SAY: again\r\nagain\r\n> ")
    screen.mark_input(2, "SAY: again")
    screen.feed(b"SAY: again\r\nagain 2\r\n> ")
    assert screen.turn_text(2, None) == "> SAY: again\nagain 2\n>"
