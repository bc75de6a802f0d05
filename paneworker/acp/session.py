"""One ACP session: the client side of the Agent Client Protocol, inside the worker's loop.

``initialize`` (protocol version 1, no file-system or terminal capability: no lane could
enforce them) → ``session/new {cwd, mcpServers: []}`` → one ``session/prompt`` per turn.
Everything happens in one step of the worker's single-threaded loop, as on a terminal
pane: a check ("not blocked", "at turn N") and the frame it allows are never apart.

Status comes from the protocol (``source: "acp"``), through the pane's status machine:

- the pane reads ``idle`` from its start (a prompt sent while the session is still being
  created waits for it, its turn already open);
- ``send_input`` → ``working`` (a new turn) and ``session/prompt``; its reply is the
  turn; a second prompt while one is in flight is refused (``pane_busy``);
- ``session/request_permission`` → ``blocked`` (``permission``); a second request while
  one is shown waits behind it and is shown (``blocked`` again) once the first is
  answered;
- the prompt's result ends the turn: ``end_turn`` → ``done``; ``cancelled`` →
  ``cancelled``; any other stop reason → ``error``; a turn in which ``deny_once`` was
  answered or which was interrupted reads ``cancelled`` whatever the stop reason
  (docs/design.md §13: so a denied turn reads the same on both substrates);
- a program that stops speaking the protocol (a line that is not JSON-RPC, a frame over
  the bound, no answer to ``initialize``/``session/new`` or to ``session/cancel`` in
  time, input it stops reading, an exit mid-session) → ``error``, the reason drawn on
  the screen and named by every later refusal. Nothing on an ACP pane reads ``unknown``.

``answer_dialog`` selects the option whose *kind* is ``allow_once`` (``deny_once``:
``reject_once``), never by id (ids differ per agent), never an ``*_always`` option,
and refuses with nothing sent when the request offers no such option.
``interrupt_pane`` sends ``session/cancel`` and answers every pending permission
request ``cancelled``; requests that arrive after it are answered ``cancelled`` too.
Requests the client does not serve (``fs/*``, ``terminal/*``, Qwen's
``craft/drainMidTurnQueue``) are answered ``-32601``.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from paneworker.acp import jsonrpc
from paneworker.acp.jsonrpc import Frame, FrameTooLarge, RequestId
from paneworker.acp.pipes import InputOverflow, PipeProgram
from paneworker.acp.render import TITLE_CHARS, Renderer
from paneworker.screen.state import ScreenState
from protocol.errors import ErrorCode, PanewardenError
from protocol.messages import (
    AnswerDialog,
    Failed,
    Ok,
    Status,
    TokenUsage,
    ToSupervisor,
    WriteInput,
)

log = logging.getLogger(__name__)

ACP_PROTOCOL_VERSION = 1
# ``initialize`` and ``session/new`` answered within this (Gemini took ~10 s here).
START_TIMEOUT_S = 90.0
# After ``session/cancel`` the agent must end the turn within this.
CANCEL_ANSWER_S = 10.0
# Turns whose agent text is kept for receipts (keyed by the prompt's cursor).
KEPT_TURNS = 32
# A turn's agent text is kept up to this many characters (the newest).
MAX_TURN_TEXT = 900_000
# ... and handed out up to this many bytes of UTF-8 (the frame limit is 1 MiB).
MAX_TURN_BYTES = 900_000
# How much of an agent's own error message a status note or refusal quotes.
MESSAGE_CHARS = 400
# How much of an agent's value (an id, an exception's text) a log line or note quotes.
LOGGED_CHARS = 64
# A token count above this is refused (dropped): JSON clients hold integers to 2^53 - 1,
# and the supervisor link's msgpack none past 2^64 - 1.
MAX_COUNT = 2**53 - 1
# An agent whose stdout closed while it still runs is given this long to exit.
STDOUT_CLOSED_S = 2.0

_ALLOW, _REJECT = "allow_once", "reject_once"


@dataclass
class _Permission:
    """One ``session/request_permission`` waiting for an answer."""

    rid: RequestId
    title: str
    # (optionId, kind, name) as offered.
    options: list[tuple[str, str, str]]


@dataclass
class _Turn:
    """The prompt in flight."""

    cursor: int
    text: str
    rpc_id: int | None = None  # None while the session is still being created
    # The newest chunks, at least MAX_TURN_TEXT characters of them while there are that
    # many: an append drops whole chunks from the front, never re-joins the text.
    chunks: deque[str] = field(default_factory=deque)
    size: int = 0
    cancelled: bool = False  # deny_once answered or interrupted: ends `cancelled`
    cancel_deadline: float | None = None

    def add(self, text: str) -> None:
        """O(len(text)) amortised, however long the turn."""
        if not text:
            return
        self.chunks.append(text)
        self.size += len(text)
        chunks = self.chunks
        while self.size - len(chunks[0]) >= MAX_TURN_TEXT:
            self.size -= len(chunks.popleft())

    def reply(self) -> str:
        """The agent's text of the turn: its newest ``MAX_TURN_TEXT`` characters."""
        return "".join(self.chunks)[-MAX_TURN_TEXT:]


