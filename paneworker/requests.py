"""Handling of supervisor requests inside the worker's loop.

Each request is checked and acted on in one loop step, so a guard such as "not
blocked" or "still at turn N" cannot go stale between the check and the write.
Submitting a prompt is two steps: the text (bracketed as a paste when the program
asked for that), then Enter on its own a moment later (programs that read fast
input as a paste would otherwise not submit it). The request is answered only once
the program shows it took the prompt (a turn started, the pane went working or
blocked, or the prompt line changed), else ``delivery_ambiguous`` after
``SUBMIT_ACK_TIMEOUT_S``: "sent" must never be reported for a prompt that is still
sitting unsubmitted in the input line.

Answering a dialog first reads whatever output the PTY already holds, so the
recogniser sees the newest screen, then checks and writes in the same step. The
first key waits until the pane has been quiet for ``DIALOG_SETTLE_S`` (bounded by
``DIALOG_SETTLE_MAX_S``), re-checking and re-planning on the newest screen when it
is pressed: a program still busy with the answers to its start-up queries drops
keys. A plan
of several keys (arrows, then Enter) is pressed one key per step: before each later
key the dialog is read again and the answer is refused with ``dialog_changed``
unless it is the same dialog (same fingerprint) with the focus moved as planned.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from paneworker.dialogs import DENY_ONCE, DialogPlan, DialogScreen, Recogniser, recogniser_for
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
# After Enter, how often the pane is looked at for a sign that the prompt was taken, and
# for how long before the delivery is reported ambiguous.
SUBMIT_POLL_S = 0.02
SUBMIT_ACK_TIMEOUT_S = 5.0
# How much of the prompt's end is looked for on the input line (input boxes scroll long
# lines horizontally, so only the end is sure to be visible).
PROMPT_TAIL_CHARS = 16
# Between the keys of a multi-key dialog answer: how often the screen is looked at,
# and how long the dialog may take to redraw after a key before the answer is dropped.
DIALOG_POLL_S = 0.02
DIALOG_REDRAW_TIMEOUT_S = 2.0
# Before the first key of an answer the pane must have been quiet (no output, no query
# answered) this long, or DIALOG_SETTLE_MAX_S must have passed since the request.
DIALOG_SETTLE_S = 0.2
DIALOG_SETTLE_MAX_S = 1.0


@dataclass
class _Submission:
    """A submitted prompt waiting for the program to show it was taken."""

    rid: int
    turn: int
    state: str
    tail: str
    row: int
    line: str
    seen_tail: bool = False
    deadline: float = 0.0


def _squeeze(text: str) -> str:
    """Whitespace runs as one space: tabs and padding are drawn, not echoed, as typed."""
    return " ".join(text.split())


def _prompt_tail(text: str) -> str:
    """The end of the prompt's last line, as a program would echo it on its input line."""
    lines = text.strip().splitlines()
    return _squeeze(lines[-1])[-PROMPT_TAIL_CHARS:].strip() if lines else ""


@dataclass
class _DialogAnswer:
    """A dialog answer whose keys are still being pressed, one loop step per key."""

    rid: int
    answer: str
    recogniser: Recogniser
    turn: int
    fingerprint: tuple[str, ...]
    pressed: int = 0
    remaining: int = 0
    generation: int = -1
    deadline: float = 0.0


