"""Hostile ACP agents fail closed: each case ends with the pane `error` or serving
normally, never `lost` (a dead worker), and another pane answers `get_status` throughout.

Against the fake agent's hostile modes (tests/acp/fake_acp_agent.py), end to end: a real
supervisor over stdio, real workers, the agent a real process on pipes.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.conftest import Tools, stdio_params
from tests.faults import with_arg
from tests.polling import apoll

pytestmark = pytest.mark.anyio

AGENT = str(Path(__file__).with_name("fake_acp_agent.py"))
ENDS = ["done", "cancelled", "error", "unknown", "idle"]


class Hostile:
    """One service with the fake agent's profiles and a bystander pane."""

    def __init__(self, tools: Tools, token: str) -> None:
        self.tools = tools
        self.token = token

    def procs(self) -> set[tuple[int, int]]:
        needle = f"--pw-acp={self.token}".encode()
        return set(with_arg(lambda a: a == needle))

    async def bystander_answers(self) -> None:
        """The other pane's get_status answers at once (its worker and the service live)."""
        started = time.monotonic()
        got = await self.tools.call("get_status", name="other")
        assert got["lifecycle"] == "running" and got["state"] == "idle", got
        assert time.monotonic() - started < 5, "get_status of another pane was slow"

    async def turn(self, name: str, text: str, until: list[str]) -> dict[str, Any]:
        sent = await self.tools.call("send_input", name=name, text=text)
        status = await self.tools.wait(name, after=sent["seq"], until=until)
        await self.bystander_answers()
        return status

    async def lifecycle(self, name: str) -> str:
        return str((await self.tools.call("get_status", name=name))["lifecycle"])


def _profiles(tmp: Path, token: str) -> Path:
    base = [sys.executable, AGENT, f"--pw-acp={token}"]
    said = "fake-agent: no credentials in ~/.fake (run fake login)"
    profiles = [
        {"name": name, "agent": "generic", "argv": argv, "cwds": ["/"], "protocol": "acp"}
        for name, argv in (
            ("fake", base),
            ("fakefail", [*base, "--fail-new", "Authentication required: log in first"]),
            ("fakeexit", [*base, "--die", said]),
        )
    ]
    path = tmp / "acp-profiles.json"
    path.write_text(json.dumps({"profiles": profiles}))
    return path


@pytest.fixture
async def hostile(state_dir: Path, tmp_path: Path) -> AsyncIterator[Hostile]:
    token = uuid.uuid4().hex[:12]
    params = stdio_params(
        state_dir,
        PANEWARDEN_PROFILES=str(_profiles(tmp_path, token)),
        # A small unparsed-output bound: the flood meets it within a second.
        PANEWARDEN_OUTPUT_BUFFER_MB="4",
    )
    async with Client(params) as client:
        tools = Tools(client)
        await tools.call("start_pane", name="other", profile="fake")
        yield Hostile(tools, token)


async def test_frames_that_raise_end_the_session_not_the_worker(hostile: Hostile) -> None:
    tools = hostile.tools
    # JSON nested 2,000 deep (RecursionError in the decoder): error, the worker lives.
    await tools.call("start_pane", name="deep", profile="fake")
    end = await hostile.turn("deep", "nested", ENDS)
    assert end["state"] == "error", end
    assert await hostile.lifecycle("deep") == "running"
    err = await tools.error("send_input", name="deep", text="plain again")
    assert err["code"] == "pane_not_running" and "nested too deep" in err["message"], err
    # A usage count of 2^70 (past msgpack's 2^64 - 1): refused, the turn ends done.
    await tools.call("start_pane", name="count", profile="fake")
    end = await hostile.turn("count", "bigusage", ENDS)
    assert end["state"] == "done", end
    assert end.get("usage") is None, end  # a count out of range: the usage is refused
    end = await hostile.turn("count", "plain still", ENDS)
    assert end["state"] == "done" and await hostile.lifecycle("count") == "running", end
    for name in ("deep", "count"):
        await tools.call("remove_pane", name=name)


async def test_a_tool_title_cannot_forge_status(hostile: Hostile) -> None:
    tools = hostile.tools
    await tools.call("start_pane", name="osc", profile="fake")
    blocked = await hostile.turn("osc", "osctool", ["blocked"])
    assert blocked["kind"] == "permission", blocked
    answered = await tools.call("answer_dialog", name="osc", answer="deny_once")
    end = await tools.wait("osc", after=answered["seq"], until=["done", "cancelled", "error"])
    # Forged, the title's OSC 7501 record read `done` (or `blocked`/`question`).
    assert (end["state"], end["source"]) == ("cancelled", "acp"), end
    after = await tools.call("get_status", name="osc")
    assert (after["state"], after["source"]) == ("cancelled", "acp"), after
    text = (await tools.call("read_output", name="osc"))["text"]
    assert "[permission] ls ]7501;state=done7501;state=blocked;kind=question: denied once" in text
    await tools.call("remove_pane", name="osc")


