"""Receipts against real demo-agent panes (coordination scenarios 9-20).

relay returns a receipt once the prompt's turn began; an outstanding receipt blocks new
prompts; collection returns exactly that turn (never a later one); batches in request
order or first-to-settle; a blocked turn stays collectable; ambiguous deliveries stay
reserved until abandoned on a settled pane (and notified as ``receipt_ambiguous``);
targets not leased by the caller are refused with nothing typed; a re-created pane fails
its receipts; no record holds content.
"""

from __future__ import annotations

import json
import secrets
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import msgspec
import pytest

from supervisor.store.locks import hold_sync
from supervisor.store.statedir import atomic_write
from tests.conftest import Tools
from tests.control.conftest import Coord, stdio_service
from tests.control.support import (
    AUTHORITY_SHA,
    Controller,
    acquire,
    leaked,
    pane_info,
    pane_lease_records,
    receipt_records,
    record_texts,
    send_signal,
)
from tests.faults import sigkill_all
from tests.notify.listeners import Recorder
from tests.polling import apoll

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def hook() -> Iterator[Recorder]:
    """A webhook hearing this module's service's ``receipt_ambiguous`` events."""
    with Recorder() as recorder:
        yield recorder


@pytest.fixture(scope="module")
async def coord(tmp_path_factory: pytest.TempPathFactory, hook: Recorder) -> AsyncIterator[Coord]:
    """The module's stdio service, with notifications to ``hook``."""
    tmp = tmp_path_factory.mktemp("coord")
    notify = tmp / "notify.json"
    webhook = {"url": hook.url, "events": ["receipt_ambiguous"]}
    notify.write_text(json.dumps({"webhooks": [webhook]}))
    notify.chmod(0o600)
    async with stdio_service(tmp, PANEWARDEN_NOTIFY=str(notify)) as running:
        yield running


SETTLE_S = 30


async def receipt(tools: Tools, receipt_id: str) -> dict[str, Any]:
    """The receipt's entry in ``receipt_list``."""
    (entry,) = [
        r for r in (await tools.call("receipt_list"))["receipts"] if r["receipt"] == receipt_id
    ]
    return dict(entry)


async def collect(ctl: Controller, *receipts: str, mode: str = "all") -> dict[str, Any]:
    return await ctl.call(
        "collect_handoffs", receipts=list(receipts), mode=mode, timeout_s=SETTLE_S
    )


async def test_relay_returns_a_pending_receipt_once_the_turn_began(coord: Coord) -> None:
    # Scenario 9.
    ctl = await acquire(coord.tools, "s09")
    await ctl.reviewer("s09", profile="slow")
    idle = await coord.tools.wait("s09", until=["idle"])
    got = await ctl.call("relay", name="s09", text="first prompt")
    now = await coord.tools.call("get_status", name="s09")
    assert (now["state"], now["turn"]) == ("working", idle["turn"] + 1), now
    entry = await receipt(coord.tools, got["receipt"])
    assert (entry["state"], entry["turn"]) == ("pending", idle["turn"] + 1), entry
    assert idle["seq"] <= entry["cursor"] < now["seq"], (idle, entry, now)
    # The pane's history shows the turn starting after the cursor taken before the input.
    began = await coord.tools.wait("s09", after=entry["cursor"], until=["working"])
    assert began["turn"] == entry["turn"]
    done = await collect(ctl, got["receipt"])
    assert [c["status"]["state"] for c in done["completed"]] == ["done"], done


