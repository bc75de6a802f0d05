"""Handling of supervisor requests inside the worker's loop.

Each request is checked and acted on in one loop step, so a guard such as "not
blocked" or "still at turn N" cannot go stale between the check and the write.
The two requests that span several steps are state machines of their own:
:mod:`paneworker.requests.prompt_delivery` (``WriteInput``) and
:mod:`paneworker.requests.dialog_answering` (``AnswerDialog``). Replies that give the client a
cursor (``WriteInput``, ``AnswerDialog``, ``Interrupt``) carry the seq taken before
the input was queued, so a wait after it sees every status the input caused.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from paneworker.requests.dialog_answering import (
    DIALOG_APPEAR_TIMEOUT_S,
    DIALOG_SETTLE_MAX_S,
    DIALOG_SETTLE_S,
    DialogAnswering,
)
from paneworker.requests.pane_io import PaneIO
from paneworker.requests.prompt_delivery import PromptDelivery
from paneworker.requests.scheduler import Scheduler
from paneworker.screen.patterns import compile_pattern
from paneworker.screen.state import Watch
from protocol.agents.table import spec_for
from protocol.errors import ErrorCode, PanewardenError
from protocol.messages import (
    READ_QUIET_MAX_S,
    AnswerDialog,
    CancelWatch,
    Close,
    Closed,
    Heartbeat,
    Interrupt,
    Introduce,
    OutputCut,
    Ping,
    ReadScreen,
    Resize,
    ScreenText,
    SubscribeScreen,
    ToWorker,
    UnsubscribeScreen,
    WatchOutput,
    WriteInput,
)

log = logging.getLogger(__name__)


class PaneControl(Protocol):
    """What a request may do to the pane as a whole (the worker's loop does it)."""

    def introduce(self) -> None:
        """Send Hello and the descendants again (a new supervisor asks)."""

    def close(self, grace_s: float) -> tuple[int | None, int]:
        """Kill the program's tree and end the loop; returns (exit code, signalled)."""
        ...


class Substrate(Protocol):
    """What speaks to the program when it is not a terminal (an ACP pane's session):
    prompts, dialog answers, interrupts and a turn's own output go through it."""

    def write_input(self, msg: WriteInput) -> None:
        """Send the prompt; raises PanewardenError when refused."""

    def answer_dialog(self, msg: AnswerDialog) -> None:
        """Answer the permission request shown; raises PanewardenError when refused."""

    def interrupt(self, rid: int) -> None:
        """Cancel the turn in flight; raises PanewardenError when refused."""

    def turn_text(self, cursor: int, lines: int | None) -> str | None:
        """The output of the turn the input at ``cursor`` started, or None."""


class RequestHandler:
    """Dispatches ``ToWorker`` requests; runs the delayed steps they schedule."""

    def __init__(
        self,
        io: PaneIO,
        pane: PaneControl,
        agent: str,
        *,
        name: str = "",
        clock: Callable[[], float] = time.monotonic,
        dialog_settle_s: float = DIALOG_SETTLE_S,
        dialog_appear_s: float = DIALOG_APPEAR_TIMEOUT_S,
        substrate: Substrate | None = None,
    ) -> None:
        """``io``: the pane's program, screen and replies; ``pane``: what closes it;
        ``agent``: its kind (dialogs, Enter); ``name``: the pane, for log lines;
        ``substrate``: what prompts go through instead of the terminal (ACP panes)."""
        self.io = io
        self.substrate = substrate
        self.screen = io.screen
        self._pane = pane
        self._name = name
        self.scheduler = Scheduler(clock)
        self.dialogs = DialogAnswering(
            self.io,
            self.scheduler,
            agent,
            settle_s=dialog_settle_s,
            appear_s=dialog_appear_s,
        )
        self._spec = spec_for(agent)
        self._settle_s = dialog_settle_s
        self.prompts = PromptDelivery(
            self.io,
            self.scheduler,
            lambda: self.dialogs.in_progress,
            enter_after_echo=spec_for(agent).enter_after_echo,
            submit_sign=spec_for(agent).submit_sign,
        )

    # ------------------------------------------------------------ scheduling

    def next_deadline(self) -> float:
        """When the earliest delayed step is due (far future when none)."""
        return self.scheduler.next_deadline()

    def run_due(self, now: float) -> None:
        """Run every delayed step whose time has come."""
        self.scheduler.run_due(now)

    # ------------------------------------------------------------ dispatch

    def handle(self, msg: ToWorker) -> None:
        """Act on one request; failures become ``Failed`` replies, never exceptions."""
        if isinstance(msg, Heartbeat):
            return
        if isinstance(msg, Introduce):
            self._pane.introduce()
            return
        rid = msg.rid
        try:
            self._dispatch(msg)
        except PanewardenError as exc:
            self.io.fail(rid, exc)
        except Exception:
            log.exception("request %s failed", type(msg).__name__, extra={"pane": self._name})
            self.io.fail(rid, PanewardenError(ErrorCode.INTERNAL, "internal worker error"))

    def _dispatch(self, msg: ToWorker) -> None:
        if self.substrate is not None and self._dispatch_substrate(self.substrate, msg):
            return
        match msg:
            case Ping(rid=rid):
                self.io.ok(rid)
            case WriteInput():
                self.prompts.start(msg)
            case Interrupt(rid=rid):
                self.io.running_program()
                cursor = self.io.cursor()
                # A program showing a choice ignores Ctrl-C there (Claude Code's start-up
                # offer did): it gets the key its kind documents as cancelling it.
                self.io.drain_output()
                self.screen.status.note_cancel()
                if self.screen.status.state == "blocked":
                    deadline = self.scheduler.clock() + DIALOG_SETTLE_MAX_S
                    self._interrupt_choice(rid, cursor, deadline)
                else:
                    self.io.queue(b"\x03", lambda: self.io.ok(rid, cursor))
            case ReadScreen():
                self._read_screen(msg)
            case AnswerDialog():
                self.dialogs.start(msg)
            case WatchOutput():
                self._watch(msg)
            case CancelWatch(rid=rid, watch_id=watch_id):
                self.screen.watches.pop(watch_id, None)
                self.io.ok(rid)
            case Resize():
                self._resize(msg)
            case Close():
                self._close(msg)
            case SubscribeScreen(rid=rid):
                self.screen.screen_feed.subscribe()
                self.io.ok(rid)
            case UnsubscribeScreen(rid=rid):
                self.screen.screen_feed.unsubscribe()
                self.io.ok(rid)
            case _:
                raise PanewardenError(ErrorCode.INVALID_ARGUMENT, "unsupported request")

    def _dispatch_substrate(self, substrate: Substrate, msg: ToWorker) -> bool:
        """The requests a substrate answers instead of the terminal; True if handled."""
        match msg:
            case WriteInput():
                substrate.write_input(msg)
            case AnswerDialog():
                substrate.answer_dialog(msg)
            case Interrupt(rid=rid):
                substrate.interrupt(rid)
            case Resize(rid=rid, cols=cols, rows=rows):
                # No window size on pipes: only the pane's own screen changes.
                self.screen.catch_up()
                self.screen.terminal.resize(cols, rows)
                self.io.ok(rid)
            case _:
                return False
        return True

    # ------------------------------------------------------------ requests

    def _deferred_until_quiet(
        self, rid: int, quiet_s: float | None, since: float | None, step: Callable[[float], None]
    ) -> bool:
        """Put ``step`` off until the program wrote nothing for ``quiet_s`` (at most
        ``READ_QUIET_MAX_S`` after ``since``, the request's arrival); True if put off.
        The step runs again with ``since`` and checks what it checks then, in that step."""
        if not quiet_s:
            return False
        now = self.scheduler.clock()
        first = now if since is None else since
        self.screen.drain()
        wait = min(self.screen.last_activity + quiet_s - now, first + READ_QUIET_MAX_S - now)
        if wait <= 0:
            return False
        self.scheduler.later(wait, lambda: self._step_later(rid, lambda: step(first)))
        return True

    def _interrupt_choice(self, rid: int, cursor: int, deadline: float) -> None:
        """The kind's cancel key for a choice, once the pane is quiet (as a dialog answer
        waits: Claude Code drops an Esc sent while it still draws), at most until
        ``deadline``."""
        self.io.running_program()
        now = self.scheduler.clock()
        self.screen.drain()
        quiet_s = now - self.screen.last_activity
        if quiet_s < self._settle_s and now < deadline:
            self.scheduler.later(
                self._settle_s - quiet_s,
                lambda: self._step_later(
                    rid, lambda: self._interrupt_choice(rid, cursor, deadline)
                ),
            )
            return
        self.io.queue(self._spec.choice_interrupt, lambda: self.io.ok(rid, cursor))

    def _step_later(self, rid: int, step: Callable[[], None]) -> None:
        try:
            step()
        except PanewardenError as exc:
            self.io.fail(rid, exc)

    def _read_screen(self, msg: ReadScreen, since: float | None = None) -> None:
        screen = self.screen
        if self._deferred_until_quiet(
            msg.rid, msg.quiet_s, since, lambda first: self._read_screen(msg, first)
        ):
            return
        status = screen.status
        if msg.expected_seq is not None and msg.expected_seq != status.seq:
            # A capture bound to a cursor: the pane moved on, its screen is another's.
            raise PanewardenError(
                ErrorCode.CURSOR_MISMATCH,
                f"the pane's seq is {status.seq}, not {msg.expected_seq}; nothing was read",
            )
        text = None
        cut: OutputCut | None = None
        if msg.since_input is not None and self.substrate is not None:
            # The turn's own output, exactly (no screen cut), when the substrate has it.
            text = self.substrate.turn_text(msg.since_input, msg.lines)
            cut = "turn" if text is not None else None
        if msg.since_input is not None and text is None:
            text = screen.turn_text(msg.since_input, msg.lines)
            cut = "turn" if text is not None else "newest"
        if text is None:
            text = screen.text(msg.lines, msg.scrollback or msg.since_input is not None)
        self.io.send(
            ScreenText(
                rid=msg.rid,
                text=text,
                cursor=screen.terminal.cursor,
                cols=screen.terminal.cols,
                rows=screen.terminal.rows,
                seq=status.seq,
                turn=status.turn,
                state=status.state,
                cut=cut,
            )
        )

    def _watch(self, msg: WatchOutput) -> None:
        compiled = compile_pattern(msg.pattern) if msg.regex else None
        self.io.ok(msg.rid)
        self.screen.add_watch(Watch(msg.watch_id, msg.pattern, compiled))

    def _resize(self, msg: Resize) -> None:
        prog = self.io.running_program()
        self.io.drain_output()  # what was written for the old size is drawn at that size
        self.screen.terminal.resize(msg.cols, msg.rows)
        prog.resize(msg.cols, msg.rows)
        self.io.ok(msg.rid)

    def _close(self, msg: Close, since: float | None = None) -> None:
        if self._deferred_until_quiet(
            msg.rid, msg.quiet_s, since, lambda first: self._close(msg, first)
        ):
            return
        status = self.screen.status
        if msg.expected_seq is not None and msg.expected_seq != status.seq:
            raise PanewardenError(
                ErrorCode.CURSOR_MISMATCH,
                f"the pane's seq is {status.seq}, not {msg.expected_seq}; nothing was closed",
            )
        captured = (
            self.screen.text(msg.capture_lines, scrollback=True)
            if msg.capture_lines is not None
            else None
        )
        seq = status.seq
        exit_code, killed = self._pane.close(msg.grace_s)
        self.io.send(
            Closed(rid=msg.rid, exit_code=exit_code, killed=killed, captured=captured, seq=seq)
        )
