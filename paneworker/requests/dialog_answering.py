"""Dialog answering: press ``allow_once``/``deny_once`` keys only on a recognised dialog.

States of one answer (one at a time per pane):

``appearing`` -> ``settling`` -> ``pressing`` (one key per loop step) -> Ok | error.

- ``appearing``: programs such as Claude Code and Codex report ``blocked`` 0.3–0.9 s
  before they draw the dialog. While the agent's recogniser does not recognise the whole
  dialog, the screen is looked at again on every change, for up to
  ``DIALOG_APPEAR_TIMEOUT_S``; then the recogniser's refusal is the answer
  (``dialog_unrecognized``). Agent kinds without a recogniser refuse at once.
- ``settling``: the first key waits until the pane has been quiet for ``DIALOG_SETTLE_S``
  (bounded by ``DIALOG_SETTLE_MAX_S``), re-planning on the newest screen when it is
  pressed: a program still busy with the answers to its start-up queries drops keys.
- ``pressing``: before each later key the dialog is read again and the answer is refused
  with ``dialog_changed`` unless it is the same dialog (same fingerprint) with the focus
  moved as planned.

In every state the pane must still be blocked on a permission dialog at the same turn;
zero bytes are written unless the whole dialog is recognised. The reply's ``seq`` is the
cursor taken before the first key was queued.

A plan with a ``follow_up`` (Aider's "Add command output to the chat?" after an allowed
command) leaves a watch behind once its last key is queued: while the pane is in the same
turn and has not settled, each screen change that reads ``blocked`` is offered to the
follow-up recogniser, and the first screen it recognises is answered once with the same
answer (after the same settle). The watch ends with the answer, the turn, or a newer
answer; it never refuses anything and replies to no one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from paneworker.requests.pane_io import PaneIO
from paneworker.requests.scheduler import Scheduler
from paneworker.screen.terminal import Terminal
from protocol.agents.dialog_kit import DENY_ONCE, DialogPlan, DialogScreen, Recogniser, refuse
from protocol.agents.table import spec_for
from protocol.errors import ErrorCode, PanewardenError
from protocol.messages import AnswerDialog

# Between looks at the screen: how often, and how long the dialog may take to redraw
# after a key before the answer is dropped.
DIALOG_POLL_S = 0.02
DIALOG_REDRAW_TIMEOUT_S = 2.0
# How long a pane that reads blocked may take to draw a dialog its recogniser accepts.
DIALOG_APPEAR_TIMEOUT_S = 2.0
# Before the first key of an answer the pane must have been quiet (no output, no query
# answered) this long, or DIALOG_SETTLE_MAX_S must have passed since it was recognised.
DIALOG_SETTLE_S = 0.2
DIALOG_SETTLE_MAX_S = 1.0


@dataclass
class _Answer:
    """A dialog answer in progress."""

    rid: int
    answer: str
    recogniser: Recogniser
    turn: int
    fingerprint: tuple[str, ...] = ()
    cursor: int = 0
    pressed: int = 0
    remaining: int = 0
    generation: int = -1
    deadline: float = 0.0


@dataclass
class _FollowUp:
    """A question the last answer also answers, watched for while its turn lasts."""

    answer: str
    recogniser: Recogniser
    turn: int
    generation: int = -1


_State = Callable[[_Answer], None]
# States after which the turn of a follow-up is over: nothing more is asked in it.
_SETTLED = ("idle", "done", "cancelled", "error")
FOLLOW_UP_POLL_S = 0.05


class DialogAnswering:
    """Answers ``AnswerDialog`` requests; see the module docstring."""

    def __init__(
        self,
        io: PaneIO,
        scheduler: Scheduler,
        agent: str,
        *,
        settle_s: float = DIALOG_SETTLE_S,
        appear_s: float = DIALOG_APPEAR_TIMEOUT_S,
    ) -> None:
        self._io = io
        self._scheduler = scheduler
        self._agent = agent
        self._settle_s = settle_s
        self._appear_s = appear_s
        self._job: _Answer | None = None
        self._follow: _FollowUp | None = None

    @property
    def in_progress(self) -> bool:
        """True while an answer is being prepared or pressed (input is refused then)."""
        return self._job is not None

    def start(self, msg: AnswerDialog) -> None:
        """Begin answering; raises PanewardenError when it is refused at once."""
        if self._job is not None:
            raise PanewardenError(
                ErrorCode.DIALOG_CHANGED, "another answer to this dialog is still being pressed"
            )
        io = self._io
        io.drain_output()
        io.running_program()
        status = io.screen.status
        if status.state != "blocked":
            raise PanewardenError(ErrorCode.NO_DIALOG, "the pane is not blocked on a dialog")
        if msg.expect_turn is not None and msg.expect_turn != status.turn:
            raise PanewardenError(
                ErrorCode.CURSOR_MISMATCH,
                f"the pane is at turn {status.turn}, not {msg.expect_turn}",
            )
        if status.kind != "permission":
            raise PanewardenError(
                ErrorCode.DIALOG_UNRECOGNIZED,
                f"only permission dialogs are answered; this one is a {status.kind} dialog",
            )
        recogniser = spec_for(self._agent).dialogs
        if recogniser is None:
            raise refuse(f"dialogs of agent kind {self._agent!r} are never answered")
        self._follow = None  # a newer answer: the client speaks for this dialog now
        job = _Answer(msg.rid, msg.answer, recogniser, status.turn)
        try:
            plan = recogniser(self._screen(), msg.answer)
        except PanewardenError as exc:
            if exc.code != ErrorCode.DIALOG_UNRECOGNIZED or self._appear_s <= 0:
                raise
            # Not drawn yet, perhaps: look again on every change, for a bounded time.
            job.deadline = self._scheduler.clock() + self._appear_s
            job.generation = io.screen.terminal.text_generation
            self._job = job
            self._scheduler.later(DIALOG_POLL_S, lambda: self._step(job, self._appearing))
            return
        self._recognised(job, plan)

    # ------------------------------------------------------------ states

    def _recognised(self, job: _Answer, plan: DialogPlan) -> None:
        job.fingerprint = plan.fingerprint
        job.deadline = self._scheduler.clock() + DIALOG_SETTLE_MAX_S
        self._job = job
        self._first_key(job, plan)

    def _appearing(self, job: _Answer) -> None:
        """Try the recogniser again when the screen changed; refuse after the bound."""
        self._check_still_blocked(job)
        generation = self._io.screen.terminal.text_generation
        expired = self._scheduler.clock() >= job.deadline
        if generation != job.generation or expired:
            job.generation = generation
            try:
                plan = job.recogniser(self._screen(), job.answer)
            except PanewardenError as exc:
                # A recognised dialog whose answer is refused is not waited on.
                if expired or exc.code != ErrorCode.DIALOG_UNRECOGNIZED:
                    raise
            else:
                self._recognised(job, plan)
                return
        self._scheduler.later(DIALOG_POLL_S, lambda: self._step(job, self._appearing))

    def _first_key(self, job: _Answer, plan: DialogPlan) -> None:
        """Press the first key once the pane is quiet (bounded); the check is in this step."""
        now = self._scheduler.clock()
        quiet_s = now - self._io.screen.last_activity
        if quiet_s < self._settle_s and now < job.deadline:
            # Real CLIs still reading the answers to their start-up queries drop keys
            # (Claude Code swallowed an Esc sent right after its trust prompt appeared).
            self._scheduler.later(self._settle_s - quiet_s, lambda: self._step(job, self._settling))
            return
        self._press(job, plan)

    def _settling(self, job: _Answer) -> None:
        self._check_still_blocked(job)
        # Nothing was pressed yet, so plan afresh on the newest screen.
        self._first_key(job, self._replan(job))

    def _press(self, job: _Answer, plan: DialogPlan) -> None:
        """Write the plan's first key; the last one completes the request."""
        io = self._io
        if job.pressed == 0:
            job.cursor = io.cursor()
        job.pressed += 1
        if len(plan.steps) == 1:
            self._job = None
            if job.answer == DENY_ONCE:
                io.screen.status.note_cancel()
            rid, cursor = job.rid, job.cursor
            io.queue(plan.keys, lambda: io.ok(rid, cursor))
            if plan.follow_up is not None:
                follow = _FollowUp(
                    job.answer, plan.follow_up, job.turn, io.screen.terminal.text_generation
                )
                self._follow = follow
                self._scheduler.later(FOLLOW_UP_POLL_S, lambda: self._following(follow))
            return
        job.remaining = len(plan.steps) - 1
        job.generation = io.screen.terminal.text_generation
        job.deadline = self._scheduler.clock() + DIALOG_REDRAW_TIMEOUT_S
        io.queue(plan.keys)
        self._scheduler.later(DIALOG_POLL_S, lambda: self._step(job, self._pressing))

    def _pressing(self, job: _Answer) -> None:
        """Re-read the dialog; press the next key only if it is the same dialog, as planned."""
        self._check_still_blocked(job)
        generation = self._io.screen.terminal.text_generation
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
        if self._scheduler.clock() >= job.deadline:
            raise PanewardenError(
                ErrorCode.DIALOG_CHANGED,
                "the dialog did not react to the last key in time; no further key was sent",
            )
        self._scheduler.later(DIALOG_POLL_S, lambda: self._step(job, self._pressing))

    def _following(self, follow: _FollowUp) -> None:
        """Answer the follow-up question once it shows, while its turn lasts."""
        if self._follow is not follow or self._job is not None:
            return
        io = self._io
        io.drain_output()
        status = io.screen.status
        try:
            io.running_program()
        except PanewardenError:
            self._follow = None
            return
        if status.turn != follow.turn or status.state in _SETTLED:
            self._follow = None
            return
        generation = io.screen.terminal.text_generation
        if status.state == "blocked" and generation != follow.generation:
            try:
                plan = follow.recogniser(self._screen(), follow.answer)
            except PanewardenError:
                follow.generation = generation  # not this screen; look at the next one
            else:
                quiet_s = self._scheduler.clock() - io.screen.last_activity
                if quiet_s >= self._settle_s:
                    self._follow = None
                    io.queue(plan.keys)
                    return
        self._scheduler.later(FOLLOW_UP_POLL_S, lambda: self._following(follow))

    # ------------------------------------------------------------ helpers

    def _step(self, job: _Answer, state: _State) -> None:
        """Run one state of ``job``; an error ends the answer with that error."""
        if self._job is not job:
            return
        try:
            self._io.drain_output()
            state(job)
        except PanewardenError as exc:
            self._job = None
            self._io.fail(job.rid, exc)

    def _check_still_blocked(self, job: _Answer) -> None:
        self._io.running_program()
        status = self._io.screen.status
        if status.state != "blocked" or status.kind != "permission" or status.turn != job.turn:
            raise PanewardenError(
                ErrorCode.DIALOG_CHANGED,
                "the pane left the dialog before the answer was complete; no further key was sent",
            )

    def _screen(self) -> DialogScreen:
        return dialog_screen(self._io.screen.terminal)

    def _replan(self, job: _Answer) -> DialogPlan:
        """The recogniser's plan on the screen as it is now, for the same dialog only."""
        try:
            plan = job.recogniser(self._screen(), job.answer)
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


def dialog_screen(terminal: Terminal) -> DialogScreen:
    """What a recogniser sees of ``terminal``: its visible screen as it is now."""
    return DialogScreen(
        lines=tuple(terminal.display_lines()),
        cell_rows=terminal.cells,
        application_cursor_keys=terminal.application_cursor_keys,
    )