class RequestHandler:
    """Dispatches ``ToWorker`` requests and runs the delayed steps they schedule."""

    def __init__(
        self,
        worker: PaneWorker,
        *,
        clock: Callable[[], float] = time.monotonic,
        dialog_settle_s: float = DIALOG_SETTLE_S,
    ) -> None:
        self.w = worker
        self._clock = clock
        self._settle_s = dialog_settle_s
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._dialog: _DialogAnswer | None = None

    # ------------------------------------------------------------ scheduling

    def next_deadline(self) -> float:
        """When the earliest delayed step is due (far future when none)."""
        return self._due[0][0] if self._due else self._clock() + 3600.0

    def run_due(self, now: float) -> None:
        """Run every delayed step whose time has come."""
        while self._due and self._due[0][0] <= now:
            _, _, step = heapq.heappop(self._due)
            step()

    def _later(self, delay_s: float, step: Callable[[], None]) -> None:
        heapq.heappush(self._due, (self._clock() + delay_s, next(self._order), step))

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
        if status.state == "blocked" or self._dialog is not None:
            raise PanewardenError(
                ErrorCode.PANE_BLOCKED,
                f"the pane is waiting on a {status.kind or 'permission'} dialog; answer it first",
            )
        self._check_turn(msg.expect_turn)
        payload = msg.text.encode()
        if self.w.screen.terminal.bracketed_paste and payload:
            payload = PASTE_START + payload.replace(b"\n", b"\r") + PASTE_END
        rid = msg.rid
        if not msg.submit:
            self._queue(payload, lambda: self._ok(rid))
            return
        tail = _prompt_tail(msg.text)
        self._queue(
            payload, lambda: self._later(ENTER_DELAY_S, lambda: self._press_enter(rid, tail))
        )

    def _press_enter(self, rid: int, tail: str) -> None:
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
        self._drain_output()
        row, line = self._input_line()
        status = self.w.screen.status
        sent = _Submission(rid, status.turn, status.state, tail, row, line)
        sent.seen_tail = bool(tail) and tail in line
        self._queue(b"\r", lambda: self._submitted(sent))

    def _submitted(self, sent: _Submission) -> None:
        sent.deadline = self._clock() + SUBMIT_ACK_TIMEOUT_S
        self._await_ack(sent)

    def _input_line(self) -> tuple[int, str]:
        """The cursor's row and what it shows (the prompt line, usually)."""
        terminal = self.w.screen.terminal
        row = terminal.cursor[0]
        return row, _squeeze(terminal.display_lines()[row])

    def _taken(self, sent: _Submission) -> bool:
        """True once the program shows it took the prompt.

        Taken = the program exited; a turn started or the pane went working or blocked; or
        the typed text, once seen on the cursor's row, is gone from it (the prompt was
        cleared or the cursor moved on). A prompt never seen there (shown abbreviated)
        counts only by status; an empty prompt counts on any change of the cursor's row.
        """
        status = self.w.screen.status
        prog = self.w.program
        if prog is None or prog.eof or status.lifecycle != "running":
            return True
        if status.turn != sent.turn or (
            status.state != sent.state and status.state in ("working", "blocked")
        ):
            return True
        row, line = self._input_line()
        if sent.tail and sent.tail in line:
            # Seen now, perhaps only now: a slow echo is not a submission.
            sent.seen_tail = True
            return False
        if sent.seen_tail:
            return True
        return (row, line) != (sent.row, sent.line) and not sent.tail

    def _await_ack(self, sent: _Submission) -> None:
        """Reply once the prompt was taken; ``delivery_ambiguous`` after the bound."""
        self._drain_output()
        if self._taken(sent):
            self._ok(sent.rid)
            return
        if self._clock() >= sent.deadline:
            self.w.link.send(
                Failed(
                    rid=sent.rid,
                    code=ErrorCode.DELIVERY_AMBIGUOUS.value,
                    message=(
                        "the text and Enter were typed but the program showed no sign of "
                        f"taking the prompt within {SUBMIT_ACK_TIMEOUT_S:.0f}s"
                    ),
                )
            )
            return
        self._later(SUBMIT_POLL_S, lambda: self._await_ack(sent))

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
        if self._dialog is not None:
            raise PanewardenError(
                ErrorCode.DIALOG_CHANGED, "another answer to this dialog is still being pressed"
            )
        self._drain_output()
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
        recogniser = recogniser_for(self.w.boot.agent)
        plan = recogniser(self._dialog_screen(), msg.answer)
        job = _DialogAnswer(msg.rid, msg.answer, recogniser, status.turn, plan.fingerprint)
        job.deadline = self._clock() + DIALOG_SETTLE_MAX_S
        self._dialog = job
        self._first_key(job, plan)

    def _first_key(self, job: _DialogAnswer, plan: DialogPlan) -> None:
        """Press the first key once the pane is quiet (bounded); the check is in this step."""
        quiet_s = self._clock() - self.w.screen.last_activity
        if quiet_s < self._settle_s and self._clock() < job.deadline:
            # Real CLIs still reading the answers to their start-up queries drop keys
            # (Claude Code swallowed an Esc sent right after its trust prompt appeared).
            self._later(self._settle_s - quiet_s, lambda: self._continue_dialog(job))
            return
        self._press(job, plan)

    def _dialog_screen(self) -> DialogScreen:
        return DialogScreen.from_terminal(self.w.screen.terminal)

    def _drain_output(self) -> None:
        """Parse what the program already wrote, so checks see the newest screen."""
        self.w.screen.catch_up()

    def _press(self, job: _DialogAnswer, plan: DialogPlan) -> None:
        """Write the plan's first key; the last one completes the request."""
        job.pressed += 1
        if len(plan.steps) == 1:
            self._dialog = None
            if job.answer == DENY_ONCE:
                self.w.screen.status.note_cancel()
            rid = job.rid
            self._queue(plan.keys, lambda: self._ok(rid))
            return
        self._dialog = job
        job.remaining = len(plan.steps) - 1
        job.generation = self.w.screen.terminal.text_generation
        job.deadline = self._clock() + DIALOG_REDRAW_TIMEOUT_S
        self._queue(plan.keys)
        self._later(DIALOG_POLL_S, lambda: self._continue_dialog(job))

    def _replan(self, job: _DialogAnswer) -> DialogPlan:
        """The recogniser's plan on the screen as it is now, for the same dialog only."""
        try:
            plan = job.recogniser(self._dialog_screen(), job.answer)
        except PanewardenError as exc:
            raise PanewardenError(
                ErrorCode.DIALOG_CHANGED,
                "the dialog changed while it was being answered; no further key was sent",
            ) from exc
        if plan.fingerprint != job.fingerprint:
            raise PanewardenError(
                ErrorCode.DIALOG_CHANGED,
                "another dialog replaced the one being answered; no further key was sent",
            )
        return plan

    def _continue_dialog(self, job: _DialogAnswer) -> None:
        try:
            self._next_dialog_key(job)
        except PanewardenError as exc:
            self._dialog = None
            self.w.link.send(Failed(rid=job.rid, code=exc.code.value, message=exc.message))

    def _next_dialog_key(self, job: _DialogAnswer) -> None:
        """Re-read the dialog; press the next key only if it is the same dialog, as planned."""
        self._drain_output()
        self._running_program()
        status = self.w.screen.status
        if status.state != "blocked" or status.kind != "permission" or status.turn != job.turn:
            raise PanewardenError(
                ErrorCode.DIALOG_CHANGED,
                "the pane left the dialog before the answer was complete; no further key was sent",
            )
        if job.pressed == 0:
            # Still settling: nothing was pressed, so plan afresh on the newest screen.
            plan = self._replan(job)
            self._first_key(job, plan)
            return
        generation = self.w.screen.terminal.text_generation
        if generation != job.generation:
            job.generation = generation
            plan = self._replan(job)
            if len(plan.steps) == job.remaining:
                self._press(job, plan)
                return
            if len(plan.steps) != job.remaining + 1:
                raise PanewardenError(
                    ErrorCode.DIALOG_CHANGED,
                    "the dialog's focus did not move as planned; no further key was sent",
                )
            # Something else on screen changed; the focus has not moved yet.
        if self._clock() >= job.deadline:
            raise PanewardenError(
                ErrorCode.DIALOG_CHANGED,
                "the dialog did not react to the last key in time; no further key was sent",
            )
        self._later(DIALOG_POLL_S, lambda: self._continue_dialog(job))

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
        self._drain_output()  # what was written for the old size is drawn at that size
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
