"""A stdio server stopped the way real clients stop it, with stdin still open.

Claude Code sends SIGINT, SIGTERM 0.1 s later and SIGKILL 0.4 s after that, never
closing the server's stdin. Every pane must be gone within a few seconds, whether or
not the SIGKILL lands in the middle of the stop.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client

from tests.conftest import Tools, stdio_params
from tests.faults import (
    CLIENT_GONE,
    Marks,
    ProcKey,
    describe,
    key_of,
    sigkill_all,
    supervisor_of,
    survivors,
)
from tests.polling import apoll

pytestmark = pytest.mark.anyio

GONE_WITHIN_S = 6.0


async def _panes_then_signals(
    state_dir: Path, marks: Marks, known: set[ProcKey], signals: list[tuple[float, int]]
) -> float:
    """Start two panes (one with a detached grandchild), then send ``signals`` (delay
    before each, signal) to the server with stdin open; returns when the first was sent."""
    sent_at = 0.0
    try:
        async with Client(stdio_params(state_dir, **marks.env())) as client:
            tools = Tools(client)
            for i, name in enumerate(("one", "two")):
                pane = (
                    await tools.call(
                        "start_pane", name=name, profile="demo", extra_args=[marks.arg(i)]
                    )
                )["pane"]
                known.update(k for p in (pane["pid"], pane["worker_pid"]) if (k := key_of(p)))
                await tools.wait(name, until=["idle"])
            await tools.call("send_input", name="one", text="spawn a helper")
            match = await tools.call(
                "wait_output", name="one", pattern=r"spawned \d+", regex=True, timeout_s=20
            )
            grandchild = key_of(int(match["line"].split()[1]))
            assert grandchild is not None
            known.add(grandchild)
            server = supervisor_of(pane["worker_pid"])
            assert server is not None
            known.add(key_of(server) or (server, 0))
            for delay_s, signum in signals:
                await anyio.sleep(delay_s)  # the client's own timing, not a synchronisation
                with contextlib.suppress(ProcessLookupError):
                    os.kill(server, signum)
                sent_at = sent_at or time.monotonic()
            # The client keeps stdin open until everything is gone (or the bound passes).
            gone = await apoll(
                lambda: not survivors(known) and not marks.everything(),
                GONE_WITHIN_S - (time.monotonic() - sent_at),
            )
    except* CLIENT_GONE:
        pass
    return gone


@pytest.mark.parametrize(
    "signals",
    [
        [(0.0, signal.SIGINT), (0.1, signal.SIGTERM), (0.4, signal.SIGKILL)],
        [(0.0, signal.SIGTERM)],
        [(0.0, signal.SIGINT)],
    ],
    ids=["claude-code", "sigterm", "sigint"],
)
async def test_a_stop_signal_with_stdin_open_removes_every_pane(
    state_dir: Path, tmp_path: Path, signals: list[tuple[float, int]]
) -> None:
    marks = Marks(tmp_path, count=2)
    known: set[ProcKey] = set()
    try:
        gone = await _panes_then_signals(state_dir, marks, known, signals)
        assert gone, describe(set(survivors(known)) | marks.everything())
    finally:
        sigkill_all(known | marks.everything())
