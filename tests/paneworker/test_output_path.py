"""Drain, then parse: a real program on a real PTY writing faster than the emulator parses.

The worker's output path (ScreenState.drain / parse_step / catch_up) is run the way
the worker loop runs it, with a small backlog bound so the bound is really reached.
"""

from __future__ import annotations

import hashlib
import os
import select
import sys
import time
from pathlib import Path

import pytest

from bench.streams import realistic_stream
from paneworker.procs.program import Program
from paneworker.screen.state import ScreenState
from paneworker.screen.terminal import Terminal
from paneworker.status.screen_rules import RuleSet
from protocol import PROTOCOL_VERSION
from protocol.boot import BootRecord, PaneLaunch
from protocol.messages import Status, ToSupervisor
from tests.paneworker.emulators import EMULATOR

COLS, ROWS = 120, 40

# Raw mode: the PTY passes the bytes unchanged (no \n -> \r\n), so what the program
# wrote can be compared byte for byte with what the emulator was fed.
WRITER = r"""
import os, sys, tty
tty.setraw(1)
data = open(sys.argv[1], "rb").read()
view = memoryview(data)
while view:
    view = view[os.write(1, view[:65536]):]
"""


class FedRecorder:
    """Wraps the screen model's ``feed`` (still calling it) to hash what it was fed."""

    def __init__(self, terminal: Terminal) -> None:
        model = terminal._model
        self.digest = hashlib.sha256()
        self.count = 0
        real_feed = model.feed

        def feed(data: bytes) -> None:
            if data != b"\x18":  # the CAN a drop adds is the emulator's, not the program's
                self.digest.update(data)
                self.count += len(data)
            real_feed(data)

        model.feed = feed  # type: ignore[method-assign]


def _boot(tmp_path: Path, argv: list[str], limit: int, overflow: str) -> BootRecord:
    return BootRecord(
        protocol_version=PROTOCOL_VERSION,
        instance="i",
        secret=b"s",
        endpoint="ipc:///nonexistent",
        launch=PaneLaunch(
            pane="t",
            agent="generic",
            argv=argv,
            cwd=str(tmp_path),
            env={"PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8"},
            cols=COLS,
            rows=ROWS,
            emulator=EMULATOR,
            output_buffer_bytes=limit,
            output_overflow=overflow,
        ),
    )


def _run(
    tmp_path: Path, stream: bytes, *, limit: int, overflow: str
) -> tuple[ScreenState, FedRecorder, list[ToSupervisor], bool]:
    """Run the loop's output path until the program is gone; returns whether it throttled."""
    path = tmp_path / "stream.bin"
    path.write_bytes(stream)
    argv = [sys.executable, "-c", WRITER, str(path)]
    sent: list[ToSupervisor] = []
    boot = _boot(tmp_path, argv, limit, overflow)
    screen = ScreenState(boot, sent.append, rules=RuleSet("none", 1, (), "test"))
    recorder = FedRecorder(screen.terminal)
    program = Program(argv, str(tmp_path), dict(boot.launch.env), COLS, ROWS)
    screen.attach(program)
    screen.status.set_lifecycle("running")
    throttled = False
    deadline = time.monotonic() + 90
    try:
        while not program.eof:
            assert time.monotonic() < deadline, "the program never finished"
            if screen.accepting_output:
                select.select([program.fd], [], [], 0 if screen.has_parse_work() else 0.05)
                screen.drain()
            else:
                throttled = True
            screen.after_step()
        screen.drain_to_end()
        screen.catch_up()
    finally:
        program.close()
    return screen, recorder, sent, throttled


def _replay(stream: bytes) -> Terminal:
    term = Terminal(COLS, ROWS, reply=lambda _b: None, on_report=lambda _r: None, emulator=EMULATOR)
    term.feed(stream)
    return term


