"""Bounds inside one ACP session, in process (a real agent process on pipes, a real
screen): what is logged of an agent's values, and what a turn's text costs to append."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from collections.abc import Iterator

import pytest

from paneworker.acp.pipes import PipeProgram
from paneworker.acp.session import MAX_TURN_TEXT, AcpSession, _Turn
from paneworker.screen.state import ScreenState
from paneworker.status.screen_rules import RuleSet
from protocol import PROTOCOL_VERSION
from protocol.boot import BootRecord, PaneLaunch

AGENT = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture
def session() -> Iterator[AcpSession]:
    boot = BootRecord(
        protocol_version=PROTOCOL_VERSION,
        instance="i",
        secret=b"s",
        endpoint="ipc:///nonexistent",
        launch=PaneLaunch(pane="t", agent="generic", argv=AGENT, cwd="/", env={}, cols=80, rows=24),
    )
    screen = ScreenState(boot, lambda _msg: None, rules=RuleSet("none", 1, (), "test"))
    program = PipeProgram(AGENT, "/", {})
    try:
        yield AcpSession(program, screen, lambda _msg: None, "/", name="t")
    finally:
        program.close()
        os.kill(program.pid, signal.SIGKILL)
        os.waitpid(program.pid, 0)
        program.mark_reaped(-9)


def test_answers_to_no_request_log_a_cut_id(
    session: AcpSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    for i in range(20):
        frame = {"jsonrpc": "2.0", "id": f"{i}-" + "i" * 1_000_000, "result": {}}
        session.take(json.dumps(frame).encode() + b"\n")
    assert session.broken is None
    logged = sum(len(record.getMessage()) for record in caplog.records)
    assert len(caplog.records) == 20, [r.getMessage()[:80] for r in caplog.records]
    # 20 x 1 MB ids: each line quotes 64 characters of its id.
    assert logged < 20 * 200, f"{logged} characters logged"


def test_a_long_turn_appends_in_time_of_the_chunk() -> None:
    def adds(turn: _Turn, count: int) -> float:
        started = time.perf_counter()
        for _ in range(count):
            turn.add("x" * 20)
        return time.perf_counter() - started

    short = adds(_Turn(cursor=0, text="p"), 5_000)
    full = _Turn(cursor=0, text="p")
    full.add("y" * MAX_TURN_TEXT)
    long = adds(full, 5_000)
    # Re-joining the whole text on each chunk made this ~1,000 times slower.
    assert long < 20 * short + 0.05, (short, long)
    reply = full.reply()
    assert len(reply) == MAX_TURN_TEXT and reply.endswith("x" * 20), len(reply)
