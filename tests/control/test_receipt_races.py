"""Receipt transitions under races: each is a compare-and-set under the receipts lock.

A ``receipt_abandon`` accepted while ``relay`` waits for the turn to start stays
abandoned (the relay's own transition lost the race and is refused, logged, the record
kept); two collections of one turn at once write it once, and both report it.
"""

from __future__ import annotations

import hashlib
from typing import Any

import anyio
import pytest

from tests.control.conftest import Coord, HttpCoords
from tests.control.scripted_agent import LATE_START_S
from tests.control.support import acquire, receipt_records
from tests.polling import apoll

pytestmark = pytest.mark.anyio

SETTLE_S = 30


async def test_an_abandon_accepted_while_relay_waits_for_the_turn_stays_abandoned(
    coord: Coord,
) -> None:
    ctl = await acquire(coord.tools, "race-abandon")
    await ctl.reviewer("late1", profile="scripted")
    relayed: dict[str, Any] = {}

    async def relay() -> None:
        relayed.update(await ctl.call("relay", name="late1", text="late-start please"))

    def typed() -> str | None:
        # The prompt was typed (its cursor recorded) and the turn has not begun.
        for r in receipt_records(coord.state).values():
            if r.name == "late1" and r.state == "reserved" and r.cursor is not None:
                return r.receipt_id
        return None

    async with anyio.create_task_group() as tg:
        tg.start_soon(relay)
        found = await apoll(typed, LATE_START_S * 10, interval_s=0.02)
        assert found is not None, receipt_records(coord.state)
        receipt_id: str = found
        # The agent is idle (settled) until its turn starts: the abandon is accepted.
        abandoned = await ctl.call("receipt_abandon", receipt=receipt_id)
        assert abandoned["state"] == "abandoned", abandoned
    # relay saw the turn begin after the abandon: it must not have made it pending.
    assert relayed == {"receipt": receipt_id}
    record = receipt_records(coord.state)[receipt_id]
    assert record.state == "abandoned", record
    got = await ctl.call("collect_handoffs", receipts=[receipt_id], timeout_s=SETTLE_S)
    assert [f["code"] for f in got["failed"]] == ["abandoned"], got
    # Nothing is outstanding: the next prompt is admitted once the turn settled.
    await coord.tools.wait("late1", until=["done"], timeout_s=SETTLE_S)
    nxt = await ctl.call("handoff", name="late1", text="after", timeout_s=SETTLE_S)
    assert [c["status"]["state"] for c in nxt["completed"]] == ["done"], nxt


@pytest.mark.timeout(180)
async def test_two_collects_of_one_turn_at_once_write_it_once_and_both_report_it(
    http_coords: HttpCoords,
) -> None:
    running = http_coords.start(["alice"])
    async with running.client("alice") as tools:
        ctl = await acquire(tools, "race-collect")
        await ctl.reviewer("twice", profile="slow")
        receipt_id = (await ctl.call("relay", name="twice", text="one turn"))["receipt"]
        results: list[dict[str, Any]] = []

        async def collect() -> None:
            results.append(
                await ctl.call("collect_handoffs", receipts=[receipt_id], timeout_s=SETTLE_S)
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(collect)
            tg.start_soon(collect)
        assert [len(r["completed"]) for r in results] == [1, 1], results
        first, second = (r["completed"][0] for r in results)
        assert first["status"] == second["status"] and first["status"]["state"] == "done"
        assert first["output"] == second["output"] and "reply: one turn" in first["output"]
        record = receipt_records(running.state)[receipt_id]
        assert record.state == "completed" and record.result is not None
        assert record.result.seq == first["status"]["seq"]
        assert record.capture_sha256 == hashlib.sha256(first["output"].encode()).hexdigest()
    # The second collection's write was refused (compare-and-set), not done again.
    refused = [
        line
        for line in running.service.stderr().splitlines()
        if f"receipt {receipt_id} is already completed" in line
    ]
    assert len(refused) == 1, running.service.stderr()[-4000:]
