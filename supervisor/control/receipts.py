"""Receipt-bound handoffs: prompts to leased panes, and the results of exactly their turns.

Admission (under the controller, pane-lease and receipts store locks, after the fence
check): the target must be this controller's active reviewer or writer lease on the
very pane instance, and have no outstanding receipt; then a ``reserved`` receipt is
written. Only then is the prompt typed (the worker's prompt delivery). The receipt
turns ``pending`` once the pane entered the turn the prompt started — the first status
after the pre-input cursor with a greater turn — and only then is its id returned. An
ambiguous delivery leaves it ``reserved``: new prompts stay refused until
``receipt_abandon``, accepted only once the pane is seen settled. ``on_ambiguous``
listeners (the notifier) hear of each such receipt, with its pane.

Every change of a receipt is a transition of :mod:`supervisor.control.receipt_book`: a
compare-and-set under the receipts lock. A client's stale one (abandoning a receipt that
is no longer outstanding) is refused with ``lease_state``; one of the service's own that
lost a race (the turn began after the client abandoned the receipt, another collection
finished it first) is logged and the record kept: the call reports what the record says.

Collection waits for the *settle of that turn* (the first settled status after the
cursor at that turn) and captures the screen in the worker only if the pane is still at
that status (``expected_seq``): a later turn's output is never returned under a
receipt. A ``blocked`` turn is returned as ``blocked`` and stays collectable. A
completed receipt replays its status; its output only while the pane has not moved on.
A batch is admitted whole or not at all, under one fence check.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from protocol.errors import ErrorCode, PanewardenError, echo
from protocol.messages import CAPTURE_QUIET_S, PaneStatusFields, ReadScreen, ScreenText
from protocol.status import has_ended, is_settled
from supervisor.control.context import ControlContext
from supervisor.control.controllers import Credentials, pane_of_identity
from supervisor.control.fences import new_id
from supervisor.control.receipt_book import TRANSITIONS, ReceiptBook, StaleReceipt
from supervisor.control.records import (
    RECORD_VERSION,
    ControllerLease,
    PaneLease,
    Receipt,
    SettledStatus,
)
from supervisor.panes.input_text import check_input_text
from supervisor.panes.pane import Pane

log = logging.getLogger(__name__)

# How long a delivered prompt may take to show its turn before the receipt is ambiguous.
TURN_START_TIMEOUT_S = 30.0
DEFAULT_CAPTURE_LINES = 200
# Delivery errors after which nothing was typed: the receipt fails, it blocks nothing.
CLEAN_REFUSALS = frozenset(
    {
        ErrorCode.PANE_BLOCKED,
        ErrorCode.CURSOR_MISMATCH,
        ErrorCode.PANE_NOT_RUNNING,
        ErrorCode.INVALID_ARGUMENT,
        ErrorCode.NOT_FOUND,
        ErrorCode.PANE_LEASED,
    }
)
Mode = Literal["all", "first"]


@dataclass
class Outcome:
    """What a handoff call returns: completed results, failures, and still pending ids."""

    completed: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)

    def as_result(self) -> dict[str, Any]:
        """The tool result shape."""
        return {"completed": self.completed, "failed": self.failed, "pending": self.pending}


@dataclass(frozen=True)
class HandoffRequest:
    """One prompt of a batch."""

    name: str
    text: str


def status_of(status: PaneStatusFields) -> SettledStatus:
    """A pane status as a receipt keeps it."""
    return SettledStatus(
        lifecycle=status.lifecycle,
        state=status.state,
        kind=status.kind,
        turn=status.turn,
        seq=status.seq,
        source=status.source,
        exit_code=status.exit_code,
    )


class Handoffs:
    """relay, handoff, batch_handoff, collect_handoffs, receipts; see the module docstring."""

    def __init__(self, ctx: ControlContext, clock: Callable[[], float] = time.time) -> None:
        self._ctx = ctx
        self._clock = clock
        self._book = ReceiptBook(ctx.stores, clock)
        self._ambiguous_listeners: list[Callable[[Pane, Receipt], None]] = []

    def on_ambiguous(self, listener: Callable[[Pane, Receipt], None]) -> None:
        """Call ``listener`` each time a delivery leaves its receipt ``reserved``."""
        self._ambiguous_listeners.append(listener)

    def _ambiguous(self, pane: Pane, receipt: Receipt) -> None:
        for listener in self._ambiguous_listeners:
            listener(pane, receipt)

    # ------------------------------------------------------------ receipts

    def receipts(self, controller_id: str | None = None) -> list[Receipt]:
        """Receipt records (of one controller), oldest first; content-free."""
        return [
            r for r in self._book.all() if controller_id is None or r.controller_id == controller_id
        ]

    def outstanding_for(self, name: str) -> Receipt | None:
        """The receipt still blocking new prompts to pane ``name``, if any."""
        return self._book.outstanding_for(name)

    def _load(self, controller_id: str, receipt_id: str) -> Receipt:
        receipt = self._book.load(receipt_id)
        if receipt is None or receipt.controller_id != controller_id:
            raise PanewardenError(ErrorCode.NOT_FOUND, f"no receipt {echo(receipt_id)}")
        return receipt

    # ------------------------------------------------------------ admission

    def _admit(self, ctl: ControllerLease, name: str) -> tuple[Pane, PaneLease, Receipt]:
        """Check one target and reserve its receipt; call under the locks."""
        pane, lease = self._ctx.leases.held(ctl.controller_id, name)
        if lease.lease_type not in ("reviewer", "writer"):
            raise PanewardenError(ErrorCode.LEASE_STATE, f"pane {name!r} takes no prompts")
        waiting = self.outstanding_for(name)
        if waiting is not None:
            raise PanewardenError(
                ErrorCode.RECEIPT_OUTSTANDING,
                f"pane {name!r} has outstanding receipt {waiting.receipt_id} "
                f"({waiting.state}); collect or abandon it first",
            )
        now = self._clock()
        receipt = Receipt(
            version=RECORD_VERSION,
            receipt_id=new_id("rcp"),
            controller_id=ctl.controller_id,
            lease_id=lease.lease_id,
            lease_type=lease.lease_type,
            name=name,
            instance=pane.handle.instance,
            state="reserved",
            created_at=now,
            updated_at=now,
        )
        return pane, lease, receipt

    async def _admit_all(
        self, identity: str, creds: Credentials, names: Sequence[str]
    ) -> list[tuple[Pane, Receipt]]:
        """Admit every target or none, under one fence check and one hold of the locks."""
        if len(set(names)) != len(names):
            raise PanewardenError(ErrorCode.INVALID_ARGUMENT, "a pane is named twice")
        if pane_of_identity(identity) in names:
            raise PanewardenError(ErrorCode.FORBIDDEN, "a pane cannot prompt itself")
        async with self._ctx.stores.locks.hold("controller", "reviewer", "writer", "receipts"):
            ctl = self._ctx.authority.check(identity, creds)
            admitted = [self._admit(ctl, name) for name in names]
            for _pane, _lease, receipt in admitted:
                self._book.reserve(receipt)
        return [(pane, receipt) for pane, _lease, receipt in admitted]

    # ------------------------------------------------------------ delivery

    async def _deliver(self, pane: Pane, receipt: Receipt, text: str) -> Receipt:
        """Type the prompt; the receipt becomes pending once its turn began. Returns the
        record as it is then (``abandoned`` if the client abandoned it meanwhile)."""
        book = self._book
        turn_before = pane.status.turn
        try:
            cursor, _turn = await self._ctx.driver.send_input(
                pane.name, text, True, None, through_lease=True
            )
        except PanewardenError as exc:
            if exc.code in CLEAN_REFUSALS:
                await book.service_transition(
                    receipt.receipt_id,
                    "refused",
                    failure_stage="deliver",
                    failure_code=exc.code.value,
                )
            else:
                log.warning(
                    "delivery of receipt %s is ambiguous (%s); it stays reserved",
                    receipt.receipt_id,
                    exc.code.value,
                    extra={"pane": pane.name},
                )
                self._ambiguous(pane, receipt)
            raise
        receipt = await book.service_transition(receipt.receipt_id, "typed", cursor=cursor)
        if receipt.state != "reserved":
            return receipt
        started = await _turn_start(pane, cursor, turn_before, TURN_START_TIMEOUT_S)
        if started is None:
            self._ambiguous(pane, receipt)
            raise PanewardenError(
                ErrorCode.DELIVERY_AMBIGUOUS,
                f"the prompt was taken but pane {pane.name!r} showed no new turn within "
                f"{TURN_START_TIMEOUT_S:.0f}s; receipt {receipt.receipt_id} stays reserved",
            )
        return await book.service_transition(receipt.receipt_id, "started", turn=started.turn)

    async def relay(self, identity: str, creds: Credentials, name: str, text: str) -> str:
        """Hand a prompt to a leased pane; returns the receipt once its turn began."""
        check_input_text(text)
        ((pane, receipt),) = await self._admit_all(identity, creds, [name])
        pending = await self._deliver(pane, receipt, text)
        return pending.receipt_id

    async def batch(
        self,
        identity: str,
        creds: Credentials,
        requests: Sequence[HandoffRequest],
        mode: Mode,
        timeout_s: float,
        lines: int | None,
    ) -> Outcome:
        """Admit all, deliver all at once, then collect (all, or the first to settle)."""
        for request in requests:  # before anything is reserved
            check_input_text(request.text)
        admitted = await self._admit_all(identity, creds, [r.name for r in requests])
        texts = {r.name: r.text for r in requests}
        outcome = Outcome()
        delivered: list[Receipt] = []
        results = await asyncio.gather(
            *(self._deliver(pane, receipt, texts[pane.name]) for pane, receipt in admitted),
            return_exceptions=True,
        )
        for (pane, receipt), result in zip(admitted, results, strict=True):
            if isinstance(result, PanewardenError):
                outcome.failed.append(_failure(receipt.receipt_id, pane.name, "deliver", result))
            elif isinstance(result, BaseException):
                raise result
            else:
                delivered.append(result)
        await self._collect_into(outcome, delivered, mode, timeout_s, lines)
        return outcome

    # ------------------------------------------------------------ collection

    async def collect(
        self,
        identity: str,
        creds: Credentials,
        receipt_ids: Sequence[str],
        mode: Mode,
        timeout_s: float,
        lines: int | None,
    ) -> Outcome:
        """Collect receipts without typing anything."""
        if len(set(receipt_ids)) != len(receipt_ids):
            raise PanewardenError(ErrorCode.INVALID_ARGUMENT, "a receipt is listed twice")
        async with self._ctx.stores.locks.hold("controller"):
            ctl = self._ctx.authority.check(identity, creds)
        receipts = [self._load(ctl.controller_id, rid) for rid in receipt_ids]
        outcome = Outcome()
        await self._collect_into(outcome, receipts, mode, timeout_s, lines)
        return outcome

    async def _collect_into(
        self,
        outcome: Outcome,
        receipts: Sequence[Receipt],
        mode: Mode,
        timeout_s: float,
        lines: int | None,
    ) -> None:
        waiting: list[Receipt] = []
        for receipt in receipts:
            if receipt.state == "pending":
                waiting.append(receipt)
                continue
            entry = await self._entry(receipt, lines)
            (outcome.completed if "status" in entry else outcome.failed).append(entry)
        if not waiting:
            return
        tasks = {asyncio.ensure_future(self._settle(r, timeout_s, lines)): r for r in waiting}
        order = list(tasks)
        try:
            pending = set(tasks)
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                if mode == "first" and any(t.result() is not None for t in done):
                    break
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for task in order:
            receipt = tasks[task]
            result = task.result() if task.done() and not task.cancelled() else None
            if result is None:
                outcome.pending.append(receipt.receipt_id)
            elif "code" in result:
                outcome.failed.append(result)
            else:
                outcome.completed.append(result)

    async def _settle(
        self, receipt: Receipt, timeout_s: float, lines: int | None
    ) -> dict[str, Any] | None:
        """Wait for the settle of the receipt's turn; None on timeout."""
        assert receipt.cursor is not None and receipt.turn is not None
        pane = self._ctx.registry.panes.get(receipt.name)
        if pane is None or pane.handle.instance != receipt.instance:
            return await self._fail(receipt, "collect", ErrorCode.IDENTITY_CHANGED, lines)
        try:
            settled = await _turn_settle(pane, receipt.cursor, receipt.turn, timeout_s)
        except PanewardenError as exc:
            return await self._fail(receipt, "collect", exc.code, lines)
        if settled is None:
            return None
        if settled.lifecycle == "lost":
            return await self._fail(receipt, "collect", ErrorCode.WORKER_LOST, lines)
        output = await self._capture(pane, settled.seq, receipt.cursor, lines)
        digest = None if output is None else hashlib.sha256(output.text.encode()).hexdigest()
        if settled.state == "blocked":
            current = self._book.load(receipt.receipt_id)
            if current is not None and current.state != "pending":
                return await self._entry(current, lines)  # abandoned while blocked
            return _completed(receipt, settled, output)
        done = await self._book.service_transition(
            receipt.receipt_id, "settled", result=status_of(settled), capture_sha256=digest
        )
        if done.state != "completed" or done.result != status_of(settled):
            return await self._entry(done, lines)
        # Completed now, by this call or by another collection of the same settle.
        return _completed(done, settled, output)

    async def _capture(
        self, pane: Pane, seq: int, cursor: int | None, lines: int | None
    ) -> ScreenText | None:
        """The output of the receipt's turn (what the screen changed since its prompt was
        typed at ``cursor``), only if the pane is still at ``seq`` (checked in the worker)."""
        count = DEFAULT_CAPTURE_LINES if lines is None else lines
        try:
            reply = await self._ctx.driver.rpc(
                pane,
                lambda rid: ReadScreen(
                    rid=rid,
                    lines=count,
                    scrollback=True,
                    expected_seq=seq,
                    since_input=cursor,
                    quiet_s=CAPTURE_QUIET_S,
                ),
            )
        except PanewardenError as exc:
            if exc.code in (ErrorCode.CURSOR_MISMATCH, ErrorCode.WORKER_LOST):
                return None
            raise
        assert isinstance(reply, ScreenText)
        return reply

    async def _replay(self, receipt: Receipt, lines: int | None) -> dict[str, Any]:
        assert receipt.result is not None
        pane = self._ctx.registry.panes.get(receipt.name)
        output = None
        if pane is not None and pane.handle.instance == receipt.instance:
            output = await self._capture(pane, receipt.result.seq, receipt.cursor, lines)
        return _completed_item(receipt, receipt.result, output)

    async def _fail(
        self, receipt: Receipt, stage: str, code: ErrorCode, lines: int | None
    ) -> dict[str, Any]:
        """Fail a pending receipt; one that is no longer pending is reported as it is."""
        current = await self._book.service_transition(
            receipt.receipt_id, "lost", failure_stage=stage, failure_code=code.value
        )
        return await self._entry(current, lines)

    async def _entry(self, receipt: Receipt, lines: int | None) -> dict[str, Any]:
        """What a collection reports for a receipt that is not (or no longer) pending."""
        if receipt.state == "completed":
            return await self._replay(receipt, lines)
        if receipt.state == "reserved":
            return {
                "receipt": receipt.receipt_id,
                "name": receipt.name,
                "stage": "deliver",
                "code": ErrorCode.DELIVERY_AMBIGUOUS.value,
            }
        return _recorded_failure(receipt)

    # ------------------------------------------------------------ abandon

    async def abandon(self, identity: str, creds: Credentials, receipt_id: str) -> Receipt:
        """Release an outstanding receipt once its pane is seen settled (or gone)."""
        async with self._ctx.stores.locks.hold("controller", "receipts"):
            ctl = self._ctx.authority.check(identity, creds)
            receipt = self._load(ctl.controller_id, receipt_id)
            if receipt.state not in TRANSITIONS["abandon"][0]:
                raise StaleReceipt(receipt, "abandon")
            pane = self._ctx.registry.panes.get(receipt.name)
            if (
                pane is not None
                and pane.handle.instance == receipt.instance
                and not is_settled(pane.status)
            ):
                raise PanewardenError(
                    ErrorCode.PANE_BUSY,
                    f"pane {receipt.name!r} is {pane.status.state}; abandon once it settles",
                )
            return self._book.transition_locked(receipt_id, "abandon")


