"""The demo agent driven through every pane tool by the official SDK client over stdio."""

from __future__ import annotations

import os

import psutil
import pytest

from tests.conftest import Tools
from tests.faults import supervisor_of

pytestmark = pytest.mark.anyio


async def test_a_full_turn_cycle_with_dialogs(tools: Tools) -> None:
    pane = (await tools.call("start_pane", name="demo1", profile="demo"))["pane"]
    assert pane["profile"] == "demo" and pane["agent"] == "demo"
    idle = await tools.wait("demo1", until=["idle"])
    assert idle["state"] == "idle" and idle["turn"] == 0 and idle["source"] == "osc7501"

    sent = await tools.call("send_input", name="demo1", text="hello there")
    assert sent["turn"] in (0, 1)
    working = await tools.wait("demo1", after=idle["seq"], until=["working"])
    assert working["turn"] == 1
    done = await tools.wait("demo1", after=working["seq"])
    assert (done["state"], done["turn"], done["source"]) == ("done", 1, "osc7501")
    out = await tools.call("read_output", name="demo1")
    assert "reply: hello there" in out["text"]
    assert "\x1b" not in out["text"] and "7501" not in out["text"]
    assert out["state"] == "done" and out["turn"] == 1

    await tools.call("send_input", name="demo1", text="dialog make deploy")
    blocked = await tools.wait("demo1", after=done["seq"])
    assert (blocked["state"], blocked["kind"], blocked["turn"]) == ("blocked", "permission", 2)
    refused = await tools.error("send_input", name="demo1", text="sneaky")
    assert refused["code"] == "pane_blocked"
    screen = (await tools.call("read_output", name="demo1"))["text"]
    assert "sneaky" not in screen and "› Allow once" in screen

    await tools.call("answer_dialog", name="demo1", answer="allow_once", expect_turn=2)
    allowed = await tools.wait("demo1", after=blocked["seq"], until=["done"])
    assert (allowed["state"], allowed["turn"]) == ("done", 2)
    assert "allowed" in (await tools.call("read_output", name="demo1", lines=10))["text"]

    await tools.call("send_input", name="demo1", text="dialog rm -rf /")
    blocked2 = await tools.wait("demo1", after=allowed["seq"], until=["blocked"])
    assert blocked2["turn"] == 3
    await tools.call("answer_dialog", name="demo1", answer="deny_once")
    cancelled = await tools.wait("demo1", after=blocked2["seq"])
    assert (cancelled["state"], cancelled["turn"]) == ("cancelled", 3)
    assert "denied" in (await tools.call("read_output", name="demo1", lines=5))["text"]

    removed = await tools.call("remove_pane", name="demo1")
    assert removed["exit_code"] is not None
    assert not psutil.pid_exists(pane["pid"]) or psutil.Process(pane["pid"]).status() == "zombie"
    assert (await tools.call("list_panes"))["panes"] == []


async def test_answer_dialog_refuses_without_a_dialog_or_at_the_wrong_turn(tools: Tools) -> None:
    await tools.call("start_pane", name="d", profile="demo")
    idle = await tools.wait("d", until=["idle"])
    assert (await tools.error("answer_dialog", name="d", answer="allow_once"))[
        "code"
    ] == "no_dialog"
    await tools.call("send_input", name="d", text="dialog ls")
    blocked = await tools.wait("d", after=idle["seq"], until=["blocked"])
    wrong = await tools.error("answer_dialog", name="d", answer="allow_once", expect_turn=7)
    assert wrong["code"] == "cursor_mismatch"
    bad = await tools.error("answer_dialog", name="d", answer="always_allow")
    assert bad["code"] == "invalid_argument"
    # Nothing was pressed: still blocked at the same seq.
    assert (await tools.call("get_status", name="d"))["seq"] == blocked["seq"]
    await tools.call("remove_pane", name="d")


