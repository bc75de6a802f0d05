"""Coordination under concurrency, over HTTP with named clients (one identity each).

Two controllers racing ``controller_acquire`` for one controller id: exactly one lease
each time. A ``batch_handoff`` to 8 reviewer panes racing a ``controller_takeover`` of a
lease at its expiry: the batch fails whole on the old fence or completes under it, never
a mix. Sixteen clients, each with its own lease and panes: no errors. Seed the races
with ``PANEWARDEN_TEST_SEED``.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any

import anyio
import pytest
from mcp.types import TextContent

from tests.conftest import Tools
from tests.control.conftest import HttpCoords
from tests.control.support import (
    AUTHORITY_SHA,
    CHECKPOINT_SHA,
    Controller,
    acquire,
    controller_records,
    creds_of,
    receipt_records,
)
from tests.faults import seeded_rng

pytestmark = pytest.mark.anyio

SETTLE_S = 30.0


async def outcome(tools: Tools, tool: str, **args: Any) -> tuple[str, dict[str, Any]]:
    """("ok", result) or ("error", {code, message}): either is an answer here."""
    result = await tools.client.call_tool(tool, args, read_timeout_seconds=120)
    if result.is_error:
        text = next(c.text for c in result.content if isinstance(c, TextContent))
        return "error", dict(json.loads(text))
    return "ok", dict(result.structured_content or {})


async def answer_into(
    answers: dict[str, tuple[str, dict[str, Any]]],
    key: str,
    tools: Tools,
    tool: str,
    args: dict[str, Any],
) -> None:
    answers[key] = await outcome(tools, tool, **args)


async def hand_off_at(
    batch: dict[str, tuple[str, dict[str, Any]]],
    holder: Controller,
    requests: list[dict[str, str]],
    at: float,
) -> None:
    """``batch_handoff`` at wall-clock time ``at``."""
    # The race's random moment (relative to the expiry), not a synchronisation.
    await anyio.sleep(max(0.0, at - time.time()))
    batch["answer"] = await outcome(
        holder.tools,
        "batch_handoff",
        creds=holder.creds,
        requests=requests,
        mode="all",
        timeout_s=SETTLE_S,
    )


async def take_over(
    taken: dict[str, dict[str, str]], tools: Tools, predecessor: str, where: str
) -> None:
    """Try ``controller_takeover`` until the lease expired and it succeeds (bounded)."""
    args = {
        "controller_id": "boss",
        "expected_predecessor_lease_id": predecessor,
        "authority_ref": "takeover",
        "authority_sha256": AUTHORITY_SHA,
    }
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        kind, result = await outcome(tools, "controller_takeover", **args)
        if kind == "ok":
            taken["creds"] = creds_of(result)
            return
        assert result["code"] == "lease_conflict", f"{where}: {result}"
        await anyio.sleep(0.02)  # polling for the expiry, bounded by the deadline


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_two_controllers_race_acquire_200_times(http_coords: HttpCoords) -> None:
    rng, seed = seeded_rng("test_two_controllers_race_acquire_200_times")
    running = http_coords.start(["alice", "bob"])
    acquire_args = {
        "controller_id": "boss",
        "authority_ref": "race",
        "authority_sha256": AUTHORITY_SHA,
    }
    wins = {"alice": 0, "bob": 0}
    async with running.client("alice") as alice, running.client("bob") as bob:
        clients = {"alice": alice, "bob": bob}
        for round_no in range(200):
            where = f"seed {seed}, round {round_no}"
            answers: dict[str, tuple[str, dict[str, Any]]] = {}
            order = ["alice", "bob"] if rng.random() < 0.5 else ["bob", "alice"]
            async with anyio.create_task_group() as group:
                for name in order:
                    group.start_soon(
                        answer_into,
                        answers,
                        name,
                        clients[name],
                        "controller_acquire",
                        acquire_args,
                    )
            winners = [n for n, (kind, _) in answers.items() if kind == "ok"]
            assert len(winners) == 1, f"{where}: {answers}"
            (winner,) = winners
            (loser,) = set(answers) - {winner}
            assert answers[loser][1]["code"] == "lease_conflict", f"{where}: {answers}"
            granted = answers[winner][1]
            assert granted["generation"] == round_no + 1, f"{where}: {granted}"
            active = [r for r in controller_records(running.state).values() if r.state == "active"]
            assert [(r.lease_id, r.identity) for r in active] == [
                (granted["lease_id"], f"http:{winner}")
            ], where
            wins[winner] += 1
            await Controller(clients[winner], creds_of(granted)).call(
                "controller_release",
                checkpoint_ref=f"round {round_no}",
                checkpoint_sha256=CHECKPOINT_SHA,
            )
    print(f"seed {seed}: wins {wins}")


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_batch_handoff_racing_a_takeover_fails_whole_or_completes(
    http_coords: HttpCoords,
) -> None:
    rng, seed = seeded_rng("test_batch_handoff_racing_a_takeover_fails_whole_or_completes")
    running = http_coords.start(["alice", "bob"])
    names = [f"rev{i}" for i in range(8)]
    seen = {"completed": 0, "refused": 0}
    async with running.client("alice") as alice_tools, running.client("bob") as bob_tools:
        holder, other = await acquire(alice_tools, "boss"), Controller(bob_tools, {})
        for name in names:
            await holder.reviewer(name)
        for name in names:
            await holder.tools.wait(name, until=["idle"])
        for round_no in range(6):
            where = f"seed {seed}, round {round_no}"
            turns = {n: (await holder.tools.call("get_status", name=n))["turn"] for n in names}
            receipts_before = set(receipt_records(running.state))
            renewed = await holder.call("controller_renew", ttl_s=1)
            expires = datetime.fromisoformat(renewed["expires_at"]).timestamp()
            offset = rng.uniform(-0.5, 0.3)
            requests = [{"name": n, "text": f"round {round_no} to {n}"} for n in names]
            batch: dict[str, tuple[str, dict[str, Any]]] = {}
            taken: dict[str, dict[str, str]] = {}
            async with anyio.create_task_group() as group:
                group.start_soon(hand_off_at, batch, holder, requests, expires + offset)
                group.start_soon(take_over, taken, other.tools, holder.creds["lease_id"], where)
            assert "creds" in taken, f"{where}: the takeover never succeeded"
            kind, result = batch["answer"]
            new_receipts = {
                k: r for k, r in receipt_records(running.state).items() if k not in receipts_before
            }
            after = {n: (await holder.tools.call("get_status", name=n))["turn"] for n in names}
            if kind == "error":
                assert result["code"] == "fence_invalid", f"{where}: {result}"
                assert new_receipts == {}, f"{where}: refused, yet receipts were made"
                assert after == turns, f"{where}: refused, yet prompts were typed"
                seen["refused"] += 1
            else:
                assert [c["name"] for c in result["completed"]] == names, f"{where}: {result}"
                assert {c["status"]["state"] for c in result["completed"]} == {"done"}, where
                assert result["failed"] == [] and result["pending"] == [], f"{where}: {result}"
                assert len(new_receipts) == 8 and {r.state for r in new_receipts.values()} == {
                    "completed"
                }
                assert after == {n: t + 1 for n, t in turns.items()}, f"{where}: {after}"
                seen["completed"] += 1
            refused = await holder.error("controller_renew")
            assert refused["code"] == "fence_invalid", f"{where}: the old holder still renews"
            holder, other = Controller(other.tools, taken["creds"]), Controller(holder.tools, {})
            await holder.call("controller_renew", ttl_s=900)
    print(f"seed {seed}: {seen}")


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_sixteen_clients_with_their_own_leases_and_panes(http_coords: HttpCoords) -> None:
    names = [f"client{i:02d}" for i in range(16)]
    running = http_coords.start(names)
    calls = {"n": 0}

    async def work(i: int, name: str) -> None:
        async with running.client(name) as tools:
            ctl = await acquire(tools, f"ctl{i:02d}")
            pane = f"pane{i:02d}"
            lease = await ctl.reviewer(pane)
            calls["n"] += 2
            for turn in range(1, 6):
                done = await ctl.call(
                    "handoff", name=pane, text=f"{name} turn {turn}", timeout_s=SETTLE_S
                )
                (item,) = done["completed"]
                assert (item["status"]["state"], item["status"]["turn"]) == ("done", turn), done
                assert f"reply: {name} turn {turn}" in item["output"]
                replay = await ctl.call(
                    "collect_handoffs", receipts=[item["receipt"]], timeout_s=SETTLE_S
                )
                assert replay["completed"][0]["status"] == item["status"]
                mine = (await tools.call("receipt_list", controller_id=ctl.controller_id))[
                    "receipts"
                ]
                assert len(mine) == turn and {r["name"] for r in mine} == {pane}
                await ctl.call("controller_renew", ttl_s=900)
                calls["n"] += 4
            await tools.call("lease_inventory")
            await tools.call("controller_list")
            seq = (await tools.call("get_status", name=pane))["seq"]
            closed = await ctl.call("reviewer_close", lease_id=lease["lease_id"], expected_seq=seq)
            assert closed["state"] == "closed"
            await ctl.call(
                "controller_release", checkpoint_ref="done", checkpoint_sha256=CHECKPOINT_SHA
            )
            calls["n"] += 5

    async with anyio.create_task_group() as group:
        for i, name in enumerate(names):
            group.start_soon(work, i, name)
    assert calls["n"] >= 300
    async with running.client(names[0]) as tools:
        status = await tools.call("service_status")
        assert status["panes"] == 0 and {s["lock"] for s in status["stores"].values()} == {"absent"}
        leases = (await tools.call("controller_list"))["leases"]
        assert len(leases) == 16 and {x["state"] for x in leases} == {"released"}


@pytest.mark.timeout(180)
async def test_pane_starts_and_closes_never_hold_up_other_controllers(
    http_coords: HttpCoords,
) -> None:
    # The store locks guard records, not worker steps: while alice starts (then closes)
    # ten panes at once, each taking a fraction of a second, neither her own calls nor
    # bob's wait past a 1 s lock bound.
    running = http_coords.start(["alice", "bob"], PANEWARDEN_STORE_LOCK_WAIT_S="1")
    names = [f"rev{i}" for i in range(10)]
    async with running.client("alice") as alice_tools, running.client("bob") as bob_tools:
        alice = await acquire(alice_tools, "alice-ctl")
        bob = await acquire(bob_tools, "bob-ctl")
        leases: dict[str, dict[str, Any]] = {}
        answers: list[tuple[str, dict[str, Any]]] = []
        busy = {"alice": True}

        async def start(name: str) -> None:
            kind, result = await outcome(
                alice_tools,
                "reviewer_start",
                creds=alice.creds,
                name=name,
                profile="demo",
                cwd="/",
                purpose="p",
            )
            answers.append((kind, result))
            leases[name] = result

        async def close(name: str) -> None:
            if "lease_id" not in leases[name]:
                return  # its start failed: the assertion below says why
            seq = (await alice_tools.wait(name, until=["idle"]))["seq"]
            answers.append(
                await outcome(
                    alice_tools,
                    "reviewer_close",
                    creds=alice.creds,
                    lease_id=leases[name]["lease_id"],
                    expected_seq=seq,
                )
            )

        async def bob_meanwhile() -> None:
            while busy["alice"]:
                answers.append(
                    await outcome(bob_tools, "controller_renew", creds=bob.creds, ttl_s=900)
                )

        for step in (start, close):
            busy["alice"] = True
            async with anyio.create_task_group() as group:
                group.start_soon(bob_meanwhile)
                async with anyio.create_task_group() as alices:
                    for name in names:
                        alices.start_soon(step, name)
                busy["alice"] = False
        errors = [result for kind, result in answers if kind == "error"]
        assert errors == [], errors
        assert len(answers) > 12
