"""Combining marks are bounded per cell, and zero-width characters without a glyph are
dropped, the same on both emulator backends (paneworker/screen/emulator/zero_width.py)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client

from paneworker.screen.emulator.zero_width import MAX_MARKS
from paneworker.screen.terminal import Terminal
from tests.conftest import Tools, stdio_params
from tests.paneworker.emulators import ALL


def _terminal(emulator: str) -> Terminal:
    return Terminal(
        80,
        24,
        reply=lambda _data: None,
        on_report=lambda _report: None,
        history_lines=100,
        emulator=emulator,
    )


@pytest.mark.parametrize("emulator", ALL)
def test_a_flood_of_marks_costs_what_as_much_plain_text_does(emulator: str) -> None:
    flood = ("a" + "\u0301" * 40_000 + "\r\nafter\r\n").encode()  # 80 KB
    term = _terminal(emulator)
    started = time.monotonic()
    term.feed(flood)
    lines = term.display_lines()
    took = time.monotonic() - started
    assert took < 1.0, f"{emulator}: {took:.2f} s for 40,000 marks"
    assert lines[0] == "\u00e1" + "\u0301" * MAX_MARKS, (emulator, len(lines[0]))
    assert lines[1] == "after"
    # pyte counts each mark it drops; ghostty keeps at most 64 code points in a cell
    # itself, and the cut of the rest to MAX_MARKS is counted when the text is read.
    wanted = 40_000 - 1 - MAX_MARKS if emulator == "pyte" else 1
    assert term.dropped_marks >= wanted, term.dropped_marks


@pytest.mark.parametrize("emulator", ALL)
def test_marks_on_a_base_without_a_composed_form_are_cut_alike(emulator: str) -> None:
    term = _terminal(emulator)
    term.feed(("x" + "\u0323" * 40 + " ok").encode())
    assert term.display_lines()[0] == "x" + "\u0323" * MAX_MARKS + " ok", emulator


@pytest.mark.parametrize("emulator", ALL)
@pytest.mark.parametrize(
    "char", ["\u202e", "\u202a", "\u2066", "\u2067", "\u2068", "\u2069", "\u2028", "\u2029"]
)
def test_bidi_controls_and_line_separators_never_reach_the_text(emulator: str, char: str) -> None:
    term = _terminal(emulator)
    term.feed(f"left{char}right\r\nnext".encode())
    assert term.display_lines()[:2] == ["leftright", "next"], (emulator, hex(ord(char)))
    # The screen feed and the viewers draw the styled lines: the same there.
    styled = term.styled_lines()
    assert char not in "".join(styled), (emulator, styled[:2])
    assert "leftright" in styled[0], styled[0]


@pytest.mark.parametrize("emulator", ALL)
def test_the_styled_lines_cut_marks_alike(emulator: str) -> None:
    term = _terminal(emulator)
    term.feed(("x" + "\u0323" * 100).encode())
    assert "x" + "\u0323" * MAX_MARKS + "\u0323" not in term.styled_lines()[0], emulator
    assert "x" + "\u0323" * MAX_MARKS in term.styled_lines()[0], emulator


FLOOD = (
    "import sys, time; sys.stdout.write('a' + '\\u0301' * 40000 + '\\nafter the marks\\n');"
    " sys.stdout.flush(); time.sleep(60)"
)
ACP_AGENT = str(Path(__file__).parent.parent / "acp" / "fake_acp_agent.py")


@pytest.mark.anyio
@pytest.mark.parametrize("emulator", ALL)
@pytest.mark.parametrize("protocol", ["terminal", "acp"])
async def test_read_output_answers_within_a_second_of_a_mark_flood(
    state_dir: Path, tmp_path: Path, emulator: str, protocol: str
) -> None:
    argv = [sys.executable, "-c", FLOOD] if protocol == "terminal" else [sys.executable, ACP_AGENT]
    profile = {"name": "p", "agent": "generic", "argv": argv, "cwds": ["/"]}
    profile |= {"emulator": emulator, "protocol": protocol}
    path = tmp_path / "profiles.json"
    path.write_text(json.dumps({"profiles": [profile]}))
    async with Client(stdio_params(state_dir, PANEWARDEN_PROFILES=str(path))) as client:
        tools = Tools(client)
        await tools.call("start_pane", name="m", profile="p")
        if protocol == "acp":
            await tools.call("send_input", name="m", text="marks")
        deadline = time.monotonic() + 30
        text = ""
        while "after the marks" not in text:
            assert time.monotonic() < deadline, text
            started = time.monotonic()
            text = (await tools.call("read_output", name="m"))["text"]
            took = time.monotonic() - started
            assert took < 1.0, f"read_output took {took:.1f} s"
            await anyio.sleep(0.05)
        assert "\u00e1" + "\u0301" * MAX_MARKS + "\n" in text, text[:200]
        await tools.call("remove_pane", name="m")