async def test_second_relay_is_refused_while_a_receipt_is_outstanding(coord: Coord) -> None:
    # Scenario 10.
    ctl = await acquire(coord.tools, "s10")
    await ctl.reviewer("s10", profile="slow")
    await ctl.reviewer("s10-other")
    first = await ctl.call("relay", name="s10", text="first prompt")
    marker = f"second {secrets.token_hex(4)}"
    attempts: list[tuple[str, dict[str, Any]]] = [
        ("relay", {"name": "s10", "text": marker}),
        ("handoff", {"name": "s10", "text": marker, "timeout_s": 5}),
        (
            "batch_handoff",
            {
                "requests": [
                    {"name": "s10-other", "text": marker},
                    {"name": "s10", "text": marker},
                ],
                "mode": "all",
                "timeout_s": 5,
            },
        ),
    ]
    for tool, args in attempts:
        refused = await ctl.error(tool, **args)
        assert refused["code"] == "receipt_outstanding", (tool, refused)
        assert first["receipt"] in refused["message"]
    done = await collect(ctl, first["receipt"])
    assert [c["status"]["turn"] for c in done["completed"]] == [1], done
    for name in ("s10", "s10-other"):
        screen = await coord.tools.call("read_output", name=name, lines=200)
        assert marker not in screen["text"], f"typed into {name}"
    assert (await coord.tools.call("get_status", name="s10-other"))["turn"] == 0
    # Once collected, the pane takes the next prompt.
    nxt = await ctl.call("handoff", name="s10", text=marker, timeout_s=SETTLE_S)
    assert [c["status"]["turn"] for c in nxt["completed"]] == [2], nxt


@pytest.mark.parametrize("profile", ["demo", "acp"])
async def test_collect_returns_that_turn_and_replays_it_until_the_pane_moves_on(
    coord: Coord, profile: str
) -> None:
    # Scenarios 11 and 12, on a terminal pane and on an ACP pane (fake agent).
    pane = "s11" if profile == "demo" else f"s11-{profile}"
    ctl = await acquire(coord.tools, pane)
    await ctl.reviewer(pane, profile=profile)
    first_text = f"first {secrets.token_hex(4)}"
    first = (await ctl.call("relay", name=pane, text=first_text))["receipt"]
    got = await collect(ctl, first)
    (item,) = got["completed"]
    assert (item["receipt"], item["status"]["state"], item["status"]["turn"]) == (first, "done", 1)
    assert f"reply: {first_text}" in item["output"]
    assert item["cut"] == "turn", item
    assert (await receipt(coord.tools, first))["state"] == "completed"
    again = await collect(ctl, first)
    assert again == got, "a second collection of a settled pane must return the same result"

    # A later turn: the first receipt's replay keeps its status and returns no output.
    later_text = f"later {secrets.token_hex(4)}"
    later = await ctl.call("handoff", name=pane, text=later_text, timeout_s=SETTLE_S)
    assert [c["status"]["turn"] for c in later["completed"]] == [2], later
    later_output = later["completed"][0]["output"]
    assert f"reply: {later_text}" in later_output
    # That turn's output only: it starts at its own prompt line, and the first turn's
    # reply, still on the screen above it, is not part of it.
    assert later_output.splitlines()[0].endswith(later_text), later_output
    assert first_text not in later_output, later_output
    replay = await collect(ctl, first)
    (old,) = replay["completed"]
    assert old["status"] == item["status"]
    assert old["output"] is None and old["cut"] is None
    assert later_text not in str(replay)


async def test_batch_all_returns_results_in_request_order(coord: Coord) -> None:
    # Scenario 13: the slow pane is asked first and settles last, and is listed first.
    ctl = await acquire(coord.tools, "s13")
    await ctl.reviewer("s13-slow", profile="slow")
    await ctl.reviewer("s13-fast")
    got = await ctl.call(
        "batch_handoff",
        requests=[
            {"name": "s13-slow", "text": "slow one"},
            {"name": "s13-fast", "text": "fast one"},
        ],
        mode="all",
        timeout_s=SETTLE_S,
    )
    assert [c["name"] for c in got["completed"]] == ["s13-slow", "s13-fast"], got
    assert [c["status"]["state"] for c in got["completed"]] == ["done", "done"]
    assert "reply: slow one" in got["completed"][0]["output"]
    assert "reply: fast one" in got["completed"][1]["output"]
    assert got["failed"] == [] and got["pending"] == []