# ---------------------------------------------------------------- helpers


async def _turn_start(
    pane: Pane, cursor: int, turn_before: int, timeout_s: float
) -> PaneStatusFields | None:
    """The first status after ``cursor`` that opened a turn after ``turn_before``."""
    async for status in pane.history_after(cursor, time.monotonic() + timeout_s):
        if status.turn > turn_before:
            return status
        if has_ended(status):
            return None
    return None


async def _turn_settle(
    pane: Pane, cursor: int, turn: int, timeout_s: float
) -> PaneStatusFields | None:
    """The settle of ``turn``: its first settled status after ``cursor`` — a ``blocked``
    one only while it is the pane's latest and not answered (answered, the turn goes on,
    even before the program reported so) — or the pane's end. None on timeout.

    Raises:
        PanewardenError: ``cursor_mismatch`` when a later turn began and the settle of
            this one is no longer in the pane's history.
    """
    async for status in pane.history_after(cursor, time.monotonic() + timeout_s):
        if has_ended(status):
            return status
        if status.turn > turn:
            raise PanewardenError(
                ErrorCode.CURSOR_MISMATCH,
                "the pane moved to a later turn; this turn's result is no longer known",
            )
        if status.turn == turn and is_settled(status):
            if status.state == "blocked" and (
                pane.status.seq > status.seq or status.seq <= pane.answered_seq
            ):
                continue  # the dialog was answered: the turn goes on
            return status
    return None


