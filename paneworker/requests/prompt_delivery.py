"""Prompt delivery: type a prompt, press Enter, and reply only once the program took it.

States of one delivery (one at a time per pane; later ones queue behind it, so two
prompts can never interleave their text and Enter):

``quiet`` (``TYPE_QUIET_S``, at most ``READ_QUIET_MAX_S``) -> ``typing`` -> (text written)
-> ``entering`` (after ``ENTER_DELAY_S``) -> (Enter written) -> ``acknowledging`` -> Ok |
``delivery_ambiguous``.

Every check runs in the loop step that acts on it: input is refused while the pane is
blocked on a dialog or a dialog answer is being pressed (``pane_blocked``), or when
``expect_turn`` is not the pane's turn (``cursor_mismatch``). Enter is a separate key
a moment after the text (programs that read fast input as a paste would otherwise not
submit it) and is not pressed if a dialog came up meanwhile: Enter would answer it.

The reply is sent once the program shows it took the prompt, else ``delivery_ambiguous``
after ``SUBMIT_ACK_TIMEOUT_S``: "sent" never means "typed but not submitted". Its ``seq``
is the cursor taken before the first byte was queued. What shows it is the kind's
``submit_sign``: ``turn`` (the measured CLIs): a turn started, the pane went working or
blocked, or the program exited; ``turn_or_cleared`` (kinds whose working state may never
be recognised): also the typed text leaving the input line. The cleared input line is no
proof for the measured CLIs: OpenCode draws its input box before its session has loaded,
and the typed text can leave the box without a turn ever opening (seen on a loaded
machine: "sent", then the pane idle at turn 0 for good).

A ``turn`` kind's Enter that plainly was not taken (the typed text still on the input
line, no status change, the screen quiet for ``ENTER_RETRY_QUIET_S``) is pressed once
more. That is safe where retyping is not: had the first Enter been taken, the input line
would be empty by then, and an Enter on an empty input line submits nothing in the five
measured CLIs. The text is never typed again (it may be on its way already), and the
retry does not extend the bound.

Some agents read an Enter that comes right after a paste as a newline inside the prompt
(Gemini CLI 0.61.0 does until a 40 ms timer after the paste has run and the input box has
re-rendered; measured: the prompt stayed in its input box, one row up). For those
(``enter_after_echo`` in their spec) Enter also waits until the program has drawn the end of
the typed text (once more than it was on screen before) and then been quiet for
``ENTER_QUIET_S`` (``ENTER_FIRST_QUIET_S`` for a pane's first prompt), or
``ENTER_ECHO_TIMEOUT_S`` passed; and the prompt counts as taken only
by status (a turn started, working, blocked, exited): those agents copy the prompt into
their history, and a newline moves the input row, so the typed text leaving the input row
proves nothing. A program too busy to re-render within ``ENTER_QUIET_S`` can still turn
Enter into a newline; the reply is then ``delivery_ambiguous``, never a false "sent".
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from paneworker.requests.pane_io import PaneIO
from paneworker.requests.scheduler import Scheduler
from protocol.agents.spec import SubmitSign
from protocol.errors import ErrorCode, PanewardenError
from protocol.messages import CAPTURE_QUIET_S, READ_QUIET_MAX_S, WriteInput
from protocol.timing import SUBMIT_ACK_TIMEOUT_S

ENTER_DELAY_S = 0.05
# A prompt is typed once the program was quiet this long (at most READ_QUIET_MAX_S after
# it arrived): the capture rule, for the turn mark taken as it is typed. A CLI that
# reports its settle before it draws the reply (Claude Code under load) would otherwise
# have the next prompt's mark taken of a half-drawn screen, which its redrawn transcript
# never lines up with (the next turn's output then falls back to the newest lines).
TYPE_QUIET_S = CAPTURE_QUIET_S
PASTE_START = b"\x1b[200~"
PASTE_END = b"\x1b[201~"
# After Enter, how often the pane is looked at for a sign that the prompt was taken (for
# how long: ``protocol.timing.SUBMIT_ACK_TIMEOUT_S``).
SUBMIT_POLL_S = 0.02
# A quiet screen still showing the typed text this long after Enter: Enter was not taken.
ENTER_RETRY_QUIET_S = 2.0
# A program that does not read its input this long after it was queued: the prompt is
# reported ambiguous (part of it may have been typed) and Enter is never pressed.
TYPE_TIMEOUT_S = 10.0
# How much of the prompt's end is looked for on the input line (input boxes scroll long
# lines horizontally, so only the end is sure to be visible).
PROMPT_TAIL_CHARS = 16
# How long Enter waits for the echo of the typed text, for agent kinds whose spec says
# ``enter_after_echo``.
ENTER_QUIET_S = 0.3
# The first prompt of a pane comes while the program may still be busy starting up
# (Gemini CLI loads its tools after its first frame): it waits for a longer quiet.
ENTER_FIRST_QUIET_S = 1.0
ENTER_ECHO_TIMEOUT_S = 3.0


@dataclass
class _Delivery:
    """One prompt on its way: typed, then entered, then acknowledged."""

    rid: int
    cursor: int
    tail: str
    submit: bool
    # Set once the request was answered; later callbacks of this delivery do nothing.
    answered: bool = False
    entered: bool = False
    entered_at: float = 0.0
    retried: bool = False
    turn: int = 0
    state: str = ""
    row: int = 0
    line: str = ""
    seen_tail: bool = False
    deadline: float = 0.0
    # When the text was written, and how often its tail was on screen before it was typed
    # (for enter_after_echo).
    typed_at: float = 0.0
    tail_shown: int = 0


def _squeeze(text: str) -> str:
    """Whitespace runs as one space: tabs and padding are drawn, not echoed, as typed."""
    return " ".join(text.split())


def _prompt_tail(text: str) -> str:
    """The end of the prompt's last line, as a program would echo it on its input line."""
    lines = text.strip().splitlines()
    return _squeeze(lines[-1])[-PROMPT_TAIL_CHARS:].strip() if lines else ""