async def test_batch_first_returns_one_and_leaves_the_other_pending(coord: Coord) -> None:
    # Scenario 14.
    ctl = await acquire(coord.tools, "s14")
    await ctl.reviewer("s14-fast")
    await ctl.reviewer("s14-slow", profile="slow")
    got = await ctl.call(
        "batch_handoff",
        requests=[
            {"name": "s14-fast", "text": "fast one"},
            {"name": "s14-slow", "text": "slow one"},
        ],
        mode="first",
        timeout_s=SETTLE_S,
    )
    assert [c["name"] for c in got["completed"]] == ["s14-fast"], got
    (other,) = got["pending"]
    assert got["failed"] == []
    entry = await receipt(coord.tools, other)
    assert (entry["name"], entry["state"]) == ("s14-slow", "pending")
    assert (await coord.tools.call("get_status", name="s14-slow"))["state"] == "working"
    later = await collect(ctl, other)
    assert [(c["name"], c["status"]["state"]) for c in later["completed"]] == [("s14-slow", "done")]
    assert "reply: slow one" in later["completed"][0]["output"]
    assert (await receipt(coord.tools, other))["state"] == "completed"


async def test_blocked_turn_is_returned_blocked_then_collected_done(coord: Coord) -> None:
    # Scenario 15.
    ctl = await acquire(coord.tools, "s15")
    await ctl.reviewer("s15")
    got = await ctl.call("handoff", name="s15", text="please open a dialog", timeout_s=SETTLE_S)
    (item,) = got["completed"]
    assert (item["status"]["state"], item["status"]["kind"]) == ("blocked", "permission"), got
    assert "Permission required" in item["output"]
    assert (await receipt(coord.tools, item["receipt"]))["state"] == "pending"
    await coord.tools.call("answer_dialog", name="s15", answer="allow_once")
    done = await collect(ctl, item["receipt"])
    (final,) = done["completed"]
    assert (final["status"]["state"], final["status"]["turn"]) == ("done", item["status"]["turn"])
    assert "allowed" in final["output"]
    assert (await receipt(coord.tools, item["receipt"]))["state"] == "completed"


async def test_collecting_right_after_the_answer_never_returns_the_answered_dialog(
    coord: Coord,
) -> None:
    # The controller answers the dialog and collects at once, before the program has
    # reacted (the demo agent takes 50 ms to know an Esc is a lone Esc): the receipt
    # must wait for what the turn did next, not return the dialog it just answered.
    ctl = await acquire(coord.tools, "s15d")
    await ctl.reviewer("s15d")
    for answer, settled, shown in (
        ("deny_once", "cancelled", "denied"),
        ("allow_once", "done", "allowed"),
    ):
        got = await ctl.call(
            "handoff", name="s15d", text="please open a dialog", timeout_s=SETTLE_S
        )
        (item,) = got["completed"]
        assert item["status"]["state"] == "blocked", got
        await coord.tools.call("answer_dialog", name="s15d", answer=answer)
        done = await collect(ctl, item["receipt"])
        (final,) = done["completed"]
        assert (final["status"]["state"], final["status"]["turn"]) == (
            settled,
            item["status"]["turn"],
        ), (answer, done)
        assert shown in final["output"]


