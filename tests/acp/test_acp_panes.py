"""ACP panes against a fake ACP agent of our own (tests/acp/fake_acp_agent.py), end to end:
a real supervisor over stdio, real workers, the agent a real process on pipes.

Each test starts one service and as few panes as it can, and plays several turns in
each: plain prompt, permissions (allow, deny, the odd option sets, two at once, one after
a cancel), interrupts, broken agents (garbage, a 10 MB frame, silence, exit), a session
that cannot start, usage, and that ``remove_pane`` leaves no process.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.conftest import Tools, stdio_params
from tests.faults import with_arg
from tests.polling import apoll

pytestmark = pytest.mark.anyio

AGENT = str(Path(__file__).with_name("fake_acp_agent.py"))


def acp_profiles(tmp: Path, marker: Path, token: str) -> Path:
    """Two ACP profiles of the fake agent: ``fake`` and ``fakefail`` (no session)."""
    base = [sys.executable, AGENT, "--marker", str(marker), f"--pw-acp={token}"]
    profiles = [
        {"name": "fake", "agent": "generic", "argv": base, "cwds": ["/"], "protocol": "acp"},
        {
            "name": "fakefail",
            "agent": "generic",
            "argv": [*base, "--fail-new", "Authentication required: log in first"],
            "cwds": ["/"],
            "protocol": "acp",
        },
    ]
    path = tmp / "acp-profiles.json"
    path.write_text(json.dumps({"profiles": profiles}))
    return path


class Acp:
    """One service with the fake agent's profiles, and what its panes left."""

    def __init__(self, tools: Tools, marker: Path, token: str) -> None:
        self.tools = tools
        self.marker = marker
        self.token = token

    def procs(self) -> set[tuple[int, int]]:
        needle = f"--pw-acp={self.token}".encode()
        return set(with_arg(lambda a: a == needle))

    def ran(self) -> list[str]:
        return self.marker.read_text().split() if self.marker.exists() else []

    async def turn(self, name: str, text: str, until: list[str]) -> tuple[dict[str, Any], ...]:
        sent = await self.tools.call("send_input", name=name, text=text)
        status = await self.tools.wait(name, after=sent["seq"], until=until)
        return sent, status


@pytest.fixture
async def acp(state_dir: Path, tmp_path: Path) -> AsyncIterator[Acp]:
    marker = tmp_path / "ran.txt"
    token = uuid.uuid4().hex[:12]
    profiles = acp_profiles(tmp_path, marker, token)
    async with Client(stdio_params(state_dir, PANEWARDEN_PROFILES=str(profiles))) as client:
        yield Acp(Tools(client), marker, token)


async def test_turns_permissions_and_interrupts(acp: Acp) -> None:
    tools = acp.tools
    await tools.call("start_pane", name="a", profile="fake")
    first = await tools.call("get_status", name="a")
    assert (first["state"], first["source"]) == ("idle", "acp"), first
    # Plain prompt: turn 1, done, the reply on screen and as the turn's output.
    sent, done = await acp.turn("a", "plain hello there", ["done", "error", "cancelled"])
    assert (sent["turn"], done["state"], done["turn"]) == (1, "done", 1), (sent, done)
    screen = (await tools.call("read_output", name="a"))["text"]
    assert "> plain hello there" in screen and "reply: hello there" in screen, screen
    # Permission -> blocked -> allow_once -> ran once -> done.
    sent, blocked = await acp.turn("a", "tool alpha", ["blocked"])
    assert (blocked["kind"], blocked["turn"]) == ("permission", 2), blocked
    refused = await tools.error("send_input", name="a", text="plain not now")
    assert refused["code"] == "pane_blocked", refused
    answered = await tools.call("answer_dialog", name="a", answer="allow_once")
    done = await tools.wait("a", after=answered["seq"], until=["done", "cancelled", "error"])
    assert (done["state"], done["turn"]) == ("done", 2), done
    assert acp.ran() == ["alpha"]
    # deny_once -> the agent goes on and ends end_turn -> the turn reads cancelled.
    sent, blocked = await acp.turn("a", "tool beta", ["blocked"])
    answered = await tools.call("answer_dialog", name="a", answer="deny_once")
    end = await tools.wait("a", after=answered["seq"], until=["done", "cancelled", "error"])
    assert (end["state"], end["turn"]) == ("cancelled", 3), end
    assert acp.ran() == ["alpha"]
    # Only allow_always / reject_always offered: both answers refused, nothing sent.
    sent, blocked = await acp.turn("a", "always", ["blocked"])
    for answer in ("allow_once", "deny_once"):
        err = await tools.error("answer_dialog", name="a", answer=answer)
        assert err["code"] == "dialog_unrecognized", err
    still = await tools.call("get_status", name="a")
    assert (still["state"], still["seq"]) == ("blocked", blocked["seq"]), still
    assert "outcome" not in (await tools.call("read_output", name="a"))["text"]
    # interrupt_pane while blocked: the request is answered cancelled, the turn cancelled.
    cut = await tools.call("interrupt_pane", name="a")
    end = await tools.wait("a", after=cut["seq"], until=["done", "cancelled", "error"])
    assert (end["state"], end["turn"]) == ("cancelled", 4), end
    assert "outcome {'outcome': 'cancelled'}" in (await tools.call("read_output", name="a"))["text"]
    # Two requests at once: each shown in turn (blocked twice), each answered on its own.
    sent, blocked = await acp.turn("a", "two", ["blocked"])
    one = await tools.call("answer_dialog", name="a", answer="allow_once")
    again = await tools.wait("a", after=one["seq"], until=["blocked"])
    assert again["turn"] == blocked["turn"] == 5, (blocked, again)
    two = await tools.call("answer_dialog", name="a", answer="deny_once")
    end = await tools.wait("a", after=two["seq"], until=["done", "cancelled", "error"])
    assert (end["state"], end["turn"]) == ("cancelled", 5), end
    out = await tools.call("read_output", name="a")
    assert "first=a1 second=r2" in out["text"], out["text"]
    # Interrupt mid-turn (streaming): cancelled.
    await acp.turn("a", "slow", ["working"])
    cut = await tools.call("interrupt_pane", name="a")
    end = await tools.wait("a", after=cut["seq"], until=["done", "cancelled", "error"])
    assert (end["state"], end["turn"]) == ("cancelled", 6), end
    # A permission request after session/cancel is answered cancelled by the client.
    sent, _working = await acp.turn("a", "aftercancel", ["working"])
    cut = await tools.call("interrupt_pane", name="a")
    end = await tools.wait("a", after=cut["seq"], until=["done", "cancelled", "error"])
    assert end["state"] == "cancelled", end
    await apoll(
        lambda: _screen_has(tools, "a", "late=cancelled"), 10, what="the late request's answer"
    )
    # Qwen's non-standard request answered -32601, the turn goes on; usage is carried.
    sent, done = await acp.turn("a", "drain", ["done", "error"])
    assert done["state"] == "done", done
    sent, done = await acp.turn("a", "usage", ["done", "error"])
    assert done["usage"] == {"input_tokens": 12, "output_tokens": 3, "total_tokens": 15}, done
    got = await tools.call("get_status", name="a")
    assert got["usage"]["total_tokens"] == 15, got
    # Plans and tool calls are drawn; an agent's escape sequences are not (no forged OSC).
    sent, done = await acp.turn("a", "plan", ["done", "error"])
    assert (done["state"], done["source"]) == ("done", "acp"), done
    text = (await tools.call("read_output", name="a"))["text"]
    assert "[x] look around" in text and "read notes.txt (completed)" in text, text
    assert "planned ]7501;state=done safely" in text, text
    assert acp.procs(), "the agent runs"
    # The worker is a fork of the template (the default), as a terminal pane's is.
    (pane,) = (await tools.call("list_panes"))["panes"]
    assert _parent_comm(pane["worker_pid"]) == "pw-template"
    await tools.call("remove_pane", name="a")
    await apoll(lambda: not acp.procs(), 10, what="no process of the pane left")


