"""Controller leases against a real service (coordination scenarios 1-8).

Acquire, the fence (wrong token, wrong lease id, expiry), lists without tokens, resume
and takeover (two HTTP clients: two identities), release with a checkpoint, and the
fence checked again after a wait for the store lock.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import anyio
import pytest

from supervisor.store.locks import hold_sync
from tests.control.conftest import Coord, HttpCoords, stdio_service
from tests.control.support import (
    AUTHORITY_SHA,
    CHECKPOINT_SHA,
    Controller,
    acquire,
    controller_records,
    creds_of,
    leaked,
    receipt_records,
    record_texts,
)
from tests.polling import apoll
from tests.service.conftest import read_audit

pytestmark = pytest.mark.anyio

# Every fence token this module saw: none may show in any list, record or log.
TOKENS: list[str] = []


@pytest.fixture(scope="module")
async def coord(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Coord]:
    # A long lock wait: scenario 8 holds a store lock for longer than the default.
    async with stdio_service(
        tmp_path_factory.mktemp("ctl"), PANEWARDEN_STORE_LOCK_WAIT_S="30"
    ) as running:
        yield running


def remember(ctl: Controller) -> Controller:
    TOKENS.append(ctl.creds["fence_token"])
    return ctl


def expiry(result: dict[str, Any]) -> float:
    return datetime.fromisoformat(result["expires_at"]).timestamp()


async def listed(tools: Any, controller_id: str) -> dict[str, Any]:
    """The controller's entry in ``controller_list``."""
    leases = (await tools.call("controller_list"))["leases"]
    (entry,) = [lease for lease in leases if lease["controller_id"] == controller_id]
    return dict(entry)


async def until_expired(tools: Any, controller_id: str, timeout_s: float = 30) -> None:
    """Poll ``controller_list`` until the controller's lease reads ``expired``."""

    async def expired() -> bool:
        return bool((await listed(tools, controller_id))["state"] == "expired")

    await apoll(expired, timeout_s, what=f"{controller_id}'s lease to expire", interval_s=0.1)


async def test_acquire_returns_generation_one_and_a_second_is_refused(coord: Coord) -> None:
    # Scenario 1.
    ctl = remember(await acquire(coord.tools, "s01"))
    entry = await listed(coord.tools, "s01")
    assert ctl.creds["lease_id"].startswith("ctl-")
    assert len(ctl.creds["fence_token"]) >= 43  # 256 bits, URL-safe base64
    assert (
        entry["generation"] == 1 and entry["state"] == "active" and entry["holder"] == "stdio:stdio"
    )
    refused = await coord.tools.error(
        "controller_acquire",
        controller_id="s01",
        authority_ref="again",
        authority_sha256=AUTHORITY_SHA,
    )
    assert refused["code"] == "lease_conflict", refused
    assert await listed(coord.tools, "s01") == entry
    assert (
        len([r for r in controller_records(coord.state).values() if r.controller_id == "s01"]) == 1
    )


async def test_wrong_or_expired_credentials_are_refused_and_change_nothing(coord: Coord) -> None:
    # Scenario 2.
    ctl = remember(await acquire(coord.tools, "s02"))
    lease = await ctl.reviewer("s02")
    before = (await listed(coord.tools, "s02"), controller_records(coord.state))
    wrong_token = {**ctl.creds, "fence_token": secrets.token_urlsafe(32)}
    wrong_lease = {**ctl.creds, "lease_id": f"ctl-{secrets.token_hex(16)}"}
    other = remember(await acquire(coord.tools, "s02-other"))
    others_lease = {**ctl.creds, "lease_id": other.creds["lease_id"]}
    for creds in (wrong_token, wrong_lease, others_lease):
        for tool, args in (
            ("controller_renew", {"ttl_s": 1800}),
            ("controller_release", {"checkpoint_ref": "x", "checkpoint_sha256": CHECKPOINT_SHA}),
            ("relay", {"name": "s02", "text": "never typed"}),
        ):
            refused = await coord.tools.error(tool, creds=creds, **args)
            assert refused["code"] == "fence_invalid", (tool, creds, refused)
    after_others = {k: v for k, v in controller_records(coord.state).items() if k in before[1]}
    assert (await listed(coord.tools, "s02"), after_others) == before
    assert not [r for r in receipt_records(coord.state).values() if r.controller_id == "s02"]
    screen = await coord.tools.call("read_output", name="s02")
    assert "never typed" not in screen["text"] and screen["turn"] == 0

    # An expired lease: refused the same way, and left as it was (expired, not released).
    short = remember(await acquire(coord.tools, "s02-short", ttl_s=1))
    await until_expired(coord.tools, "s02-short")
    expired_before = await listed(coord.tools, "s02-short")
    for tool, args in (
        ("controller_renew", {}),
        ("controller_release", {"checkpoint_ref": "x", "checkpoint_sha256": CHECKPOINT_SHA}),
    ):
        refused = await short.error(tool, **args)
        assert refused["code"] == "fence_invalid", (tool, refused)
        assert short.creds["fence_token"] not in refused["message"]
    assert await listed(coord.tools, "s02-short") == expired_before
    closed = await ctl.call(
        "reviewer_close",
        lease_id=lease["lease_id"],
        expected_seq=screen["seq"],
    )
    assert closed["state"] == "closed"