async def test_ambiguous_delivery_stays_reserved_until_abandoned_on_a_settled_pane(
    coord: Coord, hook: Recorder
) -> None:
    # Scenario 16: the program is stopped, so the typed prompt is not taken (the worker
    # reports the delivery ambiguous); when it runs on, it takes the prompt late.
    ctl = await acquire(coord.tools, "s16")
    await ctl.reviewer("s16", profile="slow")
    pane = await pane_info(coord.tools, "s16")
    program = send_signal(pane["pid"], signal.SIGSTOP)
    try:
        refused = await ctl.error("relay", name="s16", text="taken late")
        assert refused["code"] == "delivery_ambiguous", refused
        (entry,) = [r for r in receipt_records(coord.state).values() if r.name == "s16"]
        assert entry.state == "reserved"
        # The operator hears of it: the notification names the pane, not the prompt.
        await apoll(
            lambda: any(a.body["pane"] == "s16" for a in hook.arrivals), 5, what="the webhook"
        )
        (heard,) = [a for a in hook.arrivals if a.body["pane"] == "s16"]
        assert heard.body["event"] == "receipt_ambiguous", heard.body
        assert b"taken late" not in heard.raw
        blocked = await ctl.error("relay", name="s16", text="refused")
        assert blocked["code"] == "receipt_outstanding", blocked
        seen = await coord.tools.call("get_status", name="s16")
    finally:
        send_signal(program[0], signal.SIGCONT)
    await coord.tools.wait("s16", after=seen["seq"], until=["working"])
    busy = await ctl.error("receipt_abandon", receipt=entry.receipt_id)
    assert busy["code"] == "pane_busy", busy
    assert (await ctl.error("relay", name="s16", text="refused"))["code"] == "receipt_outstanding"
    await coord.tools.wait("s16", after=seen["seq"], until=["done"], timeout_s=SETTLE_S)
    abandoned = await ctl.call("receipt_abandon", receipt=entry.receipt_id)
    assert abandoned["state"] == "abandoned"
    assert (await ctl.error("receipt_abandon", receipt=entry.receipt_id))["code"] == "lease_state"
    nxt = await ctl.call("handoff", name="s16", text="after abandon", timeout_s=SETTLE_S)
    assert [c["status"]["state"] for c in nxt["completed"]] == ["done"], nxt


async def test_worker_killed_during_delivery_leaves_the_receipt_reserved(coord: Coord) -> None:
    # Scenario 16, the worker killed with the prompt on its way: nobody can know whether
    # it was typed, so the receipt stays reserved; the lost pane is settled: abandon works.
    ctl = await acquire(coord.tools, "s16w")
    lease = await ctl.reviewer("s16w")
    pane = await pane_info(coord.tools, "s16w")
    program = send_signal(pane["pid"], signal.SIGSTOP)
    outcome: dict[str, Any] = {}

    async def relay() -> None:
        outcome["error"] = await ctl.error("relay", name="s16w", text="lost on its way")

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(relay)
            reserved = await apoll(
                lambda: [r for r in receipt_records(coord.state).values() if r.name == "s16w"], 20
            )
            assert reserved, "no receipt was reserved"
            send_signal(pane["worker_pid"], signal.SIGKILL)
    finally:
        sigkill_all([program])
    assert outcome["error"]["code"] in ("worker_lost", "delivery_ambiguous"), outcome
    (entry,) = [r for r in receipt_records(coord.state).values() if r.name == "s16w"]
    assert entry.state == "reserved"
    assert (await coord.tools.call("get_status", name="s16w"))["lifecycle"] == "lost"
    assert (await ctl.call("receipt_abandon", receipt=entry.receipt_id))["state"] == "abandoned"
    done = await ctl.call(
        "lease_reconcile", lease_type="reviewer", lease_id=lease["lease_id"], dry_run=False
    )
    assert done["action"] == "terminalised"


