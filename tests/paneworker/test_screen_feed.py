"""The worker's screen feed: the ANSI rendering (both backends) and the coalescing."""

from __future__ import annotations

import pytest

from paneworker.screen.emulator.ansi import per_line_sgr
from paneworker.screen.emulator.base import Cell
from paneworker.screen.feed import MIN_INTERVAL_S, ScreenFeed
from paneworker.screen.terminal import Terminal
from protocol.messages import ScreenFrame, ToSupervisor

BACKENDS = ["pyte", "ghostty"]
STYLED = (
    b"\x1b[1;31mbold red\x1b[0m plain \x1b[42mon green\x1b[0m "
    b"\x1b[38;2;10;20;30mtrue\x1b[0m \x1b[7mrev\x1b[0m \x1b[94mbright\x1b[0m\r\n"
    b"\xe4\xb8\xad wide \x1b[44m  \x1b[0m"
)


def _terminal(emulator: str, cols: int = 60, rows: int = 4) -> Terminal:
    if emulator == "ghostty":
        pytest.importorskip("pyghostty")
    return Terminal(cols, rows, reply=lambda _b: None, on_report=lambda _r: None, emulator=emulator)


def _styles(cells: list[Cell]) -> list[tuple[str, str, str, bool, bool]]:
    return [(c.char, c.fg, c.bg, c.reverse, c.bold) for c in cells if c.char != ""]


@pytest.mark.parametrize("emulator", BACKENDS)
def test_the_ansi_frame_draws_the_same_cells_again(emulator: str) -> None:
    """Fed back into a terminal, a frame's lines give the cells they were rendered from."""
    source = _terminal(emulator)
    source.feed(STYLED)
    sent: list[ToSupervisor] = []
    feed = ScreenFeed(lambda: source, sent.append)
    frame = feed.render()
    assert (frame.cols, frame.rows, frame.plain) == (60, 4, False)
    assert "bold red" in frame.lines[0] and "38;2;10;20;30" in frame.lines[0]
    assert all(line.endswith("\x1b[0m") for line in frame.lines if "\x1b[" in line)
    copy = _terminal(emulator)
    copy.feed("\r\n".join(frame.lines).encode())
    for row in range(source.rows):
        assert _styles(copy.cells(row)) == _styles(source.cells(row)), row


def _clocked() -> tuple[list[float], ScreenFeed, Terminal, list[ScreenFrame]]:
    now = [100.0]
    terminal = _terminal("pyte")
    frames: list[ScreenFrame] = []

    def send(msg: ToSupervisor) -> None:
        assert isinstance(msg, ScreenFrame)
        frames.append(msg)

    return now, ScreenFeed(lambda: terminal, send, clock=lambda: now[0]), terminal, frames


def test_an_unwatched_pane_renders_nothing() -> None:
    _now, feed, terminal, frames = _clocked()
    for i in range(20):
        terminal.feed(f"line {i}\r\n".encode())
        feed.step()
        assert feed.deadline() is None
    assert frames == []


def test_a_burst_becomes_one_frame_per_interval_with_the_newest_screen() -> None:
    now, feed, terminal, frames = _clocked()
    feed.subscribe()
    feed.step()
    assert len(frames) == 1  # at once, on subscribing
    for i in range(100):
        terminal.feed(f"\rcount {i}".encode())
        now[0] += MIN_INTERVAL_S / 200
        feed.step()
    assert len(frames) == 1  # coalesced: still inside the interval
    deadline = feed.deadline()
    assert deadline is not None and deadline <= now[0] + MIN_INTERVAL_S
    now[0] = deadline
    feed.step()
    assert len(frames) == 2 and "count 99" in frames[1].lines[0]
    # Nothing changed: no frame, no deadline.
    now[0] += 1
    feed.step()
    assert len(frames) == 2 and feed.deadline() is None
    feed.unsubscribe()
    terminal.feed(b"more")
    now[0] += 1
    feed.step()
    assert len(frames) == 2


def test_a_huge_coloured_screen_goes_plain() -> None:
    terminal = _terminal("pyte", cols=500, rows=200)
    cell = b"".join(f"\x1b[38;2;{i % 250};1;2mx".encode() for i in range(500))
    terminal.feed(b"\r\n".join([cell] * 200))
    frames: list[ToSupervisor] = []
    frame = ScreenFeed(lambda: terminal, frames.append).render()
    assert frame.plain and frame.lines[0] == "x" * 500


def test_formatter_text_becomes_self_contained_lines() -> None:
    text = "\x1b]4;1;rgb:cc/66/66\x1b\\\x1b[31mred\r\nstill red\x1b[0m plain\x1b[2K\r\n\x1b[1mb"
    lines = per_line_sgr(text, 4)
    assert lines == [
        "\x1b[31mred\x1b[0m",
        "\x1b[31mstill red\x1b[0m plain\x1b[0m",
        "\x1b[1mb\x1b[0m",
        "",
    ]