async def test_resume_rotates_the_lease_and_kills_the_old_credentials(coord: Coord) -> None:
    # Scenario 4.
    old = remember(await acquire(coord.tools, "s04"))
    granted = await coord.tools.call(
        "controller_resume",
        controller_id="s04",
        authority_ref="resumed",
        authority_sha256=AUTHORITY_SHA,
    )
    new = remember(Controller(coord.tools, creds_of(granted)))
    assert granted["generation"] == 2
    assert new.creds["lease_id"] != old.creds["lease_id"]
    assert new.creds["fence_token"] != old.creds["fence_token"]
    entry = await listed(coord.tools, "s04")
    assert entry["lease_id"] == new.creds["lease_id"]
    assert entry["predecessor_lease_id"] == old.creds["lease_id"]
    for tool, args in (
        ("controller_renew", {}),
        ("controller_release", {"checkpoint_ref": "x", "checkpoint_sha256": CHECKPOINT_SHA}),
    ):
        assert (await old.error(tool, **args))["code"] == "fence_invalid"
    renewed = await new.call("controller_renew", ttl_s=600)
    assert renewed["fence_token"] is None and renewed["generation"] == 2


async def test_release_ends_the_generation_and_leased_panes_stay(coord: Coord) -> None:
    # Scenario 7.
    ctl = remember(await acquire(coord.tools, "s07"))
    lease = await ctl.reviewer("s07")
    released = await ctl.call(
        "controller_release", checkpoint_ref="notes/s07.md", checkpoint_sha256=CHECKPOINT_SHA
    )
    assert released["fence_token"] is None
    assert (await listed(coord.tools, "s07"))["state"] == "released"
    (record,) = [r for r in controller_records(coord.state).values() if r.controller_id == "s07"]
    assert (record.checkpoint_ref, record.checkpoint_sha256) == ("notes/s07.md", CHECKPOINT_SHA)
    assert (await ctl.error("controller_renew"))["code"] == "fence_invalid"
    assert (await ctl.error("relay", name="s07", text="after release"))["code"] == "fence_invalid"

    # The pane and its lease stay, and the next generation drives it.
    (pane,) = [p for p in (await coord.tools.call("list_panes"))["panes"] if p["name"] == "s07"]
    assert pane["lifecycle"] == "running"
    assert pane["lease"] == {
        "lease_id": lease["lease_id"],
        "lease_type": "reviewer",
        "controller_id": "s07",
    }
    (kept,) = [x for x in (await coord.tools.call("reviewer_list"))["leases"] if x["name"] == "s07"]
    assert kept["state"] == "active"
    nxt = remember(await acquire(coord.tools, "s07"))
    assert (await listed(coord.tools, "s07"))["generation"] == 2
    done = await nxt.call("handoff", name="s07", text="next generation", timeout_s=30)
    assert [c["status"]["state"] for c in done["completed"]] == ["done"], done
    await nxt.call(
        "reviewer_close",
        lease_id=lease["lease_id"],
        expected_seq=done["completed"][0]["status"]["seq"],
    )


async def test_fence_is_checked_again_after_waiting_for_the_store_lock(coord: Coord) -> None:
    # Scenario 8: the lease expires while the calls wait for the controller store's lock.
    ctl = remember(await acquire(coord.tools, "s08"))
    await ctl.reviewer("s08")
    renewed = await ctl.call("controller_renew", ttl_s=2)
    ends = expiry(renewed)
    outcomes: dict[str, dict[str, Any]] = {}

    async def relay() -> None:
        outcomes["relay"] = await ctl.error("relay", name="s08", text="typed after expiry")

    async def renew() -> None:
        outcomes["controller_renew"] = await ctl.error("controller_renew", ttl_s=600)

    with contextlib.ExitStack() as lock:
        lock.enter_context(hold_sync(coord.state / "locks", "controller", wait_s=5))
        async with anyio.create_task_group() as group:
            group.start_soon(relay)
            group.start_soon(renew)
            past = await apoll(lambda: time.time() > ends + 0.5, 30, interval_s=0.05)
            assert past and not outcomes, f"answered while the lock was held: {outcomes}"
            lock.close()  # the calls go on now, with the lease expired
    assert {tool: o["code"] for tool, o in outcomes.items()} == {
        "relay": "fence_invalid",
        "controller_renew": "fence_invalid",
    }
    screen = await coord.tools.call("read_output", name="s08")
    assert "typed after expiry" not in screen["text"] and screen["turn"] == 0
    assert not [r for r in receipt_records(coord.state).values() if r.controller_id == "s08"]


