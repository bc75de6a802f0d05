"""Reviewer lanes, adopted panes, the lease inventory and reconcile, against real demo
panes (coordination scenarios 21-30)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import sys
from typing import Any

import anyio
import pytest

from tests.conftest import REPO, service_env
from tests.control.conftest import Coord, coordination_env
from tests.control.support import (
    AUTHORITY_SHA,
    CHECKPOINT_SHA,
    acquire,
    pane_info,
    pane_lease_records,
    send_signal,
)
from tests.faults import Marks, alive, key_of, sigkill_all
from tests.polling import apoll

pytestmark = pytest.mark.anyio

SETTLE_S = 30


async def lease_of(coord: Coord, kind: str, lease_id: str) -> dict[str, Any]:
    (lease,) = [
        x for x in (await coord.tools.call(f"{kind}_list"))["leases"] if x["lease_id"] == lease_id
    ]
    return dict(lease)


async def inventory(coord: Coord, name: str) -> list[dict[str, Any]]:
    return [p for p in (await coord.tools.call("lease_inventory"))["panes"] if p["name"] == name]


async def test_reviewer_start_provisions_then_activates_and_a_failed_start_leaves_nothing(
    coord: Coord,
) -> None:
    # Scenario 21.
    ctl = await acquire(coord.tools, "s21")
    seen: list[str] = []
    started: dict[str, Any] = {}

    async def start() -> None:
        started.update(await ctl.reviewer("s21"))

    async with anyio.create_task_group() as group:
        group.start_soon(start)

        # The lease record exists before the pane does (read without a lock, as lists
        # do): every state it shows until the start returns.
        def look() -> bool:
            for lease in pane_lease_records(coord.state).values():
                if lease.name == "s21" and (not seen or seen[-1] != lease.state):
                    seen.append(lease.state)
            return bool(started)

        assert await apoll(look, 60, interval_s=0.005), "the start never returned"
    assert seen[0] == "provisioning" and set(seen) <= {"provisioning", "active"}, seen
    assert (await lease_of(coord, "reviewer", started["lease_id"]))["state"] == "active"
    assert (await pane_info(coord.tools, "s21"))["lease"]["lease_id"] == started["lease_id"]

    workers_before = coord.marks.workers()
    for args, code in (
        ({"profile": "broken", "cwd": "/"}, "spawn_failed"),
        ({"profile": "demo", "cwd": "/nonexistent-dir"}, "invalid_argument"),
        ({"profile": "no-such-profile", "cwd": "/"}, "profile_not_found"),
    ):
        refused = await ctl.error("reviewer_start", name="s21-bad", purpose="fails", **args)
        assert refused["code"] == code, refused
    failed = [
        x for x in (await coord.tools.call("reviewer_list"))["leases"] if x["name"] == "s21-bad"
    ]
    assert [(x["state"], x["failure"]) for x in failed] == [
        ("failed_closed", "spawn_failed"),
        ("failed_closed", "invalid_argument"),
        ("failed_closed", "profile_not_found"),
    ]
    assert not [
        p for p in (await coord.tools.call("list_panes"))["panes"] if p["name"] == "s21-bad"
    ]
    assert not coord.marks.pane_procs(2), "the broken program left a process"
    assert coord.marks.workers() <= workers_before, "a failed start left its worker"


async def test_a_leased_pane_refuses_plain_input_and_removal(coord: Coord) -> None:
    # Scenario 22.
    ctl = await acquire(coord.tools, "s22")
    await ctl.reviewer("s22")
    idle = await coord.tools.wait("s22", until=["idle"])
    assert (await coord.tools.error("send_input", name="s22", text="plain"))[
        "code"
    ] == "pane_leased"
    assert (await coord.tools.error("remove_pane", name="s22"))["code"] == "pane_leased"
    now = await pane_info(coord.tools, "s22")
    assert (now["lifecycle"], now["seq"], now["turn"]) == ("running", idle["seq"], 0)
    # Read tools work on it as on any pane.
    assert "demo agent" in (await coord.tools.call("read_output", name="s22"))["text"]


async def test_reviewer_close_refuses_a_stale_seq_and_a_busy_pane(coord: Coord) -> None:
    # Scenarios 23 and 24.
    ctl = await acquire(coord.tools, "s23")
    lease = await ctl.reviewer("s23", profile="slow")
    idle = await coord.tools.wait("s23", until=["idle"])
    for stale in (idle["seq"] - 1, idle["seq"] + 1):
        refused = await ctl.error("reviewer_close", lease_id=lease["lease_id"], expected_seq=stale)
        assert refused["code"] == "cursor_mismatch", refused
    assert (await lease_of(coord, "reviewer", lease["lease_id"]))["state"] == "active"
    assert (await pane_info(coord.tools, "s23"))["lifecycle"] == "running"

    pending = (await ctl.call("relay", name="s23", text="busy for a while"))["receipt"]
    working = await coord.tools.call("get_status", name="s23")
    assert working["state"] == "working"
    busy = await ctl.error(
        "reviewer_close", lease_id=lease["lease_id"], expected_seq=working["seq"]
    )
    assert busy["code"] == "pane_busy", busy
    await ctl.call("collect_handoffs", receipts=[pending], timeout_s=SETTLE_S)

    blocked = await ctl.call("handoff", name="s23", text="open a dialog", timeout_s=SETTLE_S)
    status = blocked["completed"][0]["status"]
    assert status["state"] == "blocked"
    busy = await ctl.error("reviewer_close", lease_id=lease["lease_id"], expected_seq=status["seq"])
    assert busy["code"] == "pane_busy", busy
    assert (await lease_of(coord, "reviewer", lease["lease_id"]))["state"] == "active"
    assert (await pane_info(coord.tools, "s23"))["state"] == "blocked"
    await coord.tools.call("answer_dialog", name="s23", answer="deny_once")
    done = await ctl.call(
        "collect_handoffs", receipts=[blocked["completed"][0]["receipt"]], timeout_s=SETTLE_S
    )
    closed = await ctl.call(
        "reviewer_close",
        lease_id=lease["lease_id"],
        expected_seq=done["completed"][0]["status"]["seq"],
    )
    assert closed["state"] == "closed"


@pytest.mark.parametrize("profile", ["demo", "acp"])
async def test_reviewer_close_captures_and_closes_in_one_step(coord: Coord, profile: str) -> None:
    # Scenario 25, on a terminal pane and on an ACP pane (fake agent).
    name = "s25" if profile == "demo" else f"s25-{profile}"
    ctl = await acquire(coord.tools, name)
    lease = await ctl.reviewer(name, profile=profile)
    done = await ctl.call("handoff", name=name, text="something to capture", timeout_s=SETTLE_S)
    seq = done["completed"][0]["status"]["seq"]
    pane = await pane_info(coord.tools, name)
    tree = [key_of(pane["pid"]), key_of(pane["worker_pid"])]
    assert None not in tree
    screen = await coord.tools.call("read_output", name=name, lines=10_000, scrollback=True)
    assert screen["seq"] == seq and "reply: something to capture" in screen["text"]
    closed = await ctl.call("reviewer_close", lease_id=lease["lease_id"], expected_seq=seq)
    assert (closed["state"], closed["closed_seq"]) == ("closed", seq)
    assert closed["capture_sha256"] == hashlib.sha256(screen["text"].encode()).hexdigest()
    assert [k for k in tree if k is not None and alive(k)] == []
    assert not [p for p in (await coord.tools.call("list_panes"))["panes"] if p["name"] == name]
    assert await lease_of(coord, "reviewer", lease["lease_id"]) == closed
    refused = await ctl.error("reviewer_close", lease_id=lease["lease_id"], expected_seq=seq)
    assert refused["code"] == "lease_state", refused


async def test_reviewer_cleanup_closes_only_settled_matching_panes(coord: Coord) -> None:
    # Scenario 26: idle (closed); working, blocked and lost (kept, with the reason);
    # another controller's (untouched).
    ctl = await acquire(coord.tools, "s26")
    other = await acquire(coord.tools, "s26-other")
    idle = await ctl.reviewer("s26-idle")
    working = await ctl.reviewer("s26-working", profile="slow")
    blocked = await ctl.reviewer("s26-blocked")
    lost = await ctl.reviewer("s26-lost")
    theirs = await other.reviewer("s26-theirs")
    await coord.tools.wait("s26-idle", until=["idle"])
    await ctl.call("handoff", name="s26-blocked", text="open a dialog", timeout_s=SETTLE_S)
    send_signal((await pane_info(coord.tools, "s26-lost"))["worker_pid"], signal.SIGKILL)
    await coord.tools.wait("s26-lost", until=["lost"])
    pending = (await ctl.call("relay", name="s26-working", text="long turn"))["receipt"]
    gone = "pane gone or re-created (reconcile the lease)"
    kept = {
        working["lease_id"]: "pane is working",
        blocked["lease_id"]: "pane is blocked",
        lost["lease_id"]: gone,
    }

    dry = await ctl.call("reviewer_cleanup")
    assert dry["dry_run"] is True
    assert dry["closed"] == [idle["lease_id"]], dry
    assert {p["lease_id"]: p["reason"] for p in dry["preserved"]} == kept
    names = {p["name"] for p in (await coord.tools.call("list_panes"))["panes"]}
    assert {"s26-idle", "s26-working", "s26-blocked", "s26-theirs"} <= names, (
        "a dry run closed a pane"
    )

    real = await ctl.call("reviewer_cleanup", dry_run=False)
    assert real["dry_run"] is False and real["closed"] == [idle["lease_id"]], real
    assert {p["lease_id"]: p["reason"] for p in real["preserved"]} == kept
    assert (await lease_of(coord, "reviewer", idle["lease_id"]))["capture_sha256"] is not None
    names = {p["name"] for p in (await coord.tools.call("list_panes"))["panes"]}
    assert "s26-idle" not in names and {"s26-working", "s26-blocked", "s26-theirs"} <= names
    for lease in (working, blocked, lost, theirs):
        assert (await lease_of(coord, "reviewer", lease["lease_id"]))["state"] == "active"
    await ctl.call("collect_handoffs", receipts=[pending], timeout_s=SETTLE_S)
    # Closing a lost pane by hand is refused too: its worker, and the screen, are gone.
    lost_at = await coord.tools.call("get_status", name="s26-lost")
    refused = await ctl.error(
        "reviewer_close", lease_id=lost["lease_id"], expected_seq=lost_at["seq"]
    )
    assert refused["code"] == "worker_lost", refused
    assert (await lease_of(coord, "reviewer", lost["lease_id"]))["state"] == "active"
    await ctl.call(
        "lease_reconcile", lease_type="reviewer", lease_id=lost["lease_id"], dry_run=False
    )


async def test_inventory_shows_unleased_then_matched_after_adoption(coord: Coord) -> None:
    # Scenarios 27 and 28 (adopting twice, a leased pane, a busy pane, a stale seq).
    ctl = await acquire(coord.tools, "s27")
    await coord.tools.call("start_pane", name="s27", profile="demo", cwd="/")
    idle = await coord.tools.wait("s27", until=["idle"])
    (entry,) = await inventory(coord, "s27")
    assert (entry["status"], entry["lease_id"]) == ("unleased", None)
    adopt = {"authority_ref": "cleanup", "authority_sha256": AUTHORITY_SHA}
    stale = await ctl.error("pane_adopt", name="s27", expected_seq=idle["seq"] + 1, **adopt)
    assert stale["code"] == "cursor_mismatch", stale
    lease = await ctl.call("pane_adopt", name="s27", expected_seq=idle["seq"], **adopt)
    assert (lease["lease_type"], lease["state"], lease["purpose"]) == (
        "adopted",
        "active",
        "cleanup",
    )
    (entry,) = await inventory(coord, "s27")
    assert (entry["status"], entry["lease_id"], entry["lease_type"]) == (
        "matched",
        lease["lease_id"],
        "adopted",
    )
    assert (await pane_info(coord.tools, "s27"))["lease"]["lease_type"] == "adopted"

    again = await ctl.error("pane_adopt", name="s27", expected_seq=idle["seq"], **adopt)
    assert again["code"] == "pane_leased", again
    other = await acquire(coord.tools, "s27-other")
    assert (await other.error("pane_adopt", name="s27", expected_seq=idle["seq"], **adopt))[
        "code"
    ] == "pane_leased"
    await other.reviewer("s27-reviewed")
    at = await coord.tools.wait("s27-reviewed", until=["idle"])
    assert (await ctl.error("pane_adopt", name="s27-reviewed", expected_seq=at["seq"], **adopt))[
        "code"
    ] == "pane_leased"
    await coord.tools.call("start_pane", name="s27-busy", profile="slow", cwd="/")
    busy_at = await coord.tools.wait("s27-busy", until=["idle"])
    await coord.tools.call("send_input", name="s27-busy", text="busy")
    working = await coord.tools.wait("s27-busy", after=busy_at["seq"], until=["working"])
    refused = await ctl.error("pane_adopt", name="s27-busy", expected_seq=working["seq"], **adopt)
    assert refused["code"] == "pane_busy", refused
    assert await inventory(coord, "s27-busy") == [
        {
            "name": "s27-busy",
            "status": "unleased",
            "lease_id": None,
            "lease_type": None,
            "controller_id": None,
            "lease_state": None,
            "lifecycle": "running",
        }
    ]
    assert [
        x["lease_id"]
        for x in (await coord.tools.call("adopted_list"))["leases"]
        if x["name"] == "s27"
    ] == [lease["lease_id"]]


def test_a_controller_cannot_adopt_its_own_pane(tmp_path: Any) -> None:
    # Scenario 28, the caller's own pane: only `panewarden ctl` in a pane has a pane
    # identity, so the service core is driven directly here (a real pane, real stores).
    marks = Marks(tmp_path)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    env = service_env(state, **coordination_env(marks))
    done = subprocess.run(
        [sys.executable, "-m", "tests.control.own_pane"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    try:
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split() == ["forbidden", "pane_leased"], done.stdout
    finally:
        sigkill_all(marks.everything())


async def test_adopted_close_refuses_a_stale_seq_and_closes_with_a_capture(coord: Coord) -> None:
    # Scenario 29.
    ctl = await acquire(coord.tools, "s29")
    await coord.tools.call("start_pane", name="s29", profile="demo", cwd="/")
    idle = await coord.tools.wait("s29", until=["idle"])
    await coord.tools.call("send_input", name="s29", text="before adoption")
    done = await coord.tools.wait("s29", after=idle["seq"], until=["done"])
    lease = await ctl.call(
        "pane_adopt",
        name="s29",
        expected_seq=done["seq"],
        authority_ref="cleanup",
        authority_sha256=AUTHORITY_SHA,
    )
    checkpoint = {"checkpoint_ref": "notes/s29.md", "checkpoint_sha256": CHECKPOINT_SHA}
    stale = await ctl.error(
        "adopted_close", lease_id=lease["lease_id"], expected_seq=done["seq"] - 1, **checkpoint
    )
    assert stale["code"] == "cursor_mismatch", stale
    assert (await pane_info(coord.tools, "s29"))["lifecycle"] == "running"
    assert (await ctl.error("relay", name="s29", text="no prompts"))["code"] == "lease_state"
    screen = await coord.tools.call("read_output", name="s29", lines=10_000, scrollback=True)
    closed = await ctl.call(
        "adopted_close", lease_id=lease["lease_id"], expected_seq=done["seq"], **checkpoint
    )
    assert (closed["state"], closed["closed_seq"]) == ("closed", done["seq"])
    assert closed["capture_sha256"] == hashlib.sha256(screen["text"].encode()).hexdigest()
    record = pane_lease_records(coord.state, "adopted")[lease["lease_id"]]
    assert (record.checkpoint_ref, record.checkpoint_sha256) == ("notes/s29.md", CHECKPOINT_SHA)
    assert not [p for p in (await coord.tools.call("list_panes"))["panes"] if p["name"] == "s29"]


async def test_reconcile_terminalises_only_leases_whose_pane_is_gone(coord: Coord) -> None:
    # Scenario 30.
    ctl = await acquire(coord.tools, "s30")
    gone = await ctl.reviewer("s30-gone")
    alive_lease = await ctl.reviewer("s30-alive")
    send_signal((await pane_info(coord.tools, "s30-gone"))["worker_pid"], signal.SIGKILL)
    await coord.tools.wait("s30-gone", until=["lost"])
    (entry,) = await inventory(coord, "s30-gone")
    assert (entry["status"], entry["lease_id"]) == ("missing", gone["lease_id"])

    args = {"lease_type": "reviewer", "lease_id": gone["lease_id"]}
    dry = await ctl.call("lease_reconcile", **args)
    assert (dry["action"], dry["state"]) == ("would_terminalise", "active"), dry
    assert (await lease_of(coord, "reviewer", gone["lease_id"]))["state"] == "active"
    real = await ctl.call("lease_reconcile", **args, dry_run=False)
    assert (real["action"], real["state"]) == ("terminalised", "failed_closed"), real
    assert (await lease_of(coord, "reviewer", gone["lease_id"]))["state"] == "failed_closed"
    assert await inventory(coord, "s30-gone") == []
    again = await ctl.call("lease_reconcile", **args, dry_run=False)
    assert again["action"] == "none"

    kept = await ctl.call(
        "lease_reconcile", lease_type="reviewer", lease_id=alive_lease["lease_id"], dry_run=False
    )
    assert (kept["action"], kept["state"]) == ("preserved", "active"), kept
    assert (await pane_info(coord.tools, "s30-alive"))["lifecycle"] == "running"
    other = await acquire(coord.tools, "s30-other")
    refused = await other.error(
        "lease_reconcile", lease_type="reviewer", lease_id=alive_lease["lease_id"]
    )
    assert refused["code"] == "lease_conflict", refused


async def test_a_worker_dying_in_the_closing_step_leaves_the_lease_closed(coord: Coord) -> None:
    # The program is stopped, so its screen is the capture; the worker is SIGKILLed once
    # the capture is recorded. The pane is gone either way: the lease is closed, with the
    # capture taken at expected_seq, and the lost pane is forgotten.
    ctl = await acquire(coord.tools, "s25w")
    lease = await ctl.reviewer("s25w")
    idle = await coord.tools.wait("s25w", until=["idle"])
    screen = await coord.tools.call("read_output", name="s25w", lines=10_000, scrollback=True)
    pane = await pane_info(coord.tools, "s25w")
    program = send_signal(pane["pid"], signal.SIGSTOP)
    closed: dict[str, Any] = {}

    async def close() -> None:
        closed.update(
            await ctl.call("reviewer_close", lease_id=lease["lease_id"], expected_seq=idle["seq"])
        )

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(close)
            closing = await apoll(
                lambda: pane_lease_records(coord.state)[lease["lease_id"]].capture_sha256, 20
            )
            assert closing, "the close never recorded its capture"
            # The worker SIGCONTs the program as it closes, so the close can end before
            # this kill lands (then the lease is closed by its own reply): both ends
            # must leave the lease closed with its capture.
            with contextlib.suppress(ProcessLookupError):
                os.kill(pane["worker_pid"], signal.SIGKILL)
    finally:
        sigkill_all([program])
    assert (closed["state"], closed["closed_seq"]) == ("closed", idle["seq"]), closed
    assert closed["capture_sha256"] == hashlib.sha256(screen["text"].encode()).hexdigest()
    assert not [p for p in (await coord.tools.call("list_panes"))["panes"] if p["name"] == "s25w"]
