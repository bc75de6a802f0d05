"""``terminal_safe``: what a remote string keeps on its way to a terminal, and the
screen feed's lines cleaned by it whatever the backend drew."""

from __future__ import annotations

import pytest

from protocol.messages import ScreenFrame
from protocol.terminal_text import terminal_safe
from supervisor.front.feed.events import screen_event

CASES = [
    ("a\x1b]52;c;aGk=\x07b", "ab"),  # OSC 52, BEL-ended
    ("a\x1b]0;title\x1b\\b", "ab"),  # OSC 0, ST-ended
    ("a\x1bP+q544e\x1b\\b", "ab"),  # DCS
    ("a\x1b_apc\x1b\\b\x1b^pm\x1b\\\x1bXsos\x1b\\", "ab"),  # APC, PM, SOS
    ("a\x9b2Jb\x9d0;t\x9cc\x90dcs\x9c", "abc"),  # C1 CSI, OSC, DCS
    ("a\x1b[2J\x1b[?1049hb\x1b7\x1bc", "ab"),  # CSI and two-byte ESC
    ("a\x1b]0;never ended", "a"),  # an unterminated string sequence runs to the end
    ("\u202eab\u2066c\u2067\u2068\u2069\u200e\u200f\u061c\u2028\u2029d", "abcd"),
    ("a\x00\x07\x08\x7f\x85b", "ab"),
    ("tab\tnew\nline\r", "tab new line"),
    ("héllo — 漢字 ✓", "héllo — 漢字 ✓"),
]


@pytest.mark.parametrize(("raw", "shown"), CASES)
def test_terminal_safe_drops_every_control(raw: str, shown: str) -> None:
    assert terminal_safe(raw) == shown


def test_newlines_and_colours_are_kept_only_when_asked() -> None:
    raw = "\x1b[1;31mred\x1b[0m\tx\ny\x1b]8;;http://x\x1b\\link\x1b[2K"
    assert terminal_safe(raw) == "red x y" + "link"
    kept = terminal_safe(raw, newlines=True, keep_sgr=True)
    assert kept == "\x1b[1;31mred\x1b[0m\tx\nylink"


def test_a_value_of_another_type_is_text() -> None:
    assert terminal_safe(12) == "12"
    assert "\x1b" not in terminal_safe(["\x1b]0;x\x07", 1])


def test_the_screen_feed_lines_are_cleaned_whatever_the_backend_drew() -> None:
    frame = ScreenFrame(
        frame=1,
        cols=20,
        rows=2,
        cursor=(0, 0),
        lines=["\x1b[31mab\u202ecd\x1b[0m", "x\u2028y\x1b]52;c;aGk=\x07"],
    )
    assert screen_event("p", frame)["lines"] == ["\x1b[31mabcd\x1b[0m", "xy"]