def _status_dict(name: str, status: SettledStatus) -> dict[str, Any]:
    return {
        "name": name,
        "lifecycle": status.lifecycle,
        "state": status.state,
        "kind": status.kind,
        "turn": status.turn,
        "seq": status.seq,
        "source": status.source,
        "exit_code": status.exit_code,
    }


def _completed(
    receipt: Receipt, status: PaneStatusFields, output: ScreenText | None
) -> dict[str, Any]:
    return _completed_item(receipt, status_of(status), output)


def _completed_item(
    receipt: Receipt, status: SettledStatus, output: ScreenText | None
) -> dict[str, Any]:
    """A completed entry: the settled status and the turn's output, saying how it was cut."""
    return {
        "receipt": receipt.receipt_id,
        "name": receipt.name,
        "status": _status_dict(receipt.name, status),
        "output": None if output is None else output.text,
        "cut": None if output is None else output.cut,
    }


def _failure(receipt_id: str, name: str, stage: str, exc: PanewardenError) -> dict[str, Any]:
    return {"receipt": receipt_id, "name": name, "stage": stage, "code": exc.code.value}


def _recorded_failure(receipt: Receipt) -> dict[str, Any]:
    return {
        "receipt": receipt.receipt_id,
        "name": receipt.name,
        "stage": receipt.failure_stage or receipt.state,
        "code": receipt.failure_code or receipt.state,
    }
