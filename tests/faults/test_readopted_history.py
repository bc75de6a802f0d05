"""A cursor taken before a supervisor restart: a wait after it must still find every
status the input caused (found while writing the soak test).

The docs promise that a re-adopted pane's "seq, turn and history" continue and that
``wait_status(after_seq=cursor, until=[…])`` never misses a status of the cursor's turn.
The new supervisor only has the records it saw since the adoption: a ``blocked`` recorded
before the restart is gone, and the wait runs to its timeout on the ``done`` that followed.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from mcp import Client

from tests.conftest import Tools, stdio_params
from tests.faults import CLIENT_GONE, Marks, key_of, sigkill_all, supervisor_of

pytestmark = pytest.mark.anyio


async def test_a_wait_after_a_cursor_from_before_a_restart_misses_nothing(
    state_dir: Path, tmp_path: Path
) -> None:
    marks = Marks(tmp_path, count=1)
    env = marks.env()
    try:
        try:
            async with Client(stdio_params(state_dir, **env)) as client:
                tools = Tools(client)
                pane = await tools.call(
                    "start_pane", name="hist", profile="demo", extra_args=[marks.arg(0)]
                )
                await tools.wait("hist", until=["idle"])
                sent = await tools.call("send_input", name="hist", text="dialog ls")
                blocked = await tools.wait("hist", after=sent["seq"], until=["blocked"])
                answered = await tools.call("answer_dialog", name="hist", answer="allow_once")
                done = await tools.wait("hist", after=answered["seq"], until=["done"])
                # The same wait again, before the restart: found in the history.
                again = await tools.wait("hist", after=sent["seq"], until=["blocked"])
                assert again == blocked, (again, blocked)
                worker = key_of(pane["pane"]["worker_pid"])
                supervisor = supervisor_of(pane["pane"]["worker_pid"])
                assert worker is not None and supervisor is not None
                os.kill(supervisor, signal.SIGKILL)
        except* CLIENT_GONE:
            pass  # leaving the client of a dead server
        async with Client(stdio_params(state_dir, **env)) as client:
            tools = Tools(client)
            status = await tools.call("get_status", name="hist")
            assert (status["seq"], status["state"]) == (done["seq"], "done"), status
            waited = await tools.call(
                "wait_status", name="hist", after_seq=sent["seq"], until=["blocked"], timeout_s=5
            )
            await tools.call("remove_pane", name="hist")
        assert not waited["timed_out"], waited
        assert waited["status"] == blocked, (waited, blocked)
    finally:
        sigkill_all(marks.everything())