async def test_list_panes_shows_a_worker_process_per_pane(tools: Tools) -> None:
    for name in ("a", "b"):
        await tools.call("start_pane", name=name, profile="demo")
    panes = (await tools.call("list_panes"))["panes"]
    assert [p["name"] for p in panes] == ["a", "b"]
    workers = {p["worker_pid"] for p in panes}
    assert len(workers) == 2
    supervisor_pids = {p.pid for p in psutil.Process(os.getpid()).children()}
    for pane in panes:
        assert pane["worker_pid"] not in supervisor_pids  # workers belong to the supervisor
        assert psutil.Process(pane["pid"]).ppid() == pane["worker_pid"]
        worker = psutil.Process(pane["worker_pid"])
        # The supervisor's (or its worker template's) child, not ours.
        assert supervisor_of(worker.pid) in supervisor_pids
        assert pane["pid"] != worker.ppid()
    for name in ("a", "b"):
        await tools.call("remove_pane", name=name)


async def test_wait_output_and_interrupt(tools: Tools) -> None:
    await tools.call("start_pane", name="w", profile="demo")
    idle = await tools.wait("w", until=["idle"])
    await tools.call("send_input", name="w", text="find me 42")
    match = await tools.call(
        "wait_output", name="w", pattern=r"reply: find me \d+", regex=True, timeout_s=20
    )
    assert match["matched"] and match["line"].startswith("reply: find me 42")
    missing = await tools.call("wait_output", name="w", pattern="never-printed", timeout_s=0.5)
    assert missing == {"matched": False, "line": None, "seq": missing["seq"]}
    done = await tools.wait("w", after=idle["seq"], until=["done"])
    await tools.call("interrupt_pane", name="w")
    assert (await tools.call("wait_output", name="w", pattern="^C", timeout_s=10))["matched"]
    assert (await tools.call("get_status", name="w"))["seq"] >= done["seq"]
    await tools.call("remove_pane", name="w")


async def test_a_long_multi_line_prompt_arrives_whole_as_one_turn(tools: Tools) -> None:
    await tools.call("start_pane", name="long", profile="demo")
    idle = await tools.wait("long", until=["idle"])
    words = [f"w{i:04d}" for i in range(1200)]
    lines = [" ".join(words[i : i + 12]) for i in range(0, len(words), 12)]
    sent = await tools.call("send_input", name="long", text="\n".join(lines))
    done = await tools.wait("long", after=idle["seq"], until=["done"])
    # The demo enables bracketed paste: the 100 lines are one prompt, so one turn.
    assert done["turn"] == 1 and sent["turn"] in (0, 1)
    text = (await tools.call("read_output", name="long", scrollback=True))["text"]
    reply = text[text.index("reply: ") :]
    flat = "".join(reply.split())
    assert "".join(words) in flat, "some of the prompt was lost"
    await tools.call("remove_pane", name="long")


async def test_an_unknown_tool_gets_the_json_error_object(tools: Tools) -> None:
    error = await tools.error("start_the_world")
    assert error["code"] == "not_found"
    assert (await tools.call("list_panes"))["panes"] == []


async def test_interrupt_pane_on_a_choice_sends_the_kinds_cancel_key(tools: Tools) -> None:
    """The demo's dialog ignores Ctrl-C, as Claude Code's start-up offer does: the kind's
    documented key (Esc) is what interrupt_pane sends while the pane reads blocked."""
    await tools.call("start_pane", name="esc", profile="demo")
    idle = await tools.wait("esc", until=["idle"])
    await tools.call("send_input", name="esc", text="dialog rm -rf build")
    blocked = await tools.wait("esc", after=idle["seq"], until=["blocked"])
    await tools.call("interrupt_pane", name="esc")
    ended = await tools.wait("esc", after=blocked["seq"], until=["done", "cancelled", "idle"])
    assert (ended["state"], ended["turn"]) == ("cancelled", blocked["turn"]), ended
    assert (await tools.call("wait_output", name="esc", pattern="denied", timeout_s=5))["matched"]
    await tools.call("remove_pane", name="esc")