async def test_targets_not_leased_by_the_caller_are_refused_with_nothing_typed(
    coord: Coord,
) -> None:
    # Scenario 17: an unleased pane, another controller's pane, an adopted pane, no pane.
    ctl = await acquire(coord.tools, "s17")
    other = await acquire(coord.tools, "s17-other")
    await ctl.reviewer("s17-mine")
    await other.reviewer("s17-theirs")
    await coord.tools.call("start_pane", name="s17-plain", profile="demo", cwd="/")
    await coord.tools.call("start_pane", name="s17-adopted", profile="demo", cwd="/")
    adopted_at = await coord.tools.wait("s17-adopted", until=["idle"])
    await ctl.call(
        "pane_adopt",
        name="s17-adopted",
        expected_seq=adopted_at["seq"],
        authority_ref="cleanup",
        authority_sha256=AUTHORITY_SHA,
    )
    names = ["s17-mine", "s17-theirs", "s17-plain", "s17-adopted"]
    await coord.tools.wait("s17-plain", until=["idle"])
    before = {n: await coord.tools.call("read_output", name=n, lines=200) for n in names}
    marker = f"never {secrets.token_hex(4)}"
    expected = {
        "s17-theirs": "lease_conflict",
        "s17-plain": "lease_state",
        "s17-adopted": "lease_state",
        "s17-gone": "not_found",
    }
    for name, code in expected.items():
        for tool, args in (
            ("relay", {"name": name, "text": marker}),
            ("handoff", {"name": name, "text": marker, "timeout_s": 5}),
            # One admissible target beside it: the batch is refused whole.
            (
                "batch_handoff",
                {
                    "requests": [
                        {"name": "s17-mine", "text": marker},
                        {"name": name, "text": marker},
                    ],
                    "mode": "all",
                    "timeout_s": 5,
                },
            ),
        ):
            refused = await ctl.error(tool, **args)
            assert refused["code"] == code, (tool, name, refused)
    after = {n: await coord.tools.call("read_output", name=n, lines=200) for n in names}
    assert after == before, "a refused prompt typed something"
    assert not [r for r in receipt_records(coord.state).values() if r.controller_id == "s17"]
    await coord.tools.call("remove_pane", name="s17-plain")


async def test_a_closing_or_releasing_lease_refuses_new_prompts(coord: Coord) -> None:
    # Scenario 18: the lease record reads `closing` (a close under way, or one a crash
    # interrupted) or `releasing`; relay refuses the pane, with nothing typed.
    ctl = await acquire(coord.tools, "s18")
    lease = await ctl.reviewer("s18")
    idle = await coord.tools.wait("s18", until=["idle"])
    path = coord.state / "leases" / "reviewer" / f"{lease['lease_id']}.json"
    for state in ("closing", "releasing", "active"):
        with hold_sync(coord.state / "locks", "reviewer"):
            record = pane_lease_records(coord.state)[lease["lease_id"]]
            atomic_write(path, msgspec.json.encode(msgspec.structs.replace(record, state=state)))
        if state == "active":
            break
        refused = await ctl.error("relay", name="s18", text="not now")
        assert refused["code"] == "lease_state", (state, refused)
        now = await coord.tools.call("get_status", name="s18")
        assert now["seq"] == idle["seq"]
    done = await ctl.call("handoff", name="s18", text="active again", timeout_s=SETTLE_S)
    assert [c["status"]["state"] for c in done["completed"]] == ["done"], done
    assert "not now" not in done["completed"][0]["output"]

    # A close under way: the program is stopped, so the worker's close waits out its
    # kill grace, and the lease reads `closing` meanwhile.
    seq = done["completed"][0]["status"]["seq"]
    pane = await pane_info(coord.tools, "s18")
    program = send_signal(pane["pid"], signal.SIGSTOP)
    closed: dict[str, Any] = {}

    async def close() -> None:
        closed.update(
            await ctl.call("reviewer_close", lease_id=lease["lease_id"], expected_seq=seq)
        )

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(close)
            closing = await apoll(
                lambda: pane_lease_records(coord.state)[lease["lease_id"]].state == "closing", 20
            )
            assert closing, "the lease never read closing"
            refused = await ctl.error("relay", name="s18", text="while closing")
            assert refused["code"] == "lease_state", refused
    finally:
        sigkill_all([program])
    assert closed["state"] == "closed", closed