class PromptDelivery:
    """Delivers ``WriteInput`` requests one at a time; see the module docstring."""

    def __init__(
        self,
        io: PaneIO,
        scheduler: Scheduler,
        dialog_in_progress: Callable[[], bool],
        *,
        enter_after_echo: bool = False,
        submit_sign: SubmitSign = "turn_or_cleared",
    ) -> None:
        self._io = io
        self._scheduler = scheduler
        self._dialog_in_progress = dialog_in_progress
        self._enter_after_echo = enter_after_echo
        self._submit_sign = submit_sign
        self._queued: deque[WriteInput] = deque()
        self._busy = False

    def start(self, msg: WriteInput) -> None:
        """Deliver ``msg`` now, or after the delivery in progress ends."""
        self._queued.append(msg)
        if not self._busy:
            self._next()

    def _next(self) -> None:
        while self._queued and not self._busy:
            self._type_when_quiet(self._queued.popleft(), self._scheduler.clock())

    def _type_when_quiet(self, msg: WriteInput, since: float) -> None:
        """Type ``msg`` once the program wrote nothing for ``TYPE_QUIET_S`` (at most
        ``READ_QUIET_MAX_S`` after ``since``); its checks run when it is typed."""
        try:
            # Refused at once when it arrives, and checked again when it is typed.
            self._check(msg)
            self._io.screen.drain()
            now = self._scheduler.clock()
            last = self._io.screen.last_activity
            wait = min(last + TYPE_QUIET_S - now, since + READ_QUIET_MAX_S - now)
            if wait > 0:
                self._busy = True  # later prompts queue behind this one, as while typing
                self._scheduler.later(wait, lambda: self._quiet_now(msg, since))
                return
            self._type(msg)
        except PanewardenError as exc:
            self._io.fail(msg.rid, exc)

    def _quiet_now(self, msg: WriteInput, since: float) -> None:
        self._busy = False
        self._type_when_quiet(msg, since)
        self._next()

    def _finish(self) -> None:
        self._busy = False
        self._next()

    def _check(self, msg: WriteInput) -> None:
        """Refuse ``msg`` while its program is gone, a dialog is up or being answered,
        or the pane is at another turn than it expects."""
        io = self._io
        io.running_program()
        status = io.screen.status
        if status.state == "blocked" or self._dialog_in_progress():
            raise PanewardenError(
                ErrorCode.PANE_BLOCKED,
                f"the pane is waiting on a {status.kind or 'permission'} dialog; answer it first",
            )
        if msg.expect_turn is not None and msg.expect_turn != status.turn:
            raise PanewardenError(
                ErrorCode.CURSOR_MISMATCH,
                f"the pane is at turn {status.turn}, not {msg.expect_turn}",
            )

    def _type(self, msg: WriteInput) -> None:
        io = self._io
        self._check(msg)
        job = _Delivery(msg.rid, io.cursor(), _prompt_tail(msg.text), msg.submit)
        # Before a byte is typed: the turn this prompt starts is what changes from here.
        io.screen.mark_input(job.cursor, msg.text)
        job.tail_shown = self._tail_shown(job.tail)
        payload = msg.text.encode()
        if io.screen.terminal.bracketed_paste and payload:
            payload = PASTE_START + payload.replace(b"\n", b"\r") + PASTE_END
        self._busy = True
        io.queue(payload, lambda: self._typed(job), lambda: self._gone(job))
        if not job.answered:
            self._scheduler.later(TYPE_TIMEOUT_S, lambda: self._typing_stalled(job))

    def _typed(self, job: _Delivery) -> None:
        if job.answered:
            return
        if not job.submit:
            self._reply_ok(job)
            return
        if self._enter_after_echo and job.tail:
            # (An empty prompt pastes nothing, so nothing guards its Enter.)
            job.typed_at = self._scheduler.clock()
            self._scheduler.later(ENTER_DELAY_S, lambda: self._enter_once_echoed(job))
            return
        self._scheduler.later(ENTER_DELAY_S, lambda: self._press_enter(job))

    def _enter_once_echoed(self, job: _Delivery) -> None:
        """Press Enter once the program drew the text and went quiet (bounded)."""
        if job.answered:
            return
        self._io.drain_output()
        now = self._scheduler.clock()
        echoed = self._tail_shown(job.tail) > job.tail_shown
        needed = ENTER_QUIET_S if self._io.screen.status.input_seen else ENTER_FIRST_QUIET_S
        quiet = now - self._io.screen.last_activity >= needed
        if (echoed and quiet) or now - job.typed_at >= ENTER_ECHO_TIMEOUT_S:
            self._press_enter(job)
            return
        self._scheduler.later(SUBMIT_POLL_S, lambda: self._enter_once_echoed(job))

    def _tail_shown(self, tail: str) -> int:
        """On how many visible rows the end of the prompt is (0 for an empty prompt)."""
        if not tail:
            return 0
        return sum(tail in _squeeze(line) for line in self._io.screen.terminal.display_lines())

    def _gone(self, job: _Delivery) -> None:
        self._reply_failed(
            job,
            PanewardenError(ErrorCode.PANE_NOT_RUNNING, "the pane's program ended during input"),
        )

    def _typing_stalled(self, job: _Delivery) -> None:
        if job.answered or job.entered:
            return
        self._reply_failed(
            job,
            PanewardenError(
                ErrorCode.DELIVERY_AMBIGUOUS,
                f"the program did not read the input within {TYPE_TIMEOUT_S:.0f}s",
            ),
        )

    def _reply_ok(self, job: _Delivery) -> None:
        if job.answered:
            return
        job.answered = True
        self._io.ok(job.rid, job.cursor)
        self._finish()

    def _reply_failed(self, job: _Delivery, exc: PanewardenError) -> None:
        if job.answered:
            return
        job.answered = True
        self._io.fail(job.rid, exc)
        self._finish()

    def _press_enter(self, job: _Delivery) -> None:
        if job.answered:
            return
        io = self._io
        try:
            io.running_program()
        except PanewardenError as exc:
            self._reply_failed(job, exc)
            return
        # Read what the program already wrote first: a dialog it drew meanwhile must be
        # seen before Enter, which would answer it.
        io.drain_output()
        if io.screen.status.state == "blocked":
            self._reply_failed(
                job,
                PanewardenError(
                    ErrorCode.DELIVERY_AMBIGUOUS,
                    "a dialog appeared after the text was typed; Enter was not sent",
                ),
            )
            return
        job.row, job.line = self._input_line()
        status = io.screen.status
        job.turn, job.state = status.turn, status.state
        job.seen_tail = bool(job.tail) and job.tail in job.line
        # From the first submitted input on, the program's `working` opens turns.
        status.note_input()
        io.queue(b"\r", lambda: self._entered(job), lambda: self._gone(job))

    def _entered(self, job: _Delivery) -> None:
        job.entered_at = self._scheduler.clock()
        if not job.entered:
            job.entered = True
            job.deadline = job.entered_at + SUBMIT_ACK_TIMEOUT_S
        self._await_ack(job)

    def _input_line(self) -> tuple[int, str]:
        """The cursor's row and what it shows (the prompt line, usually)."""
        terminal = self._io.screen.terminal
        row = terminal.cursor[0]
        return row, _squeeze(terminal.display_lines()[row])

    def _taken(self, job: _Delivery) -> bool:
        """True once the program shows it took the prompt.

        Taken = the program exited; a turn started or the pane went working or blocked;
        and for ``turn_or_cleared`` kinds also: the typed text, once seen on the cursor's
        row, is gone from it (the prompt was cleared or the cursor moved on). An echo read
        only after Enter, together with the cursor moving past it, is the same fact seen
        late: the text is on more rows than before it was typed, none of them the
        cursor's. A prompt never seen at all (shown abbreviated) counts only by status;
        an empty prompt counts on any change of the cursor's row.
        """
        io = self._io
        status = io.screen.status
        prog = io.program
        if prog is None or prog.eof or status.lifecycle != "running":
            return True
        if status.turn != job.turn or (
            status.state != job.state and status.state in ("working", "blocked")
        ):
            return True
        if self._submit_sign == "turn":
            return False  # only the status tells (see the module docstring)
        row, line = self._input_line()
        if job.tail and job.tail in line:
            # Seen now, perhaps only now: a slow echo is not a submission.
            job.seen_tail = True
            return False
        if job.seen_tail or (job.tail and self._tail_shown(job.tail) > job.tail_shown):
            return True
        return (row, line) != (job.row, job.line) and not job.tail

    def _enter_not_taken(self, job: _Delivery) -> bool:
        """True when a ``turn`` kind plainly ignored Enter: the typed text is still on the
        input line and the screen has been quiet since (the status did not move: the
        caller checked ``_taken`` first)."""
        if self._submit_sign != "turn" or job.retried or not job.tail:
            return False
        now = self._scheduler.clock()
        quiet_since = max(job.entered_at, self._io.screen.last_activity)
        if now - quiet_since < ENTER_RETRY_QUIET_S or self._dialog_in_progress():
            return False
        return job.tail in self._input_line()[1]

    def _await_ack(self, job: _Delivery) -> None:
        """Reply once the prompt was taken; ``delivery_ambiguous`` after the bound."""
        if job.answered:
            return
        self._io.drain_output()
        if self._taken(job):
            self._reply_ok(job)
            return
        if self._enter_not_taken(job):
            job.retried = True
            self._press_enter(job)
            return
        if self._scheduler.clock() >= job.deadline:
            self._reply_failed(
                job,
                PanewardenError(
                    ErrorCode.DELIVERY_AMBIGUOUS,
                    "the text and Enter were typed but the program showed no sign of "
                    f"taking the prompt within {SUBMIT_ACK_TIMEOUT_S:.0f}s",
                ),
            )
            return
        self._scheduler.later(SUBMIT_POLL_S, lambda: self._await_ack(job))
