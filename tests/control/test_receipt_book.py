"""The receipt book over real record files: its transition table, the compare-and-set
that refuses a stale transition, and the outstanding-per-pane index, rebuilt from the
records when the book is opened (as after a SIGKILL) and never trusted over a record."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from protocol.errors import ErrorCode
from supervisor.control.receipt_book import TRANSITIONS, ReceiptBook, StaleReceipt
from supervisor.control.records import OUTSTANDING_RECEIPTS, RECORD_VERSION, Receipt
from supervisor.control.stores import ControlStores

pytestmark = pytest.mark.anyio


def reserved(receipt_id: str, name: str) -> Receipt:
    return Receipt(
        version=RECORD_VERSION,
        receipt_id=receipt_id,
        controller_id="boss",
        lease_id="rev-1",
        lease_type="reviewer",
        name=name,
        instance="inst-1",
        state="reserved",
        created_at=1.0,
        updated_at=1.0,
    )


def test_the_table_ends_in_final_states_and_abandons_only_outstanding_ones() -> None:
    final = {"completed", "failed", "abandoned"}
    for event, (sources, target) in TRANSITIONS.items():
        assert not sources & final, f"{event} leaves a final state"
        assert target in final | OUTSTANDING_RECEIPTS, event
    assert TRANSITIONS["abandon"][0] == OUTSTANDING_RECEIPTS


async def test_a_stale_transition_is_refused_and_the_record_kept(tmp_path: Path) -> None:
    stores = ControlStores(tmp_path, lock_wait_s=1)
    book = ReceiptBook(stores)
    book.reserve(reserved("rcp-a", "p1"))
    await book.transition("rcp-a", "typed", cursor=4)
    async with stores.locks.hold("receipts"):
        abandoned = book.transition_locked("rcp-a", "abandon")
    assert abandoned.state == "abandoned" and abandoned.cursor == 4
    with pytest.raises(StaleReceipt) as stale:
        await book.transition("rcp-a", "started", turn=2)
    assert stale.value.code is ErrorCode.LEASE_STATE
    assert stale.value.current.state == "abandoned"
    # The service's own transition: logged, the record returned as it is.
    kept = await book.service_transition("rcp-a", "started", turn=2)
    assert kept == abandoned == stores.receipts.load("rcp-a")
    assert book.outstanding_for("p1") is None


async def test_the_index_is_rebuilt_from_the_records_and_checked_against_them(
    tmp_path: Path,
) -> None:
    stores = ControlStores(tmp_path, lock_wait_s=1)
    book = ReceiptBook(stores)
    book.reserve(reserved("rcp-a", "p1"))
    await book.transition("rcp-a", "started", turn=1)
    book.reserve(reserved("rcp-b", "p2"))
    await book.transition("rcp-b", "refused", failure_stage="deliver", failure_code="x")
    # A new book (a restarted service) finds the outstanding one from the files alone.
    again = ReceiptBook(ControlStores(tmp_path, lock_wait_s=1))
    found = again.outstanding_for("p1")
    assert found is not None and found.receipt_id == "rcp-a" and found.state == "pending"
    assert again.outstanding_for("p2") is None
    # A record that says otherwise than the index wins (and the entry is dropped).
    done = msgspec.structs.replace(found, state="completed")
    stores.receipts.save("rcp-a", done)
    assert again.outstanding_for("p1") is None
