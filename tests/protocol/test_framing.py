"""Frames: every message round-trips; bad frames raise FrameError, never anything else."""

from __future__ import annotations

import msgspec
import pytest

from protocol import PROTOCOL_VERSION
from protocol.boot import BootRecord, PaneLaunch, decode_boot, encode_boot
from protocol.framing import MAX_FRAME_BYTES, Codec, FrameError
from protocol.messages import (
    AnswerDialog,
    Close,
    Descendants,
    Exited,
    Failed,
    Hello,
    OutputMatch,
    PaneStatusFields,
    ReadScreen,
    ScreenText,
    Status,
    WriteInput,
)

STATUS = PaneStatusFields(
    lifecycle="running", state="blocked", kind="permission", turn=2, seq=9, source="osc7501"
)


@pytest.mark.parametrize(
    "msg",
    [
        WriteInput(rid=1, text="héllo\nworld", submit=False, expect_turn=3),
        ReadScreen(rid=2, lines=5, scrollback=True),
        AnswerDialog(rid=3, answer="deny_once"),
        Close(rid=4, expected_seq=7, capture_lines=100),
    ],
)
def test_requests_round_trip(msg: object) -> None:
    codec = Codec()
    assert codec.decode_to_worker(codec.encode(msg)) == msg  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "msg",
    [
        Hello(
            protocol_version=PROTOCOL_VERSION,
            pane="p",
            instance="abc",
            proof=b"\x00" * 32,
            worker_pid=10,
            child_pid=11,
            status=STATUS,
            started_at=1.5,
        ),
        Status(status=STATUS),
        Exited(exit_code=-9, killed=2),
        Descendants(procs=[(12, 345)], session_id=11),
        OutputMatch(watch_id=1, line="x", seq=3),
        Failed(rid=5, code="pane_blocked", message="m"),
        ScreenText(rid=6, text="t", cursor=(1, 2), cols=80, rows=24, seq=1, turn=0, state="idle"),
    ],
)
def test_replies_and_events_round_trip(msg: object) -> None:
    codec = Codec()
    assert codec.decode_to_supervisor(codec.encode(msg)) == msg  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc1",  # never valid msgpack
        msgspec.msgpack.encode({"op": "no_such_op", "rid": 1}),
        msgspec.msgpack.encode({"op": "write_input", "rid": "one", "text": "x"}),
        msgspec.msgpack.encode([1, 2, 3]),
        b"\x00" * (MAX_FRAME_BYTES + 1),
    ],
)
def test_bad_frames_raise_frame_error_only(data: bytes) -> None:
    codec = Codec()
    with pytest.raises(FrameError):
        codec.decode_to_worker(data)
    with pytest.raises(FrameError):
        codec.decode_to_supervisor(data)


def test_a_frame_over_the_limit_is_refused_when_encoding() -> None:
    with pytest.raises(FrameError):
        Codec().encode(WriteInput(rid=1, text="x" * (MAX_FRAME_BYTES + 1)))


def test_a_supervisor_frame_is_not_a_worker_frame() -> None:
    codec = Codec()
    with pytest.raises(FrameError):
        codec.decode_to_worker(codec.encode(Status(status=STATUS)))


def test_boot_records_round_trip_and_refuse_garbage() -> None:
    record = BootRecord(
        protocol_version=PROTOCOL_VERSION,
        instance="i",
        secret=b"s" * 32,
        endpoint="ipc:///tmp/x",
        launch=PaneLaunch(
            pane="p", agent="demo", argv=["a"], cwd="/", env={"A": "1"}, cols=80, rows=24
        ),
    )
    assert decode_boot(encode_boot(record)) == record
    for bad in (b"", b"\xc1", msgspec.msgpack.encode({"pane": "p"}), b"x" * 300_000):
        with pytest.raises(ValueError, match="boot record"):
            decode_boot(bad)
