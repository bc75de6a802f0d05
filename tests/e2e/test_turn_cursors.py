"""Cursors and turns a client can rely on, against real workers and the demo agent.

- A program's own start-up activity (the demo agent's ``--startup-blip`` reproduces
  Codex's working-then-idle right after its first idle) opens no turn: a client's first
  prompt to a fresh pane is turn 1.
- A pane that reports ``blocked`` before it draws its dialog (the demo agent's ``slow``
  dialog, as Claude Code and Codex do) is answered once the dialog is drawn.
- ``send_input`` and ``answer_dialog`` return cursors before every status their input
  caused: a wait after the cursor always sees the turn's ``working`` and its settle.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mcp import Client

from tests.conftest import Tools, stdio_params
from tests.faults import Marks

pytestmark = pytest.mark.anyio


async def test_start_up_activity_is_no_turn_and_the_first_prompt_is_turn_1(
    state_dir: Path, tmp_path: Path
) -> None:
    marks = Marks(tmp_path, count=1)
    argv = [sys.executable, "-m", "supervisor.demo.agent", "--startup-blip"]
    env = marks.env(marks.profiles_file(argv=argv))
    async with Client(stdio_params(state_dir, **env)) as client:
        tools = Tools(client)
        await tools.call("start_pane", name="blip", profile="demo")
        # The first idle of the pane's history (after_seq 0): without a cursor the wait
        # answers with the current status, which on a busy machine may already be the
        # idle after the blip (BLIP_SECONDS after the first one).
        first_idle = await tools.wait("blip", after=0, until=["idle"])
        # The blip: working then idle again, with no input; no turn is opened.
        blip = await tools.wait("blip", after=first_idle["seq"], until=["working"])
        assert blip["turn"] == 0, blip
        again = await tools.wait("blip", after=blip["seq"], until=["idle"])
        assert (again["state"], again["turn"]) == ("idle", 0), again
        sent = await tools.call("send_input", name="blip", text="the first prompt")
        done = await tools.wait("blip", after=sent["seq"], until=["done"])
        assert done["turn"] == 1, done
        await tools.call("remove_pane", name="blip")


async def test_a_dialog_drawn_after_the_blocked_report_is_answered(tools: Tools) -> None:
    await tools.call("start_pane", name="slow", profile="demo")
    await tools.wait("slow", until=["idle"])
    sent = await tools.call("send_input", name="slow", text="dialog slow rm -rf build")
    blocked = await tools.wait("slow", after=sent["seq"], until=["blocked"])
    assert blocked["turn"] == 1, blocked
    # At once: the dialog is not drawn yet, the answer waits for it (bounded).
    answered = await tools.call("answer_dialog", name="slow", answer="allow_once")
    assert answered["seq"] == blocked["seq"], (blocked, answered)
    done = await tools.wait("slow", after=answered["seq"], until=["done"])
    assert done["turn"] == 1, done
    text = (await tools.call("read_output", name="slow"))["text"]
    assert "allowed" in text


async def test_every_cursor_precedes_the_statuses_its_input_caused(tools: Tools) -> None:
    await tools.call("start_pane", name="cur", profile="demo")
    await tools.wait("cur", until=["idle"])
    for turn in range(1, 6):
        sent = await tools.call("send_input", name="cur", text=f"prompt {turn}")
        working = await tools.wait("cur", after=sent["seq"], until=["working"], timeout_s=10)
        assert working["turn"] == turn, (sent, working)
        done = await tools.wait("cur", after=sent["seq"], until=["done"], timeout_s=10)
        assert done["turn"] == turn, (sent, done)
    sent = await tools.call("send_input", name="cur", text="dialog echo hi")
    blocked = await tools.wait("cur", after=sent["seq"], until=["blocked"])
    answered = await tools.call("answer_dialog", name="cur", answer="deny_once")
    cancelled = await tools.wait("cur", after=answered["seq"], until=["cancelled"])
    assert cancelled["turn"] == blocked["turn"] == 6, (blocked, cancelled)
