"""Driving running panes: input, screen reads, dialog answers, interrupts and waits.

Each call becomes one worker request (the worker does every check-then-act in one
loop step) or a wait on the pane's status history. Failures are ``PanewardenError``
with the worker's stable code.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from protocol.errors import ErrorCode, PanewardenError
from protocol.messages import (
    AnswerDialog,
    CancelWatch,
    DialogAnswer,
    Failed,
    Interrupt,
    Ok,
    OutputMatch,
    PaneStatusFields,
    ReadScreen,
    ScreenText,
    ToWorker,
    WatchOutput,
    WriteInput,
)
from protocol.timing import WRITE_INPUT_REPLY_S
from supervisor.panes.input_text import check_input_text
from supervisor.panes.pane import Pane, wait_for_status
from supervisor.panes.registry import PaneRegistry
from supervisor.workers.manager import Reply, WorkerManager

RPC_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class WaitTarget:
    """One pane of a ``wait_any`` with its own cursor."""

    name: str
    after_seq: int | None


class PaneDriver:
    """Sends requests to running panes and waits on their status; see the module docstring."""

    def __init__(self, registry: PaneRegistry, workers: WorkerManager) -> None:
        self._registry = registry
        self._workers = workers
        self._watches: dict[int, asyncio.Future[OutputMatch]] = {}
        self._watch_ids = itertools.count(1)
        registry.on_output_match(self._on_output_match)

    async def rpc(
        self, pane: Pane, make: Callable[[int], ToWorker], timeout_s: float = RPC_TIMEOUT_S
    ) -> Reply:
        """One request to ``pane``'s worker; a ``Failed`` reply is raised as its code."""
        if pane.status.lifecycle == "lost" or pane.handle.dead:
            raise PanewardenError(ErrorCode.WORKER_LOST, f"pane {pane.name!r} is lost")
        reply = await self._workers.request(pane.handle, make, timeout_s)
        if isinstance(reply, Failed):
            raise PanewardenError(error_code(reply.code), reply.message)
        return reply

    async def send_input(
        self,
        name: str,
        text: str,
        submit: bool,
        expect_turn: int | None,
        *,
        through_lease: bool = False,
    ) -> tuple[int, int]:
        """Type text (and Enter) unless the pane is blocked; returns (cursor, turn).

        A leased pane takes input only through its lease (``through_lease``: relay).
        """
        check_input_text(text)
        pane = await self._registry.ready(name)
        if not through_lease:
            refuse_leased(pane, "send_input")
        reply = await self.rpc(
            pane,
            lambda rid: WriteInput(rid=rid, text=text, submit=submit, expect_turn=expect_turn),
            WRITE_INPUT_REPLY_S,
        )
        assert isinstance(reply, Ok)
        return reply.seq, reply.turn

    async def read_output(self, name: str, lines: int | None, scrollback: bool) -> ScreenText:
        """The pane's screen text (escape-free), optionally with scrollback."""
        reply = await self.rpc(
            await self._registry.ready(name),
            lambda rid: ReadScreen(rid=rid, lines=lines, scrollback=scrollback),
        )
        assert isinstance(reply, ScreenText)
        return reply

    async def interrupt(self, name: str) -> int:
        """Send Ctrl-C to the pane's PTY; returns the cursor taken before it."""
        reply = await self.rpc(await self._registry.ready(name), lambda rid: Interrupt(rid=rid))
        assert isinstance(reply, Ok)
        return reply.seq

    async def answer_dialog(
        self, name: str, answer: DialogAnswer, expect_turn: int | None
    ) -> tuple[int, int]:
        """Answer the pane's permission dialog with allow_once or deny_once."""
        pane = await self._registry.ready(name)
        reply = await self.rpc(
            pane,
            lambda rid: AnswerDialog(rid=rid, answer=answer, expect_turn=expect_turn),
        )
        assert isinstance(reply, Ok)
        pane.answered_seq = max(pane.answered_seq, reply.seq)
        return reply.seq, reply.turn

    # ------------------------------------------------------------ waits

    async def wait_status(
        self, name: str, until: Collection[str], after_seq: int | None, timeout_s: float
    ) -> tuple[PaneStatusFields, bool]:
        """Wait for a status after ``after_seq`` in ``until``; returns (status, timed_out)."""
        pane = await self._registry.ready(name)
        return await wait_for_status(pane, until, after_seq, timeout_s)

    async def wait_any(
        self, targets: Sequence[WaitTarget], until: Collection[str], timeout_s: float
    ) -> tuple[str, PaneStatusFields] | None:
        """The first pane to match; None on timeout. Losing waits are cancelled."""
        panes = [(t, await self._registry.ready(t.name)) for t in targets]
        tasks = {
            asyncio.ensure_future(wait_for_status(p, until, t.after_seq, timeout_s)): t.name
            for t, p in panes
        }
        order = list(tasks)
        try:
            pending = set(tasks)
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in sorted(done, key=order.index):
                    status, timed_out = task.result()
                    if not timed_out:
                        return tasks[task], status
            return None
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def wait_output(
        self, name: str, pattern: str, regex: bool, timeout_s: float
    ) -> OutputMatch | None:
        """Wait until ``pattern`` shows on the pane's screen; None on timeout."""
        pane = await self._registry.ready(name)
        watch_id = next(self._watch_ids)
        future: asyncio.Future[OutputMatch] = asyncio.get_running_loop().create_future()
        self._watches[watch_id] = future
        try:
            await self.rpc(
                pane,
                lambda rid: WatchOutput(rid=rid, watch_id=watch_id, pattern=pattern, regex=regex),
            )
            # A pane whose program ends will never show the pattern: stop waiting then.
            died = asyncio.ensure_future(wait_for_status(pane, (), pane.status.seq, timeout_s))
            waiters: set[asyncio.Future[Any]] = {future, died}
            try:
                done, _ = await asyncio.wait(
                    waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                died.cancel()
            return future.result() if future in done else None
        finally:
            self._watches.pop(watch_id, None)
            if not future.done() and not pane.handle.dead and not pane.removed:
                self._workers.send(pane.handle, CancelWatch(rid=0, watch_id=watch_id))

    def _on_output_match(self, match: OutputMatch) -> None:
        future = self._watches.get(match.watch_id)
        if future is not None and not future.done():
            future.set_result(match)


def refuse_leased(pane: Pane, tool: str) -> None:
    """``pane_leased`` for a plain call on a pane driven through a lease."""
    if pane.lease is not None:
        raise PanewardenError(
            ErrorCode.PANE_LEASED,
            f"pane {pane.name!r} has a {pane.lease.lease_type} lease; {tool} is refused: "
            "drive it through its lease (relay, handoff) and close it with the lease",
        )


def error_code(raw: str) -> ErrorCode:
    """The error code a worker named (``internal`` for one this side does not know)."""
    try:
        return ErrorCode(raw)
    except ValueError:
        return ErrorCode.INTERNAL