def _parent_comm(pid: int) -> str:
    parent = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
    return Path(f"/proc/{parent}/comm").read_text().strip()


async def _screen_has(tools: Tools, name: str, text: str) -> bool:
    return text in (await tools.call("read_output", name=name))["text"]


async def test_first_prompt_is_turn_1_and_cursors_never_miss_the_turn(acp: Acp) -> None:
    tools = acp.tools
    # 20 starts (the count); later turns on the first only (test time).
    for i in range(20):
        name = f"f{i}"
        await tools.call("start_pane", name=name, profile="fake")
        # At once, while the session may still be being created: the prompt waits for it.
        sent = await tools.call("send_input", name=name, text=f"plain number {i}")
        assert sent["turn"] == 1, sent
        working = await tools.wait(name, after=sent["seq"], until=["working"])
        done = await tools.wait(name, after=sent["seq"], until=["done"])
        assert working["turn"] == done["turn"] == 1, (working, done)
        for turn in (2, 3) if i == 0 else ():
            sent, done = await acp.turn(name, f"plain again {turn}", ["done"])
            assert sent["turn"] == done["turn"] == turn, (sent, done)
        await tools.call("remove_pane", name=name)
    await apoll(lambda: not acp.procs(), 10, what="no process left")


async def test_broken_agents_read_error_and_never_hang(acp: Acp) -> None:
    tools = acp.tools
    for prompt in ("garbage", "huge", "exit"):
        name = f"b-{prompt}"
        await tools.call("start_pane", name=name, profile="fake")
        _, end = await acp.turn(name, prompt, ["done", "cancelled", "error", "unknown"])
        assert end["state"] == "error", (prompt, end)
        text = (await tools.call("read_output", name=name))["text"]
        assert "[panewarden]" in text, text
        if prompt != "exit":
            err = await tools.error("send_input", name=name, text="plain again")
            assert err["code"] == "pane_not_running", err
            assert "JSON-RPC" in err["message"] or "frame over" in err["message"], err
        await tools.call("remove_pane", name=name)
    # An agent that stops answering, even session/cancel: error once the bound passed.
    await tools.call("start_pane", name="deaf", profile="fake")
    # (A first turn, so the session exists: a cancel before it was created ends the
    # turn at once, the prompt never sent.)
    await acp.turn("deaf", "plain hello", ["done"])
    _sent, _working = await acp.turn("deaf", "deaf", ["working"])
    cut = await tools.call("interrupt_pane", name="deaf")
    end = await tools.wait("deaf", after=cut["seq"], until=["done", "cancelled", "error"])
    assert end["state"] == "error", end
    await tools.call("remove_pane", name="deaf")
    # A session that cannot start: start_pane fails naming the agent's own message.
    err = await tools.error("start_pane", name="nos", profile="fakefail")
    assert err["code"] == "spawn_failed", err
    assert "Authentication required: log in first" in err["message"], err
    await apoll(lambda: not acp.procs(), 10, what="no process left")