class AcpSession:
    """The client side of one pane's ACP session (see the module docstring)."""

    def __init__(
        self,
        program: PipeProgram,
        screen: ScreenState,
        send: Callable[[ToSupervisor], object],
        cwd: str,
        *,
        name: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.program = program
        self.screen = screen
        self._send = send
        self._cwd = cwd
        self._name = name
        self._clock = clock
        self._reader = jsonrpc.LineReader()
        self.render = Renderer(screen.receive)
        self._next_id = 0
        # Our requests in flight: id -> method.
        self._calls: dict[int, str] = {}
        self.session_id: str | None = None
        self._start_deadline: float | None = clock() + START_TIMEOUT_S
        # Why the session cannot go on (None while it can), and whether it ever started.
        self.broken: str | None = None
        self._started = False
        self._turn: _Turn | None = None
        self._permissions: deque[_Permission] = deque()
        self._texts: OrderedDict[int, str] = OrderedDict()
        self._eof_deadline: float | None = None
        self._exited = False
        # Idle from the start (a prompt waits for the session); recorded, not sent: the
        # worker's Hello, which comes first, carries it.
        screen.status.apply("idle", None, "acp")
        self._call("initialize", _initialize_params())

    # ------------------------------------------------------------ status

    @property
    def start_settled(self) -> bool:
        """The session exists, or will never (its start failed or the session broke)."""
        return self._started or self.broken is not None

    @property
    def start_failure(self) -> str | None:
        """Why the session could not start (None: it started, or is still starting)."""
        if self._started or self.broken is None:
            return None
        return self.broken

    def _set_state(self, state: str) -> None:
        status = self.screen.status
        if status.lifecycle in ("exited", "lost"):
            return
        if status.apply(state, "permission" if state == "blocked" else None, "acp"):
            self._send(Status(status=status.snapshot()))

    # ------------------------------------------------------------ frames out

    def _write(self, data: bytes) -> None:
        try:
            self.program.queue_input(data)
        except InputOverflow:
            self._break("the agent stopped reading its input")
            return
        self.program.flush()

    def _call(self, method: str, params: object) -> int:
        self._next_id += 1
        rid = self._next_id
        self._calls[rid] = method
        self._write(jsonrpc.request(rid, method, params))
        return rid

    # ------------------------------------------------------------ frames in

    def receive(self) -> None:
        """Read what the agent wrote (stdout and stderr) and act on every whole frame."""
        for _ in range(64):
            if not self.screen.accepting_output:
                # The unparsed-output bound, as on a PTY: the agent waits in its write.
                break
            data = self.program.read()
            if not data:
                break
            self.take(data)
        while self.program.read_stderr():
            pass
        if self.program.eof and self._eof_deadline is None and not self._exited:
            # Its stdout is closed: it exits (and is reaped) at once, or never speaks again.
            self._eof_deadline = self._clock() + STDOUT_CLOSED_S

    def take(self, data: bytes) -> None:
        """Act on the frames in ``data`` (bytes of the agent's stdout)."""
        for item in self._reader.feed(data):
            if self.broken is not None:
                return  # what a broken session says is read (so it never blocks) and dropped
            if isinstance(item, FrameTooLarge):
                self._break(f"the agent sent {item}")
                return
            try:
                frame = jsonrpc.decode(item)
            except jsonrpc.BadFrame as exc:
                self._break(f"the agent sent a line that is not JSON-RPC ({str(exc)[:80]})")
                return
            try:
                self._dispatch(frame)
            except Exception as exc:
                # Whatever an agent's frame makes us raise ends its session, never the
                # worker (which would leave the pane `lost`, its program unsupervised).
                log.exception("ACP frame failed", extra={"pane": self._name})
                self._break(
                    f"the agent sent a frame that could not be handled "
                    f"({type(exc).__name__}: {_cut(str(exc))})"
                )
                return

    def _dispatch(self, frame: Frame) -> None:
        if frame.is_response:
            if isinstance(frame.id, int) and frame.id in self._calls:
                self._answered(self._calls.pop(frame.id), frame)
            else:
                log.info(
                    "an answer to no request: %s",
                    _cut(repr(frame.id)),
                    extra={"pane": self._name},
                )
        elif frame.is_request:
            assert frame.id is not None and frame.method is not None
            self._request(frame.id, frame.method, frame.params)
        elif frame.method == "session/update":
            self._update(frame.params)
        # Other notifications carry nothing a pane uses.

    def _answered(self, method: str, frame: Frame) -> None:
        if method == "initialize":
            if frame.error is not None:
                self._fail_start(frame.error.message)
                return
            self._call("session/new", {"cwd": self._cwd, "mcpServers": []})
        elif method == "session/new":
            session_id = _get(frame.result, "sessionId")
            if frame.error is not None or not isinstance(session_id, str):
                message = frame.error.message if frame.error else "no sessionId in its answer"
                self._fail_start(message)
                return
            self.session_id = session_id
            self._started = True
            self._start_deadline = None
            turn = self._turn
            if turn is not None and turn.rpc_id is None:
                self._send_prompt(turn)
        elif method == "session/prompt":
            self._prompt_ended(frame)

    def _request(self, rid: RequestId, method: str, params: Any) -> None:
        if method != "session/request_permission":
            self._write(
                jsonrpc.error(rid, jsonrpc.METHOD_NOT_FOUND, f"{method[:64]} is not served")
            )
            return
        options = _options(params)
        if options is None:
            self._write(jsonrpc.error(rid, jsonrpc.INVALID_PARAMS, "options: expected a list"))
            return
        turn = self._turn
        title = _tool_title(params)
        if turn is None or turn.cancel_deadline is not None:
            # Outside a turn, or after session/cancel: the protocol's answer is cancelled.
            self._write(jsonrpc.result(rid, {"outcome": {"outcome": "cancelled"}}))
            self.render.answered(title, "cancelled (the turn was cancelled)")
            return
        self._permissions.append(_Permission(rid, title, options))
        self.render.permission(title, [(kind, name) for _, kind, name in options])
        if len(self._permissions) == 1:
            self._set_state("blocked")

    def _update(self, params: Any) -> None:
        update = _get(params, "update")
        kind = _get(update, "sessionUpdate")
        if kind == "agent_message_chunk":
            text = _text_of(_get(update, "content"))
            self.render.message(text)
            if self._turn is not None:
                self._turn.add(text)
        elif kind == "agent_thought_chunk":
            self.render.thought(_text_of(_get(update, "content")))
        elif kind in ("tool_call", "tool_call_update"):
            status = _get(update, "status")
            if kind == "tool_call" or isinstance(status, str):
                title = _get(update, "title")
                label = title if isinstance(title, str) else str(_get(update, "toolCallId"))
                self.render.tool(label, status if isinstance(status, str) else "pending")
        elif kind == "plan":
            entries = _get(update, "entries")
            if isinstance(entries, list):
                self.render.plan(
                    [
                        (str(_get(e, "status") or ""), str(_get(e, "content") or ""))
                        for e in entries[:50]
                    ]
                )

    # ------------------------------------------------------------ turns

    def _send_prompt(self, turn: _Turn) -> None:
        turn.rpc_id = self._call(
            "session/prompt",
            {"sessionId": self.session_id, "prompt": [{"type": "text", "text": turn.text}]},
        )

    def _prompt_ended(self, frame: Frame) -> None:
        turn = self._turn
        if turn is None:
            return
        self._end_pending_permissions()
        usage = _usage(frame.result)
        if usage is not None:
            self.screen.status.usage = usage
        reason = _get(frame.result, "stopReason")
        if frame.error is not None:
            message = frame.error.message[:MESSAGE_CHARS]
            self.render.turn_end(f"error: {message}")
            self._finish(turn, "error")
        elif reason == "end_turn" or reason == "cancelled" or turn.cancelled:
            self.render.turn_end(str(reason))
            if reason == "cancelled":
                turn.cancelled = True
            self._finish(turn, "idle")
        else:
            self.render.turn_end(f"stopped: {str(reason)[:40]}")
            self._finish(turn, "error")

    def _finish(self, turn: _Turn, state: str) -> None:
        self._turn = None
        self._texts[turn.cursor] = turn.reply()
        while len(self._texts) > KEPT_TURNS:
            self._texts.popitem(last=False)
        if turn.cancelled:
            self.screen.status.note_cancel()
        self._set_state(state)

    def _end_pending_permissions(self) -> None:
        while self._permissions:
            pending = self._permissions.popleft()
            self._write(jsonrpc.result(pending.rid, {"outcome": {"outcome": "cancelled"}}))

    # ------------------------------------------------------------ requests

    def _check_running(self) -> None:
        status = self.screen.status
        if status.lifecycle != "running" or self.program.eof:
            raise PanewardenError(ErrorCode.PANE_NOT_RUNNING, "the pane's program is not running")
        if self.broken is not None:
            if not self._started:
                raise PanewardenError(
                    ErrorCode.SPAWN_FAILED, f"the agent's session did not start: {self.broken}"
                )
            raise PanewardenError(ErrorCode.PANE_NOT_RUNNING, self.broken)

    def write_input(self, msg: WriteInput) -> None:
        """``send_input``: one prompt, one turn; the reply carries the cursor and turn."""
        self._check_running()
        status = self.screen.status
        if status.state == "blocked":
            raise PanewardenError(
                ErrorCode.PANE_BLOCKED, "the pane is waiting on a permission request; answer it"
            )
        if self._turn is not None:
            raise PanewardenError(
                ErrorCode.PANE_BUSY, "a turn is in flight; wait for it to end or interrupt it"
            )
        if msg.expect_turn is not None and msg.expect_turn != status.turn:
            raise PanewardenError(
                ErrorCode.CURSOR_MISMATCH,
                f"the pane is at turn {status.turn}, not {msg.expect_turn}",
            )
        if not msg.submit or not msg.text.strip():
            raise PanewardenError(
                ErrorCode.INVALID_ARGUMENT,
                "an ACP pane takes whole prompts: text must not be empty and submit true",
            )
        cursor = status.seq
        turn = _Turn(cursor=cursor, text=msg.text)
        self._turn = turn
        status.note_input()
        self.render.prompt(msg.text)
        self._set_state("working")
        if self.session_id is not None:
            self._send_prompt(turn)
        self._send(Ok(rid=msg.rid, seq=cursor, turn=status.turn))

    def answer_dialog(self, msg: AnswerDialog) -> None:
        """``answer_dialog``: select the offered option of the answer's kind, or refuse."""
        self._check_running()
        status = self.screen.status
        if status.state != "blocked" or not self._permissions:
            raise PanewardenError(ErrorCode.NO_DIALOG, "the pane is not blocked on a dialog")
        if msg.expect_turn is not None and msg.expect_turn != status.turn:
            raise PanewardenError(
                ErrorCode.CURSOR_MISMATCH,
                f"the pane is at turn {status.turn}, not {msg.expect_turn}",
            )
        pending = self._permissions[0]
        want = _ALLOW if msg.answer == "allow_once" else _REJECT
        chosen = next((oid for oid, kind, _ in pending.options if kind == want), None)
        if chosen is None:
            offered = ", ".join(sorted({kind for _, kind, _ in pending.options})) or "none"
            raise PanewardenError(
                ErrorCode.DIALOG_UNRECOGNIZED,
                f"the permission request offers no {want} option (offered: {offered[:120]}); "
                "nothing was answered",
            )
        cursor = status.seq
        self._permissions.popleft()
        self._write(
            jsonrpc.result(pending.rid, {"outcome": {"outcome": "selected", "optionId": chosen}})
        )
        self.render.answered(pending.title, "allowed once" if want == _ALLOW else "denied once")
        if want == _REJECT and self._turn is not None:
            self._turn.cancelled = True
        self._set_state("working")
        if self._permissions:
            nxt = self._permissions[0]
            self.render.permission(nxt.title, [(kind, name) for _, kind, name in nxt.options])
            self._set_state("blocked")
        self._send(Ok(rid=msg.rid, seq=cursor, turn=status.turn))

    def interrupt(self, rid: int) -> None:
        """``interrupt_pane``: cancel the turn in flight (a no-op outside one).

        A session that is over (broken, or its stdout closed) has nothing to cancel: the
        interrupt ends it now (``error``) and answers; only an exited program refuses.
        """
        if self.screen.status.lifecycle != "running":
            raise PanewardenError(ErrorCode.PANE_NOT_RUNNING, "the pane's program is not running")
        cursor = self.screen.status.seq
        if self.broken is not None or self.program.eof:
            self._break("interrupted after the agent closed its stdout")
            self._send(Ok(rid=rid, seq=cursor, turn=self.screen.status.turn))
            return
        turn = self._turn
        if turn is not None and turn.cancel_deadline is None:
            turn.cancelled = True
            self.render.note("interrupted: session/cancel")
            if turn.rpc_id is None:
                # The session is not there yet: the prompt was never sent.
                self._finish(turn, "idle")
            else:
                self._write(jsonrpc.notification("session/cancel", {"sessionId": self.session_id}))
                self._end_pending_permissions()
                turn.cancel_deadline = self._clock() + CANCEL_ANSWER_S
                self._set_state("working")
        self._send(Ok(rid=rid, seq=cursor, turn=self.screen.status.turn))

    def turn_text(self, cursor: int, lines: int | None) -> str | None:
        """The agent's text of the turn the prompt at ``cursor`` started (None: unknown)."""
        turn = self._turn
        if turn is not None and turn.cursor == cursor:
            text = turn.reply()
        elif cursor in self._texts:
            text = self._texts[cursor]
        else:
            return None
        if lines is not None:
            rows = text.split("\n")
            text = "\n".join(rows[-lines:] if lines > 0 else [])
        data = text.encode()
        if len(data) > MAX_TURN_BYTES:
            # The newest part: a reply frame stays under the protocol's limit.
            text = data[-MAX_TURN_BYTES:].decode(errors="ignore")
        return text

    def fail(self, rid: int, exc: PanewardenError) -> None:
        """Reply with the error."""
        self._send(Failed(rid=rid, code=exc.code.value, message=exc.message))

    # ------------------------------------------------------------ time and death

    def next_deadline(self) -> float | None:
        """When ``run_due`` next has work, or None."""
        turn = self._turn
        cancel = turn and turn.cancel_deadline
        due = [d for d in (self._start_deadline, cancel, self._eof_deadline) if d]
        return min(due) if due and self.broken is None else None

    def run_due(self, now: float) -> None:
        """Give up on an agent that did not answer in time."""
        if self.broken is not None:
            return
        if self._eof_deadline is not None and now >= self._eof_deadline and not self._exited:
            self._break(f"the agent closed its stdout and still ran {STDOUT_CLOSED_S:.0f} s later")
            return
        if self._start_deadline is not None and now >= self._start_deadline:
            self._fail_start(f"no answer to initialize/session/new within {START_TIMEOUT_S:.0f} s")
            return
        turn = self._turn
        if turn is not None and turn.cancel_deadline is not None and now >= turn.cancel_deadline:
            self._break(
                f"the agent did not end the turn within {CANCEL_ANSWER_S:.0f} s of session/cancel"
            )

    def _fail_start(self, message: str) -> None:
        tail = self.program.stderr_tail.decode(errors="replace").strip()
        said = message[:MESSAGE_CHARS] or tail[-MESSAGE_CHARS:] or "no reason given"
        self._break(f"the agent could not start a session: {said}")

    def _break(self, reason: str) -> None:
        """The agent stopped speaking the protocol: the pane reads ``error``, for good."""
        if self.broken is not None:
            return
        self.broken = reason
        self._eof_deadline = None
        log.warning("ACP session broken: %s", _cut(reason, 400), extra={"pane": self._name})
        self.render.note(reason)
        tail = self.program.stderr_tail.decode(errors="replace").strip()
        if tail and tail[-MESSAGE_CHARS:] not in reason:  # (not twice: quoted already)
            self.render.stderr(tail)
        self._start_deadline = None
        self._permissions.clear()
        turn = self._turn
        if turn is not None:
            self._turn = None
            self._texts[turn.cursor] = turn.reply()
        self._set_state("error")

    def program_exited(self) -> None:
        """The program is gone: read what it left, then the session ends (``error`` if a
        turn or the start was still open)."""
        self._exited = True
        self._eof_deadline = None
        while data := self.program.read():
            self.take(data)
        while self.program.read_stderr():
            pass
        if self.broken is None and (self._turn is not None or not self._started):
            tail = self.program.stderr_tail.decode(errors="replace").strip()[-MESSAGE_CHARS:]
            what = "mid-turn" if self._started else "before its session started"
            self._break(f"the agent exited {what}" + (f": {tail}" if tail else ""))


# ---------------------------------------------------------------- params


def _cut(text: str, limit: int = LOGGED_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _turn_mismatch(turn: int, expected: int) -> PanewardenError:
    return PanewardenError(ErrorCode.CURSOR_MISMATCH, f"the pane is at turn {turn}, not {expected}")


def _initialize_params() -> dict[str, Any]:
    return {
        "protocolVersion": ACP_PROTOCOL_VERSION,
        # Nothing a lane could not enforce: the agent works on files itself.
        "clientCapabilities": {
            "fs": {"readTextFile": False, "writeTextFile": False},
            "terminal": False,
        },
        "clientInfo": {"name": "panewarden", "version": "1"},
    }


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else None


def _text_of(content: Any) -> str:
    text = _get(content, "text")
    return text if isinstance(text, str) else ""


def _tool_title(params: Any) -> str:
    title = _get(_get(params, "toolCall"), "title")
    # Kept cut: the renderer cleans and cuts it again each time it is drawn.
    return title[:TITLE_CHARS] if isinstance(title, str) else "a tool"


def _options(params: Any) -> list[tuple[str, str, str]] | None:
    options = _get(params, "options")
    if not isinstance(options, list):
        return None
    out: list[tuple[str, str, str]] = []
    for option in options[:32]:
        oid, kind, name = _get(option, "optionId"), _get(option, "kind"), _get(option, "name")
        if isinstance(oid, str) and isinstance(kind, str):
            out.append((oid, kind, name if isinstance(name, str) else oid))
    return out


_USAGE_KEYS = {
    "inputTokens": "input_tokens",
    "outputTokens": "output_tokens",
    "totalTokens": "total_tokens",
    "thoughtTokens": "thought_tokens",
    "cachedReadTokens": "cached_read_tokens",
    "cachedWriteTokens": "cached_write_tokens",
}


def _usage(result: Any) -> TokenUsage | None:
    raw = _get(result, "usage")
    if not isinstance(raw, dict):
        return None
    fields = {
        ours: value
        for theirs, ours in _USAGE_KEYS.items()
        if isinstance(value := raw.get(theirs), int)
        and not isinstance(value, bool)
        and 0 <= value <= MAX_COUNT
    }
    try:
        return msgspec.convert(fields, TokenUsage)
    except msgspec.ValidationError:
        return None
