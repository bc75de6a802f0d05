"""Message types exchanged between the supervisor and a pane worker.

One tagged union per direction: ``ToWorker`` (requests, each with a request id
``rid``) and ``ToSupervisor`` (replies naming that ``rid``, and pushed events).
Schema evolution: new fields get defaults; fields are never retyped or reused.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from protocol.timing import KILL_GRACE_S

Lifecycle = Literal["starting", "running", "exited", "lost"]
AgentState = Literal["unknown", "idle", "working", "blocked", "done", "error", "cancelled"]
BlockedKind = Literal["permission", "question", "auth"]
StatusSource = Literal["osc7501", "title", "screen", "acp", "none"]
DialogAnswer = Literal["allow_once", "deny_once"]
# How a turn's output was cut from the screen: from the mark the worker set when the
# prompt was typed ("turn"), or, with no usable mark, the newest lines ("newest": they
# may hold earlier turns' text too).
OutputCut = Literal["turn", "newest"]


class _Msg(msgspec.Struct, tag_field="op"):
    """Base of every frame; the ``op`` tag is the class name in snake case."""


class TokenUsage(msgspec.Struct, frozen=True, omit_defaults=True):
    """What an agent reported it used (an ACP pane's prompt result: ``usage``)."""

    input_tokens: int
    output_tokens: int
    total_tokens: int
    thought_tokens: int | None = None
    cached_read_tokens: int | None = None
    cached_write_tokens: int | None = None


class PaneStatusFields(msgspec.Struct, frozen=True):
    """The status record a worker owns; ``seq`` +1 on every recorded change."""

    lifecycle: Lifecycle
    state: AgentState
    kind: BlockedKind | None
    turn: int
    seq: int
    source: StatusSource
    exit_code: int | None = None
    # The agent's own token count, when it reports one (ACP panes); not part of seq.
    usage: TokenUsage | None = None


# ---------------------------------------------------------------- to worker


class Ping(_Msg, tag="ping"):
    rid: int


class Introduce(_Msg, tag="introduce"):
    """Ask a worker to send ``Hello`` (and its descendants) now.

    A supervisor that restarted sends it to the workers it re-adopts, so none of
    them waits for its own silence timer before it is known again.
    """


class Heartbeat(_Msg, tag="heartbeat"):
    """Liveness beacon, both ways, every heartbeat period (``protocol.timing``: 5 s by
    default, shorter when the operator shortens the heartbeat loss period)."""

    sent_at: float = 0.0


class WriteInput(_Msg, tag="write_input"):
    """Type ``text`` into the pane; refused while blocked or at another turn."""

    rid: int
    text: str
    submit: bool = True
    expect_turn: int | None = None


class Interrupt(_Msg, tag="interrupt"):
    rid: int


# The longest a ``ReadScreen`` or ``Close`` with ``quiet_s`` waits for the program to
# stop writing.
READ_QUIET_MAX_S = 2.0
# The capture rule, one for a receipt's output and for a reviewer's or writer's close:
# read once the program wrote nothing for this long (at most READ_QUIET_MAX_S after the
# request), because some CLIs (Claude Code) report their settle before they draw the reply.
CAPTURE_QUIET_S = 0.3


class ReadScreen(_Msg, tag="read_screen"):
    """The screen's text; with ``expected_seq``, only while the pane is at that seq.

    With ``since_input`` (the cursor a ``WriteInput`` reply returned), only what the
    screen changed since that input was typed: the output of the turn it started; the
    newest lines (scrollback included) when the worker has no usable mark of it, which
    the reply says (``cut``).
    With ``quiet_s``, read once the program wrote nothing for that long (at most
    ``READ_QUIET_MAX_S`` later): some CLIs report a settle before they draw its last lines.
    """

    rid: int
    lines: int | None = None
    scrollback: bool = False
    expected_seq: int | None = None
    since_input: int | None = None
    quiet_s: float | None = None


class AnswerDialog(_Msg, tag="answer_dialog"):
    rid: int
    answer: DialogAnswer
    expect_turn: int | None = None


class WatchOutput(_Msg, tag="watch_output"):
    """Push ``OutputMatch`` once ``pattern`` shows on a screen line."""

    rid: int
    watch_id: int
    pattern: str
    regex: bool = False


class CancelWatch(_Msg, tag="cancel_watch"):
    rid: int
    watch_id: int


class Resize(_Msg, tag="resize"):
    rid: int
    cols: int
    rows: int


class Close(_Msg, tag="close"):
    """Kill the pane's tree and exit; conditional on ``expected_seq`` when given.

    With ``quiet_s``, the check, the capture and the close happen (in one step) once the
    program wrote nothing for that long, as for ``ReadScreen``.
    """

    rid: int
    expected_seq: int | None = None
    capture_lines: int | None = None
    grace_s: float = KILL_GRACE_S
    quiet_s: float | None = None


class SubscribeScreen(_Msg, tag="subscribe_screen"):
    """Push ``ScreenFrame`` while someone watches: one at once, then one per change,
    coalesced and rate-limited by the worker (``paneworker.screen.feed``)."""

    rid: int


class UnsubscribeScreen(_Msg, tag="unsubscribe_screen"):
    """Stop pushing ``ScreenFrame`` (the last viewer left)."""

    rid: int


ToWorker = (
    Ping
    | Introduce
    | Heartbeat
    | WriteInput
    | Interrupt
    | ReadScreen
    | AnswerDialog
    | WatchOutput
    | CancelWatch
    | Resize
    | Close
    | SubscribeScreen
    | UnsubscribeScreen
)


# ------------------------------------------------------------ to supervisor


class Hello(_Msg, tag="hello"):
    """First frame of a worker: who it is and the proof it holds the secret."""

    protocol_version: int
    pane: str
    instance: str
    proof: bytes
    worker_pid: int
    child_pid: int | None
    status: PaneStatusFields
    started_at: float
    spawn_error: str | None = None
    # The worker's last status records, oldest first (a new supervisor's history).
    history: list[PaneStatusFields] = []


class Ok(_Msg, tag="ok"):
    rid: int
    seq: int
    turn: int


class Failed(_Msg, tag="failed"):
    """A refused or failed request: a stable error code and a safe message."""

    rid: int
    code: str
    message: str


class ScreenText(_Msg, tag="screen_text"):
    rid: int
    text: str
    cursor: tuple[int, int]
    cols: int
    rows: int
    seq: int
    turn: int
    state: AgentState
    # Set for a read with ``since_input``: how the turn's output was cut.
    cut: OutputCut | None = None


class Closed(_Msg, tag="closed"):
    rid: int
    exit_code: int | None
    killed: int
    captured: str | None = None
    seq: int = 0


class Status(_Msg, tag="status"):
    """Pushed on every recorded status change. The status at start (and the history, for
    a supervisor that restarted) travels in ``Hello`` instead."""

    status: PaneStatusFields


class Descendants(_Msg, tag="descendants"):
    """The worker's recorded descendant set, as (pid, start time ticks)."""

    procs: list[tuple[int, int]]
    session_id: int | None


class Exited(_Msg, tag="exited"):
    """The program ended; the worker killed what it left behind."""

    exit_code: int | None
    killed: int


class OutputMatch(_Msg, tag="output_match"):
    watch_id: int
    line: str
    seq: int


class ScreenFrame(_Msg, tag="screen_frame"):
    """The visible screen, pushed while subscribed: one ANSI line per row (SGR colours
    and attributes, each line starting from and ending in the default style), or plain
    text when the coloured rendering would exceed the frame bound (``plain``).
    ``frame`` counts the frames this worker rendered (gaps: frames coalesced away)."""

    frame: int
    cols: int
    rows: int
    cursor: tuple[int, int]
    lines: list[str]
    plain: bool = False


ToSupervisor = (
    Hello
    | Ok
    | Failed
    | ScreenText
    | Closed
    | Status
    | Exited
    | Descendants
    | OutputMatch
    | Heartbeat
    | ScreenFrame
)