@pytest.mark.timeout(120)
def test_throttled_program_loses_nothing_and_the_screen_equals_a_full_replay(
    tmp_path: Path,
) -> None:
    stream = realistic_stream(3 * 1024 * 1024, seed=3)
    screen, recorder, sent, throttled = _run(tmp_path, stream, limit=64 * 1024, overflow="throttle")
    assert throttled, "the 64 KiB bound was never reached: the test proves nothing"
    assert recorder.count == len(stream)
    assert recorder.digest.hexdigest() == hashlib.sha256(stream).hexdigest()
    assert screen.terminal.skipped_bytes == 0
    whole = _replay(stream)
    assert screen.terminal.display_lines() == whole.display_lines()
    assert screen.terminal.history_lines() == whole.history_lines()
    assert screen.terminal.cursor == whole.cursor
    # Every OSC 7501 report in the stream reached the status machine, in order.
    assert screen.terminal.records.root == whole.records.root
    assert any(isinstance(m, Status) for m in sent)


@pytest.mark.timeout(120)
def test_drop_mode_skips_the_oldest_output_and_converges_on_the_newest(
    tmp_path: Path,
) -> None:
    stream = realistic_stream(3 * 1024 * 1024, seed=4)
    tail = b"".join(b"\x1b[0mfinal line %d\r\n" % n for n in range(ROWS))
    screen, recorder, _sent, throttled = _run(
        tmp_path, stream + tail, limit=64 * 1024, overflow="drop"
    )
    assert not throttled
    skipped = screen.terminal.skipped_bytes
    if EMULATOR == "pyte":  # the native backend may keep up with the writer
        assert skipped > 0
    assert recorder.count + skipped == len(stream) + len(tail)
    assert screen.terminal.display_lines()[-2] == f"final line {ROWS - 1}"


def test_a_query_behind_unparsed_output_is_answered_with_the_cursor_it_meant() -> None:
    replies: list[bytes] = []
    term = Terminal(20, 5, reply=replies.append, on_report=lambda _r: None, emulator=EMULATOR)
    term.receive(b"\x1b[3;4Hx")
    term.receive(b"\x1b[6n\x1b[5;1Hmore")
    assert term.needs_parse_now()
    term.receive(b"\x1b[")  # a second query split across reads
    term.receive(b"6n")
    term.catch_up()
    assert replies == [b"\x1b[3;5R", b"\x1b[5;5R"]


def test_a_report_is_applied_only_when_the_screen_reaches_it() -> None:
    seen: list[tuple[str, list[str]]] = []
    term: Terminal

    def on_report(report: object) -> None:
        seen.append((str(getattr(report, "state", "")), term.display_lines()))

    term = Terminal(20, 3, reply=lambda _b: None, on_report=on_report, emulator=EMULATOR)
    term.receive(b"before\x1b]7501;state=wor")
    term.receive(b"king\x07after\r\n\x1b]7501;state=idle\x1b")
    term.receive(b"\\")
    assert seen == []  # received, not parsed: nothing published yet
    term.catch_up()
    assert seen == [("working", ["before", "", ""]), ("idle", ["beforeafter", "", ""])]


def test_an_open_synchronized_frame_is_not_shown_half_drawn() -> None:
    now = [0.0]
    term = Terminal(
        20,
        3,
        reply=lambda _b: None,
        on_report=lambda _r: None,
        emulator=EMULATOR,
        clock=lambda: now[0],
    )
    term.receive(b"old frame\x1b[?2026h\x1b[H\x1b[2Knew ")
    term.catch_up()
    assert term.display_lines()[0] == "old frame"
    assert term.hold_deadline() is not None
    term.receive(b"frame\x1b[?2026l")
    term.catch_up()
    assert term.display_lines()[0] == "new frame"
    # A frame left open too long is shown as it is.
    term.receive(b"\x1b[?2026h\x1b[Hstuck")
    term.catch_up()
    assert term.display_lines()[0] == "new frame"
    now[0] += 2.0
    term.catch_up()
    assert term.display_lines()[0] == "stuckrame"


def test_backlog_memory_goes_back_after_a_burst() -> None:
    term = Terminal(80, 24, reply=lambda _b: None, on_report=lambda _r: None)
    for _ in range(40):
        term.receive(b"x" * 100_000 + b"\r\n")
    assert term.backlog_mapped_bytes >= 4 * 1024 * 1024
    term.catch_up()
    assert term.pending == 0
    assert term.backlog_mapped_bytes == 1024 * 1024  # one segment kept, mostly unbacked