async def test_a_recreated_pane_fails_its_receipts_as_identity_changed(coord: Coord) -> None:
    # Scenario 19: the pane's worker dies mid-turn; the lease is reconciled and a new
    # pane of the same name is started; the old receipt never collects the new pane.
    ctl = await acquire(coord.tools, "s19")
    lease = await ctl.reviewer("s19", profile="slow")
    pending = (await ctl.call("relay", name="s19", text="old pane"))["receipt"]
    pane = await pane_info(coord.tools, "s19")
    send_signal(pane["worker_pid"], signal.SIGKILL)
    await coord.tools.wait("s19", until=["lost"])
    done = await ctl.call(
        "lease_reconcile", lease_type="reviewer", lease_id=lease["lease_id"], dry_run=False
    )
    assert done["action"] == "terminalised", done
    await ctl.reviewer("s19")
    assert (await pane_info(coord.tools, "s19"))["worker_pid"] != pane["worker_pid"]
    got = await collect(ctl, pending)
    assert got["completed"] == [] and got["pending"] == []
    assert got["failed"] == [
        {"receipt": pending, "name": "s19", "stage": "collect", "code": "identity_changed"}
    ]
    entry = await receipt(coord.tools, pending)
    assert (entry["state"], entry["failure_code"]) == ("failed", "identity_changed")
    # The new pane takes prompts under its own lease.
    fresh = await ctl.call("handoff", name="s19", text="new pane", timeout_s=SETTLE_S)
    assert [c["status"]["turn"] for c in fresh["completed"]] == [1], fresh


async def test_receipts_and_failures_hold_no_prompt_output_argv_or_token(coord: Coord) -> None:
    # Scenario 20.
    ctl = await acquire(coord.tools, "s20")
    await ctl.reviewer("s20")
    await ctl.reviewer("s20-slow", profile="slow")
    prompt = f"confidential {secrets.token_hex(8)}"
    done = await ctl.call("handoff", name="s20", text=prompt, timeout_s=SETTLE_S)
    assert f"reply: {prompt}" in done["completed"][0]["output"]
    pending = await ctl.call("relay", name="s20-slow", text=prompt)
    failures = [
        await ctl.error("relay", name="s20-slow", text=prompt),
        await ctl.error("relay", name="s20-gone", text=prompt),
        await coord.tools.error(
            "relay", creds={**ctl.creds, "fence_token": "x" * 43}, name="s20", text=prompt
        ),
    ]
    await collect(ctl, pending["receipt"])
    secrets_ = [
        prompt,
        f"reply: {prompt}",
        "working on it",
        "supervisor.demo.agent",
        sys.executable,
        coord.marks.run,
        ctl.creds["fence_token"],
    ]
    lists = [await coord.tools.call("receipt_list"), await coord.tools.call("reviewer_list")]
    assert leaked(secrets_, *record_texts(coord.state), *lists, *failures) == []
    assert len([r for r in receipt_records(coord.state).values() if r.controller_id == "s20"]) == 2


async def test_prompts_with_control_characters_are_refused_with_nothing_typed(coord: Coord) -> None:
    # As send_input: Enter inside the text would start a second turn under one receipt,
    # Ctrl-C would interrupt, an escape sequence would drive the program's screen.
    ctl = await acquire(coord.tools, "s20c")
    await ctl.reviewer("s20c")
    idle = await coord.tools.wait("s20c", until=["idle"])
    for text in ("one\rtwo", "stop\x03", "\x1b[2Jclear", "bell\x07", "c1\x9b"):
        for tool, args in (
            ("relay", {"name": "s20c", "text": text}),
            ("handoff", {"name": "s20c", "text": text, "timeout_s": 5}),
            (
                "batch_handoff",
                {"requests": [{"name": "s20c", "text": text}], "mode": "all", "timeout_s": 5},
            ),
        ):
            refused = await ctl.error(tool, **args)
            assert refused["code"] == "invalid_argument", (tool, text, refused)
    now = await coord.tools.call("get_status", name="s20c")
    assert (now["seq"], now["turn"]) == (idle["seq"], 0)
    assert not [r for r in receipt_records(coord.state).values() if r.controller_id == "s20c"]
    # Newline and tab are text, as for send_input.
    done = await ctl.call("handoff", name="s20c", text="a\ttabbed prompt", timeout_s=SETTLE_S)
    assert [c["status"]["turn"] for c in done["completed"]] == [1], done
