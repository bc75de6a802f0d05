"""Receipt records and their transitions: one table, one compare-and-set, one index.

``TRANSITIONS`` is the receipt state machine, the one place that says which event may
move a receipt from which states to which state. Every write of a receipt goes through
``ReceiptBook.transition`` (or ``reserve`` for a new one) under the receipts store lock:
re-read the record, check its state is one the event may leave, write. A transition
whose record moved on meanwhile is *stale* and is refused: whoever asked learns what the
record says now (``StaleReceipt``), and nothing is overwritten. So a ``receipt_abandon``
accepted while ``relay`` waited for the turn to start stays abandoned, and of two
collections of one turn only the first writes.

The index of outstanding receipts per pane (``reserved``/``pending``, the ones that
block new prompts) is derived from the records when the book is opened — so it is right
after a supervisor SIGKILL, whatever it was before — and kept in step by every write
here, the only writer of receipts. Admission still re-reads the receipts the index names
before it refuses a prompt: the index says where to look, the record decides.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Literal

import msgspec

from protocol.errors import ErrorCode, PanewardenError
from supervisor.control.records import OUTSTANDING_RECEIPTS, Receipt, ReceiptState
from supervisor.control.stores import ControlStores

log = logging.getLogger(__name__)

ReceiptEvent = Literal["typed", "started", "refused", "settled", "lost", "abandon"]

# event: (the states it may leave, the state it enters). A receipt is created `reserved`
# by admission (``reserve``); `completed`, `failed` and `abandoned` are final.
TRANSITIONS: dict[ReceiptEvent, tuple[frozenset[ReceiptState], ReceiptState]] = {
    # The prompt was typed: the cursor taken before it is recorded.
    "typed": (frozenset({"reserved"}), "reserved"),
    # The pane entered the prompt's turn.
    "started": (frozenset({"reserved"}), "pending"),
    # The delivery was refused before any byte was typed.
    "refused": (frozenset({"reserved"}), "failed"),
    # The turn settled and was collected (a `blocked` settle writes nothing).
    "settled": (frozenset({"pending"}), "completed"),
    # The pane was lost, re-created, or moved past the turn before its settle was seen.
    "lost": (frozenset({"pending"}), "failed"),
    # receipt_abandon, once the pane was seen settled.
    "abandon": (frozenset({"reserved", "pending"}), "abandoned"),
}


class StaleReceipt(PanewardenError):
    """A transition refused because the receipt is no longer in a state it may leave;
    ``current`` is the record as it is."""

    def __init__(self, current: Receipt, event: ReceiptEvent) -> None:
        super().__init__(
            ErrorCode.LEASE_STATE,
            f"receipt {current.receipt_id} is {current.state}; it cannot be {_verb(event)}",
        )
        self.current = current


def _verb(event: ReceiptEvent) -> str:
    return {
        "typed": "delivered",
        "started": "started",
        "refused": "failed",
        "settled": "completed",
        "lost": "failed",
        "abandon": "abandoned",
    }[event]


class ReceiptBook:
    """The receipts store behind its lock, its transition table and its index."""

    def __init__(self, stores: ControlStores, clock: Callable[[], float] = time.time) -> None:
        self._store = stores.receipts
        self._locks = stores.locks
        self._clock = clock
        # pane name -> ids of its outstanding receipts (one, unless records say more).
        self._outstanding: dict[str, set[str]] = {}
        for receipt in self._store.load_all()[0].values():
            self._index(receipt)

    def all(self) -> list[Receipt]:
        """Every readable receipt record, oldest first."""
        found = self._store.load_all()[0].values()
        return sorted(found, key=lambda r: (r.created_at, r.receipt_id))

    def load(self, receipt_id: str) -> Receipt | None:
        """The record ``receipt_id`` as it is on disk; None when absent or unreadable."""
        try:
            return self._store.load(receipt_id)
        except PanewardenError:
            return None

    def outstanding_for(self, name: str) -> Receipt | None:
        """The receipt still blocking new prompts to pane ``name``, if any (read from
        its record: an index entry whose record says otherwise is dropped)."""
        for receipt_id in sorted(self._outstanding.get(name, ())):
            receipt = self.load(receipt_id)
            if receipt is not None and receipt.state in OUTSTANDING_RECEIPTS:
                return receipt
            self._unindex(name, receipt_id)
        return None

    def reserve(self, receipt: Receipt) -> None:
        """Write a new ``reserved`` receipt; call under the receipts lock, after
        ``outstanding_for`` found none for its pane."""
        assert receipt.state == "reserved"
        self._store.save(receipt.receipt_id, receipt)
        self._index(receipt)

    async def transition(self, receipt_id: str, event: ReceiptEvent, **changes: object) -> Receipt:
        """``transition_locked`` under the receipts store lock."""
        async with self._locks.hold("receipts"):
            return self.transition_locked(receipt_id, event, **changes)

    def transition_locked(self, receipt_id: str, event: ReceiptEvent, **changes: object) -> Receipt:
        """Move the receipt by ``event`` (see ``TRANSITIONS``) with ``changes``, if its
        record, read now, is in a state the event may leave; returns the written record.
        Call under the receipts store lock.

        Raises:
            StaleReceipt: the record is in another state (it is left as it is).
            PanewardenError: ``not_found`` when there is no such record.
        """
        current = self.load(receipt_id)
        if current is None:
            raise PanewardenError(ErrorCode.NOT_FOUND, f"no receipt {receipt_id!r}")
        sources, target = TRANSITIONS[event]
        if current.state not in sources:
            raise StaleReceipt(current, event)
        updated = msgspec.structs.replace(
            current, state=target, updated_at=self._clock(), **changes
        )
        self._store.save(receipt_id, updated)
        self._index(updated)
        return updated

    async def service_transition(
        self, receipt_id: str, event: ReceiptEvent, **changes: object
    ) -> Receipt:
        """A transition the service's own relay or collection makes: one that lost the
        race (a client abandoned the receipt, another collection finished it) is logged
        and the record kept; returns the record as it is now."""
        try:
            return await self.transition(receipt_id, event, **changes)
        except StaleReceipt as stale:
            log.warning(
                "receipt %s is already %s; it is kept, not %s",
                receipt_id,
                stale.current.state,
                _verb(event),
                extra={"pane": stale.current.name},
            )
            return stale.current

    def _index(self, receipt: Receipt) -> None:
        if receipt.state in OUTSTANDING_RECEIPTS:
            self._outstanding.setdefault(receipt.name, set()).add(receipt.receipt_id)
        else:
            self._unindex(receipt.name, receipt.receipt_id)

    def _unindex(self, name: str, receipt_id: str) -> None:
        ids = self._outstanding.get(name)
        if ids is not None:
            ids.discard(receipt_id)
            if not ids:
                del self._outstanding[name]