async def test_a_closed_stdout_reads_error_and_can_be_interrupted(hostile: Hostile) -> None:
    tools = hostile.tools
    await tools.call("start_pane", name="shut", profile="fake")
    end = await hostile.turn("shut", "closeout", ["error", "done", "cancelled"])
    assert end["state"] == "error", end
    assert hostile.procs(), "the agent still runs"
    text = (await tools.call("read_output", name="shut"))["text"]
    assert "closed its stdout" in text, text
    cut = await tools.call("interrupt_pane", name="shut")
    assert cut["seq"] >= end["seq"], cut
    await tools.call("remove_pane", name="shut")
    names = {p["name"] for p in (await tools.call("list_panes"))["panes"]}
    assert names == {"other"}, names
    await hostile.bystander_answers()


async def test_an_interrupt_right_after_stdout_closed_ends_the_session(hostile: Hostile) -> None:
    tools = hostile.tools
    await tools.call("start_pane", name="shut2", profile="fake")
    sent = await tools.call("send_input", name="shut2", text="closeout")
    await tools.wait("shut2", after=sent["seq"], until=["working"])
    cut = await tools.call("interrupt_pane", name="shut2")
    end = await tools.wait("shut2", after=cut["seq"] - 1, until=["error"], timeout_s=10)
    assert end["state"] == "error", end
    await tools.call("remove_pane", name="shut2")


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def test_a_chunk_flood_is_held_to_the_output_bound(hostile: Hostile) -> None:
    tools = hostile.tools
    await tools.call("start_pane", name="flood", profile="fake")
    panes = {p["name"]: p for p in (await tools.call("list_panes"))["panes"]}
    worker = panes["flood"]["worker_pid"]
    before = _rss_kib(worker)
    peak = [before]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.02):
            peak[0] = max(peak[0], _rss_kib(worker))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        sent = await tools.call("send_input", name="flood", text="flood 3")
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            await anyio.sleep(0.5)  # a reader now and then, not one that keeps up the parse
            started = time.monotonic()
            await tools.call("read_output", name="flood", lines=2)
            took = time.monotonic() - started
            assert took < 10, f"read_output took {took:.1f} s during the flood"
            await hostile.bystander_answers()
            status = await tools.call("get_status", name="flood")
            if status["seq"] > sent["seq"] and status["state"] in ("done", "error", "cancelled"):
                break
    finally:
        stop.set()
        sampler.join(5)
    assert status["state"] == "done", status
    # 4 MiB unparsed at most, a 4 MiB frame, the turn's 900,000 characters: far under
    # what the flood grew the worker by before the bound.
    grew_mib = (peak[0] - before) / 1024
    assert grew_mib < 48, f"the worker grew {grew_mib:.0f} MiB during the flood"
    end = await hostile.turn("flood", "plain after", ["done", "error"])
    assert end["state"] == "done", end
    await tools.call("remove_pane", name="flood")


async def test_answers_to_no_request_with_huge_ids_cost_nothing(hostile: Hostile) -> None:
    tools = hostile.tools
    await tools.call("start_pane", name="ids", profile="fake")
    end = await hostile.turn("ids", "bigids", ENDS)
    assert end["state"] == "done", end
    text = (await tools.call("read_output", name="ids"))["text"]
    assert "still here" in text, text
    await tools.call("remove_pane", name="ids")


async def test_a_session_that_cannot_start_fails_start_pane(hostile: Hostile) -> None:
    tools = hostile.tools
    err = await tools.error("start_pane", name="nos", profile="fakefail")
    assert err["code"] == "spawn_failed", err
    assert "Authentication required: log in first" in err["message"], err
    # An agent that exits before its session: its own words on stderr are the reason.
    err = await tools.error("start_pane", name="gone", profile="fakeexit")
    assert err["code"] == "spawn_failed", err
    assert "no credentials in ~/.fake (run fake login)" in err["message"], err
    names = {p["name"] for p in (await tools.call("list_panes"))["panes"]}
    assert names == {"other"}, names
    await hostile.bystander_answers()
    await apoll(lambda: len(hostile.procs()) == 1, 10, what="only the bystander's agent left")
