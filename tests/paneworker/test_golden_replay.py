"""Recorded real-CLI byte streams replayed through the pane terminal, compared with tmux.

Every golden point in ``tests/captured`` (``<scenario>.golden.*`` after the whole
stream, ``<scenario>.at<N>.golden.*`` after the first N bytes) is one case. Each
case is fed twice: in one piece, and split at the recorded read boundaries (the
``chunks`` of the recording), so sequences and UTF-8 split the way the PTY really
split them are covered too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from paneworker.screen.terminal import Terminal
from paneworker.status.osc7501 import StatusReport
from tests.paneworker.emulators import ALL

CAPTURED = Path(__file__).resolve().parent.parent / "captured"

# tmux 3.3a keeps a variation selector in the cell of the character before it
# (qwen draws "●︎" = U+25CF U+FE0E), and a zero-width space too (qwen 0.24.4 ends
# its input line with one while a prompt is typed); our terminal drops zero-width
# characters, which have no glyph. Only these code points are removed from the
# golden text before comparing; everything else must match exactly.
_VARIATION_SELECTORS = str.maketrans("", "", "\ufe0e\ufe0f\u200b")


@dataclass(frozen=True)
class Golden:
    """One golden point: a recording, a byte count and what tmux showed there."""

    recording: Path
    name: str
    upto: int
    cols: int
    rows: int
    cursor: tuple[int, int]
    alternate_on: bool
    text: Path

    @property
    def case_id(self) -> str:
        return f"{self.recording.parent.name}/{self.name}"


def _goldens() -> list[Golden]:
    found: list[Golden] = []
    for meta_path in sorted(CAPTURED.glob("*/*.golden.json")):
        name = meta_path.name.removesuffix(".golden.json")
        scenario = name.split(".", 1)[0]
        meta = json.loads(meta_path.read_text())
        found.append(
            Golden(
                recording=meta_path.parent / f"{scenario}.bin",
                name=name,
                upto=int(meta["bytes"]),
                cols=int(meta["cols"]),
                rows=int(meta["rows"]),
                cursor=(int(meta["cursor"][0]), int(meta["cursor"][1])),
                alternate_on=bool(meta["alternate_on"]),
                text=meta_path.parent / f"{name}.golden.txt",
            )
        )
    return found


GOLDENS = _goldens()


def _read_boundaries(recording: Path, upto: int) -> list[int]:
    """End offsets of the program's reads as recorded, cut at ``upto``."""
    info = json.loads(recording.with_suffix(".json").read_text())
    ends = sorted({int(end) for _t, end in info["chunks"] if 0 < int(end) < upto})
    return [*ends, upto]


def _replay(golden: Golden, pieces: list[bytes], emulator: str) -> Terminal:
    reports: list[StatusReport] = []
    term = Terminal(
        golden.cols,
        golden.rows,
        reply=lambda _data: None,
        on_report=reports.append,
        emulator=emulator,
    )
    for piece in pieces:
        term.feed(piece)
    return term


def _assert_matches(golden: Golden, term: Terminal) -> None:
    expected = golden.text.read_text(encoding="utf-8").translate(_VARIATION_SELECTORS)
    expected_lines = expected.split("\n")
    assert expected_lines[-1] == "", "a golden text ends with a newline"
    # Right-stripped again: a removed zero-width space may have followed a blank.
    expected_lines = [line.rstrip() for line in expected_lines[:-1]]
    assert len(expected_lines) == golden.rows
    shown = term.display_lines()
    shown += [""] * (golden.rows - len(shown))
    assert shown == expected_lines
    assert term.cursor == golden.cursor
    assert term.alternate_active == golden.alternate_on


def test_every_recording_has_golden_points() -> None:
    recordings = sorted(CAPTURED.glob("*/*.bin"))
    assert len(recordings) >= 11
    covered = {g.recording for g in GOLDENS}
    assert covered == set(recordings)
    # Each recording has its final golden and at least one intermediate one.
    for recording in recordings:
        names = [g.name for g in GOLDENS if g.recording == recording]
        assert recording.stem in names
        assert any(".at" in name for name in names)


@pytest.mark.parametrize("emulator", ALL)
@pytest.mark.parametrize("golden", GOLDENS, ids=[g.case_id for g in GOLDENS])
def test_replay_in_one_piece_matches_tmux(golden: Golden, emulator: str) -> None:
    data = golden.recording.read_bytes()
    assert golden.upto <= len(data)
    _assert_matches(golden, _replay(golden, [data[: golden.upto]], emulator))


@pytest.mark.parametrize("emulator", ALL)
@pytest.mark.parametrize("golden", GOLDENS, ids=[g.case_id for g in GOLDENS])
def test_replay_at_recorded_read_boundaries_matches_tmux(golden: Golden, emulator: str) -> None:
    data = golden.recording.read_bytes()
    ends = _read_boundaries(golden.recording, golden.upto)
    starts = [0, *ends[:-1]]
    pieces = [data[start:end] for start, end in zip(starts, ends, strict=True)]
    assert len(pieces) > 1
    _assert_matches(golden, _replay(golden, pieces, emulator))
