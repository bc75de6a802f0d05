"""What ``panewarden watch`` draws when the pane is larger than the terminal."""

from __future__ import annotations

import pyte

from supervisor.cli.watch_view import WatchState, crop_line, render


def _drawn(output: str, cols: int, rows: int) -> pyte.Screen:
    screen = pyte.Screen(cols, rows)
    pyte.Stream(screen).feed(output)
    return screen


def test_crop_keeps_styles_and_counts_wide_characters() -> None:
    assert crop_line("\x1b[31mabcdef\x1b[0m", 3) == ("\x1b[31mabc\x1b[0m", True)
    assert crop_line("中文x", 4) == ("中文\x1b[0m", True)
    assert crop_line("short", 10) == ("short", False)


def test_a_larger_pane_is_cropped_with_a_marker_and_follows_the_cursor() -> None:
    lines = [f"\x1b[32mrow {i:02d} " + "x" * 60 + "\x1b[0m" for i in range(30)]
    state = WatchState(
        "big",
        status={"state": "working", "turn": 3, "seq": 9, "lifecycle": "running", "lease": None},
        screen={"cols": 80, "rows": 30, "cursor": [29, 0], "lines": lines},
    )
    screen = _drawn(render(state, 40, 10), 40, 10)
    # Nine rows of screen: the last nine, where the cursor is; each cut with ">".
    assert screen.display[0].startswith("row 21 ")
    assert screen.display[8].startswith("row 29 ")
    assert all(row.endswith(">") for row in screen.display[:9])
    assert screen.buffer[0][0].fg == "green"
    assert screen.buffer[0][39].reverse
    assert screen.display[9].startswith("big  state=working")


def test_a_smaller_pane_is_drawn_whole() -> None:
    state = WatchState(
        "small",
        status={"state": "idle", "lifecycle": "running"},
        screen={"cols": 20, "rows": 2, "cursor": [0, 0], "lines": ["hello", "world"]},
    )
    output = render(state, 80, 24)
    screen = _drawn(output, 80, 24)
    assert screen.display[0].rstrip() == "hello" and screen.display[1].rstrip() == "world"
    assert "cropped" not in screen.display[23]
