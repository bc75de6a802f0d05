"""The raw-byte scanner finds the same sequences however the stream is split."""

from __future__ import annotations

import random

from paneworker.screen.emulator.scanner import (
    DCS,
    OSC,
    QUERY,
    RESET,
    SYNC_OFF,
    SYNC_ON,
    SequenceScanner,
)

STREAM = (
    b"text \x1b[1;31mred\x1b[0m \x1b[6n\x1b[?2026h\x1b[H\x1b]7501;state=working:app=x\x1b\\"
    b"\x1b]0;title \x1b[c\x07\x1b[?2026l\x1bP+q544e\x1b\\\x1b[>0q\x1b[?1049$p"
    b"\x1b]10;?\x07\x1b]133;A\x07\x1bc\x1b[14t\x1b]7501;?\x07\x1b[?25l tail \x1b[38;5;1m"
)
EXPECTED_KINDS = [
    QUERY, SYNC_ON, OSC, QUERY, SYNC_OFF, DCS, QUERY, QUERY, OSC, OSC, RESET, QUERY, OSC
]  # fmt: skip


def _scan(pieces: list[bytes]) -> list[tuple[int, int, int]]:
    scanner = SequenceScanner()
    found: list[tuple[int, int, int]] = []
    offset = 0
    for piece in pieces:
        found += [(f.start, f.end, f.kind) for f in scanner.scan(piece, offset)]
        offset += len(piece)
    return found


def test_one_piece_finds_every_kind_in_order() -> None:
    found = _scan([STREAM])
    assert [kind for _s, _e, kind in found] == EXPECTED_KINDS
    # The OSC abandoned by an ESC is not reported; the query that abandoned it is.
    starts = [STREAM[s:e] for s, e, _k in found]
    assert b"\x1b[c" in starts and not any(b"title" in s for s in starts)


def test_every_split_and_random_splits_find_the_same() -> None:
    whole = _scan([STREAM])
    for cut in range(1, len(STREAM)):
        assert _scan([STREAM[:cut], STREAM[cut:]]) == whole, cut
    rng = random.Random(9)
    for _ in range(200):
        cuts = sorted(rng.sample(range(1, len(STREAM)), 6))
        pieces = [STREAM[a:b] for a, b in zip([0, *cuts], [*cuts, len(STREAM)], strict=True)]
        assert _scan(pieces) == whole


def test_byte_at_a_time_finds_the_same() -> None:
    assert _scan([bytes([b]) for b in STREAM]) == _scan([STREAM])


def test_an_over_long_report_is_not_found_and_nothing_is_carried_forever() -> None:
    scanner = SequenceScanner()
    found = scanner.scan(b"\x1b]7501;state=working:x=" + b"Z" * 10_000, 0)
    assert found == []
    assert scanner.scan(b"\x07after", 10_024) == []
    assert len(scanner._carry) == 0
