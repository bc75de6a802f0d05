"""Handling of supervisor requests inside the worker's loop.

Each request is checked and acted on in one loop step, so a guard such as "not
blocked" or "still at turn N" cannot go stale between the check and the write.
Submitting a prompt is two steps: the text, then Enter on its own a moment later
(programs that read fast input as a paste would otherwise not submit it).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from paneworker.dialogs import recogniser_for
from paneworker.screenstate import Watch
from protocol.errors import ErrorCode, PanewardenError
from protocol.messages import (
    AnswerDialog,
    CancelWatch,
    Close,
    Closed,
    Failed,
    Heartbeat,
    Interrupt,
    Ok,
    Ping,
    ReadScreen,
    Resize,
    ScreenText,
    ToWorker,
    WatchOutput,
    WriteInput,
)

if TYPE_CHECKING:
    from paneworker.worker import PaneWorker

log = logging.getLogger(__name__)

ENTER_DELAY_S = 0.05
PASTE_START = b"\x1b[200~"
PASTE_END = b"\x1b[201~"


class RequestHandler:
    """Dispatches ``ToWorker`` requests and runs the delayed steps they schedule."""

    def __init__(self, worker: PaneWorker) -> None:
        self.w = worker
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()

    # ------------------------------------------------------------ scheduling

    def next_deadline(self) -> float:
        """When the earliest delayed step is due (far future when none)."""
        return self._due[0][0] if self._due else time.monotonic() + 3600.0

    def run_due(self, now: float) -> None:
        """Run every delayed step whose time has come."""
        while self._due and self._due[0][0] <= now:
            _, _, step = heapq.heappop(self._due)
            step()

    def _later(self, delay_s: float, step: Callable[[], None]) -> None:
        heapq.heappush(self._due, (time.monotonic() + delay_s, next(self._order), step))

    # ------------------------------------------------------------ dispatch

    def handle(self, msg: ToWorker) -> None:
        """Act on one request; failures become ``Failed`` replies, never exceptions."""
        if isinstance(msg, Heartbeat):
            return
        rid = msg.rid
        try:
            self._dispatch(msg)
        except PanewardenError as exc:
            self.w.link.send(Failed(rid=rid, code=exc.code.value, message=exc.message))
        except Exception:
            log.exception("request %s failed", type(msg).__name__, extra={"pane": self.w.boot.pane})
            self.w.link.send(Failed(rid=rid, code="internal", message="internal worker error"))

    def _dispatch(self, msg: ToWorker) -> None:
        match msg:
            case Ping(rid=rid):
                self._ok(rid)
            case WriteInput():
                self._write_input(msg)
            case Interrupt(rid=rid):
                self._running_program()
                self.w.screen.status.note_cancel()
                self._queue(b"\x03", lambda: self._ok(rid))
            case ReadScreen():
                self._read_screen(msg)
            case AnswerDialog():
                self._answer_dialog(msg)
            case WatchOutput():
                self._watch(msg)
            case CancelWatch(rid=rid, watch_id=watch_id):
                self.w.screen.watches.pop(watch_id, None)
                self._ok(rid)
            case Resize():
                self._resize(msg)
            case Close():
                self._close(msg)
            case _:
                raise PanewardenError(ErrorCode.INVALID_ARGUMENT, "unsupported request")

    # ------------------------------------------------------------ helpers

    def _ok(self, rid: int) -> None:
        status = self.w.screen.status
        self.w.link.send(Ok(rid=rid, seq=status.seq, turn=status.turn))

    def _running_program(self) -> None:
        prog = self.w.program
        if prog is None or self.w.screen.status.lifecycle != "running" or prog.eof:
            raise PanewardenError(ErrorCode.PANE_NOT_RUNNING, "the pane's program is not running")

    def _queue(self, data: bytes, done: Callable[[], None] | None = None) -> None:
        prog = self.w.program
        assert prog is not None
        prog.queue_input(data, done)
        prog.flush()

    def _check_turn(self, expect_turn: int | None) -> None:
        turn = self.w.screen.status.turn
        if expect_turn is not None and expect_turn != turn:
            raise PanewardenError(
                ErrorCode.CURSOR_MISMATCH, f"the pane is at turn {turn}, not {expect_turn}"
            )

    # ------------------------------------------------------------ requests

    def _write_input(self, msg: WriteInput) -> None:
        self._running_program()
        status = self.w.screen.status
        if status.state == "blocked":
            raise PanewardenError(
                ErrorCode.PANE_BLOCKED,
                f"the pane is waiting on a {status.kind} dialog; answer it first",
            )
        self._check_turn(msg.expect_turn)
        payload = msg.text.encode()
        if self.w.screen.terminal.bracketed_paste and payload:
            payload = PASTE_START + payload.replace(b"\n", b"\r") + PASTE_END
        rid = msg.rid
        if not msg.submit:
            self._queue(payload, lambda: self._ok(rid))
            return
        self._queue(payload, lambda: self._later(ENTER_DELAY_S, lambda: self._press_enter(rid)))

    def _press_enter(self, rid: int) -> None:
        try:
            self._running_program()
        except PanewardenError as exc:
            self.w.link.send(Failed(rid=rid, code=exc.code.value, message=exc.message))
            return
        if self.w.screen.status.state == "blocked":
            # The text is typed but a dialog came up first: Enter would answer it.
            self.w.link.send(
                Failed(
                    rid=rid,
                    code=ErrorCode.DELIVERY_AMBIGUOUS.value,
                    message="a dialog appeared after the text was typed; Enter was not sent",
                )
            )
            return
        self._queue(b"\r", lambda: self._ok(rid))

    def _read_screen(self, msg: ReadScreen) -> None:
        screen = self.w.screen
        status = screen.status
        self.w.link.send(
            ScreenText(
                rid=msg.rid,
                text=screen.text(msg.lines, msg.scrollback),
                cursor=screen.terminal.cursor,
                cols=screen.terminal.cols,
                rows=screen.terminal.rows,
                seq=status.seq,
                turn=status.turn,
                state=status.state,
            )
        )

    def _answer_dialog(self, msg: AnswerDialog) -> None:
        self._running_program()
        status = self.w.screen.status
        if status.state != "blocked":
            raise PanewardenError(ErrorCode.NO_DIALOG, "the pane is not blocked on a dialog")
        self._check_turn(msg.expect_turn)
        if status.kind != "permission":
            raise PanewardenError(
                ErrorCode.DIALOG_UNRECOGNIZED,
                f"only permission dialogs are answered; this one is a {status.kind} dialog",
            )
        plan = recogniser_for(self.w.boot.agent)(self.w.screen.terminal.display_lines(), msg.answer)
        if msg.answer == "deny_once":
            status.note_cancel()
        rid = msg.rid
        self._queue(plan.keys, lambda: self._ok(rid))

    def _watch(self, msg: WatchOutput) -> None:
        compiled: re.Pattern[str] | None = None
        if msg.regex:
            try:
                compiled = re.compile(msg.pattern)
            except re.error as exc:
                raise PanewardenError(
                    ErrorCode.INVALID_ARGUMENT, f"bad regular expression: {exc}"
                ) from exc
        self._ok(msg.rid)
        self.w.screen.add_watch(Watch(msg.watch_id, msg.pattern, compiled))

    def _resize(self, msg: Resize) -> None:
        self._running_program()
        prog = self.w.program
        assert prog is not None
        self.w.screen.terminal.resize(msg.cols, msg.rows)
        prog.resize(msg.cols, msg.rows)
        self._ok(msg.rid)

    def _close(self, msg: Close) -> None:
        status = self.w.screen.status
        if msg.expected_seq is not None and msg.expected_seq != status.seq:
            raise PanewardenError(
                ErrorCode.CURSOR_MISMATCH,
                f"the pane's seq is {status.seq}, not {msg.expected_seq}; nothing was closed",
            )
        captured = (
            self.w.screen.text(msg.capture_lines, scrollback=True)
            if msg.capture_lines is not None
            else None
        )
        seq = status.seq
        exit_code, killed = self.w.kill_everything(msg.grace_s)
        self.w.link.send(
            Closed(rid=msg.rid, exit_code=exit_code, killed=killed, captured=captured, seq=seq)
        )
        self.w.running = False