async def test_lists_and_records_never_hold_a_fence_token(coord: Coord) -> None:
    # Scenario 3 (runs last in this module: it searches for every token the others saw).
    ctl = remember(await acquire(coord.tools, "s03"))
    await ctl.call("controller_renew", ttl_s=900)
    assert len(TOKENS) >= 8
    lists = [
        await coord.tools.call(tool)
        for tool in (
            "controller_list",
            "receipt_list",
            "reviewer_list",
            "adopted_list",
            "lease_inventory",
            "service_status",
            "list_panes",
        )
    ]
    assert leaked(TOKENS, *lists, *record_texts(coord.state)) == []


# ---------------------------------------------------------------- two identities (HTTP)


async def test_resume_and_takeover_across_identities(http_coords: HttpCoords) -> None:
    # Scenarios 5 and 6: alice holds the lease; bob can neither resume it nor use her
    # credentials, and takes it over only once it expired; the reviewer lease survives.
    running = http_coords.start(["alice", "bob"])
    async with running.client("alice") as alice_tools, running.client("bob") as bob_tools:
        alice = await acquire(alice_tools, "boss")
        lease = await alice.reviewer("rev")
        refused = await bob_tools.error(
            "controller_resume",
            controller_id="boss",
            authority_ref="x",
            authority_sha256=AUTHORITY_SHA,
        )
        assert refused["code"] == "lease_conflict", refused
        stolen = Controller(bob_tools, alice.creds)
        assert (await stolen.error("controller_renew"))["code"] == "fence_invalid"
        assert (await stolen.error("relay", name="rev", text="stolen"))["code"] == "fence_invalid"

        # Not expired yet: no takeover.
        renewed = await alice.call("controller_renew", ttl_s=8)
        takeover = {
            "controller_id": "boss",
            "expected_predecessor_lease_id": alice.creds["lease_id"],
            "authority_ref": "takeover",
            "authority_sha256": AUTHORITY_SHA,
        }
        early = await bob_tools.error("controller_takeover", **takeover)
        assert time.time() < expiry(renewed), "the machine is too slow for this check"
        assert early["code"] == "lease_conflict", early
        wrong = await bob_tools.error(
            "controller_takeover",
            **{**takeover, "expected_predecessor_lease_id": f"ctl-{'0' * 32}"},
        )
        assert wrong["code"] == "lease_conflict", wrong

        await until_expired(bob_tools, "boss")
        granted = await bob_tools.call("controller_takeover", **takeover)
        bob = Controller(bob_tools, creds_of(granted))
        assert granted["generation"] == 2
        entry = await listed(bob_tools, "boss")
        assert (entry["holder"], entry["predecessor_lease_id"]) == (
            "http:bob",
            alice.creds["lease_id"],
        )
        assert (await alice.error("controller_renew"))["code"] == "fence_invalid"

        # The reviewer lease survived the takeover, and the new holder drives the pane.
        (kept,) = (await bob_tools.call("reviewer_list"))["leases"]
        assert (kept["lease_id"], kept["state"]) == (lease["lease_id"], "active")
        done = await bob.call("handoff", name="rev", text="after takeover", timeout_s=30)
        assert [c["status"]["state"] for c in done["completed"]] == ["done"], done
        tokens = [alice.creds["fence_token"], bob.creds["fence_token"]]
        lists = [await bob_tools.call("controller_list"), await bob_tools.call("receipt_list")]
    assert leaked(tokens, *lists, *record_texts(running.state), running.service.stderr()) == []
    audit = read_audit(running.service.root / "audit" / "audit.jsonl")
    assert {"controller_takeover", "handoff", "controller_resume"} <= {r["tool"] for r in audit}
    assert leaked(tokens, audit) == []


async def test_a_release_hands_no_pane_lease_to_another_identity(
    http_coords: HttpCoords,
) -> None:
    # Issue 27 item 5: alice releases "boss" with reviewer "rev" still leased. Bob may
    # not acquire "boss" while that lease is retained (it would be his); alice may, and
    # finds her reviewer. Once it is closed, the id is anyone's, with nothing on it.
    running = http_coords.start(["alice", "bob"])
    async with running.client("alice") as alice_tools, running.client("bob") as bob_tools:
        alice = await acquire(alice_tools, "boss")
        lease = await alice.reviewer("rev")
        checkpoint = {"checkpoint_ref": "done", "checkpoint_sha256": CHECKPOINT_SHA}
        await alice.call("controller_release", **checkpoint)
        args = {"controller_id": "boss", "authority_ref": "x", "authority_sha256": AUTHORITY_SHA}
        refused = await bob_tools.error("controller_acquire", **args)
        assert refused["code"] == "lease_conflict", refused
        assert "released by another caller" in refused["message"]

        alice = await acquire(alice_tools, "boss")
        seq = (await alice_tools.call("get_status", name="rev"))["seq"]
        closed = await alice.call("reviewer_close", lease_id=lease["lease_id"], expected_seq=seq)
        assert closed["state"] == "closed", closed
        await alice.call("controller_release", **checkpoint)

        bob = await acquire(bob_tools, "boss")
        cleanup = await bob.call("reviewer_cleanup", dry_run=True)
        assert cleanup["closed"] == [] and cleanup["preserved"] == [], cleanup
