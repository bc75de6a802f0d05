"""The ctl socket: where ``panewarden ctl`` reaches the service from inside a pane.

An AF_UNIX stream socket (mode 0600) beside the worker socket in the short runtime
directory; its path is recorded in ``$STATE/run/ctl`` and given to every pane program
as ``PANEWARDEN_CTL_SOCKET``. One connection carries one exchange (the contract is in
:mod:`supervisor.front.ctl.wire`):

- the client sends one request, a JSON object on one line:
  ``{"op": "<command>", "args": {...}}`` (at most ``MAX_REQUEST_BYTES``, within
  ``REQUEST_READ_TIMEOUT_S`` of connecting);
- the service attests the caller (see :mod:`supervisor.front.ctl.attestation`), runs the
  command as that pane's identity, and answers one line: ``{"ok": true, "result":
  {...}}`` or ``{"ok": false, "error": {"code": ..., "message": ...}}``;
- then it closes the connection. A client that hangs up cancels its command.

A request longer than ``MAX_REQUEST_BYTES`` is answered (``invalid_argument``) as soon as
the bound is crossed; the service then reads and discards the rest of that line (at most
``DISCARD_BYTES`` more, for at most ``DISCARD_TIMEOUT_S``) before it closes, so a client
still writing its request gets no EPIPE and can read the refusal.

A malformed request gets a typed error (``invalid_argument``), never a crash; every
connection is served by its own task on the loop, and every one is closed.

Connections are bounded, so no pane can spend the service's descriptors: at most
``MAX_CONNECTIONS`` are open at once, and at most ``MAX_CONNECTIONS_PER_PANE`` of one
pane (the caller is attested as it is accepted; callers in no pane share one such
allowance). One beyond a bound is answered at once with one ``ctl_busy`` line and closed;
an admitted one that sends nothing is closed after ``REQUEST_READ_TIMEOUT_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from protocol.errors import ErrorCode, PanewardenError, echo
from supervisor.control.controllers import pane_of_identity
from supervisor.front.ctl.attestation import boot_ticks_now
from supervisor.front.ctl.wire import (
    MAX_REQUEST_BYTES,
    MAX_RESPONSE_BYTES,
    REQUEST_READ_TIMEOUT_S,
)

log = logging.getLogger(__name__)

WRITE_TIMEOUT_S = 10.0
# After refusing an oversized request: how much more of it is read (and dropped) so the
# client's write completes. Closing with its bytes unread would reset its connection
# (EPIPE on its next write) before it ever read the answer.
DISCARD_BYTES = 64 * 1024 * 1024
DISCARD_TIMEOUT_S = 10.0
DISCARD_CHUNK_BYTES = 256 * 1024
# How long a stop waits for cancelled connections to finish.
STOP_TIMEOUT_S = 5.0
# Open connections at once, in all and of one attested pane (a coordinator's commands
# each hold one for their turn; eight concurrent ones is ample).
MAX_CONNECTIONS = 64
MAX_CONNECTIONS_PER_PANE = 8
# How long a refusal's line may take to leave before the connection is cut.
REFUSAL_WRITE_TIMEOUT_S = 1.0

Identify = Callable[[socket.socket, int], Awaitable[str]]
# Records one mutating call: (identity, tool, target pane, outcome, code), content-free.
AuditCall = Callable[[str, str, str | None, str, str | None], None]
# Commands that only read: logged, never audited (as the MCP tools that only read).
READ_ONLY_COMMANDS = frozenset({"status", "receipts"})


@dataclass(frozen=True)
class CtlCommand:
    """One ctl command: its arguments' Struct and the coroutine that runs it for an
    attested identity."""

    args: type[msgspec.Struct]
    run: Callable[[str, Any], Awaitable[dict[str, Any]]]


class CtlRequest(msgspec.Struct, forbid_unknown_fields=True):
    """The one line a client sends."""

    op: str
    args: dict[str, Any] = {}


def encode_error(code: ErrorCode, message: str) -> bytes:
    """The line that answers a refused request."""
    return msgspec.json.encode({"ok": False, "error": {"code": code.value, "message": message}})


class _ClientGone(Exception):
    """The client closed its end (or sent more than its one request) mid-command."""


class _TooLarge(PanewardenError):
    """A request line beyond ``MAX_REQUEST_BYTES``: refused, the rest of it still unread."""

    def __init__(self) -> None:
        super().__init__(
            ErrorCode.INVALID_ARGUMENT,
            f"a request is at most {MAX_REQUEST_BYTES} bytes (one line); this one is longer",
        )


@dataclass(frozen=True)
class _Answer:
    """What a connection ends with: its response line, and whether the rest of an
    oversized request line is still to be read (and dropped) before closing."""

    line: bytes | None
    unread_request: bool = False


class CtlServer:
    """Serves ctl requests on an AF_UNIX socket; see the module docstring."""

    def __init__(
        self,
        path: Path,
        identify: Identify,
        commands: Mapping[str, CtlCommand],
        audit: AuditCall | None = None,
    ) -> None:
        self.path = path
        self._identify = identify
        self._commands = dict(commands)
        self._audit = audit
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.Task[None]] = set()
        # Admitted connections by caller: the pane identity, or None (in no pane).
        self._per_caller: dict[str | None, int] = {}
        # Bounds hit and logged, until the count falls below them again: a flood of
        # refusals is one warning, not one line each.
        self._warned: set[tuple[str, str | None]] = set()

    async def start(self) -> None:
        """Bind and listen (under umask 077, then chmod 0600); a stale socket file of a
        previous service on this state dir is replaced."""
        self.path.unlink(missing_ok=True)
        old = os.umask(0o077)
        try:
            self._server = await asyncio.start_unix_server(
                self._connection, path=str(self.path), limit=MAX_REQUEST_BYTES
            )
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)

    async def stop(self) -> None:
        """Stop listening, cancel the connections in flight, remove the socket file."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_TIMEOUT_S)
        if server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(server.wait_closed(), STOP_TIMEOUT_S)
        self.path.unlink(missing_ok=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        accepted_ticks = boot_ticks_now()
        caller: str | None = None
        admitted = False
        try:
            if len(self._connections) > MAX_CONNECTIONS:
                self._busy("all", None)
                await _refuse(writer, f"the service has {MAX_CONNECTIONS} ctl connections open")
                return
            identity = await self._attest(writer, accepted_ticks)
            caller = identity if isinstance(identity, str) else None
            if self._per_caller.get(caller, 0) >= MAX_CONNECTIONS_PER_PANE:
                self._busy("pane", caller)
                await _refuse(
                    writer, f"this pane has {MAX_CONNECTIONS_PER_PANE} ctl connections open"
                )
                return
            self._per_caller[caller] = self._per_caller.get(caller, 0) + 1
            admitted = True
            answer = await self._exchange(reader, writer, identity)
            if answer.line is not None:
                writer.write(answer.line + b"\n")
                await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)
            if answer.unread_request:
                await _discard_rest_of_line(reader)
        except (ConnectionError, TimeoutError):
            pass  # the client went away or stopped reading: nothing to tell it
        except asyncio.CancelledError:
            # The service stops. Nothing awaits this task but the stop, and asyncio's
            # stream callback would log a cancelled connection task as an error.
            pass
        finally:
            if admitted:
                left = self._per_caller[caller] - 1
                if left:
                    self._per_caller[caller] = left
                else:
                    del self._per_caller[caller]
                if left < MAX_CONNECTIONS_PER_PANE:
                    self._warned.discard(("pane", caller))
            self._connections.discard(task)
            if len(self._connections) < MAX_CONNECTIONS:
                self._warned.discard(("all", None))
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), WRITE_TIMEOUT_S)

    def _busy(self, bound: str, caller: str | None) -> None:
        if (bound, caller) in self._warned:
            return
        self._warned.add((bound, caller))
        pane = None if caller is None else pane_of_identity(caller)
        log.warning(
            "ctl connections refused: the %s bound is reached",
            "service's" if bound == "all" else "pane's",
            extra={"tool": "ctl connect", "pane": pane, "code": ErrorCode.CTL_BUSY.value},
        )

    async def _attest(
        self, writer: asyncio.StreamWriter, accepted_ticks: int
    ) -> str | PanewardenError:
        """The caller's identity, taken as it is accepted (its connections are counted
        by it); a refusal is kept to answer after the request is read, as before."""
        try:
            return await self._identify(writer.get_extra_info("socket"), accepted_ticks)
        except PanewardenError as exc:
            return exc

    async def _exchange(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        attested: str | PanewardenError,
    ) -> _Answer:
        """Read, attest, run; the response line (none when the client is gone)."""
        op = "?"
        identity: str | None = None
        target: str | None = None
        try:
            request = await _read_request(reader)
            op = request.op
            command = self._commands.get(op)
            if command is None:
                raise PanewardenError(ErrorCode.INVALID_ARGUMENT, f"no ctl command {echo(op, 40)}")
            if isinstance(attested, PanewardenError):
                raise attested
            identity = attested
            try:
                args = msgspec.convert(request.args, command.args)
            except msgspec.ValidationError as exc:
                raise PanewardenError(ErrorCode.INVALID_ARGUMENT, str(exc)) from None
            target = getattr(args, "name", None)
            result = await _unless_client_leaves(reader, command.run(identity, args))
        except _ClientGone:
            self._record(op, identity, target, "cancelled", None)
            return _Answer(None)
        except PanewardenError as exc:
            self._record(op, identity, target, "error", exc.code.value)
            return _Answer(encode_error(exc.code, exc.message), isinstance(exc, _TooLarge))
        except Exception:
            log.exception("ctl command failed", extra={"tool": f"ctl {op}"})
            self._record(op, identity, target, "error", ErrorCode.INTERNAL.value)
            return _Answer(encode_error(ErrorCode.INTERNAL, "internal error; see the service log"))
        self._record(op, identity, target, "ok", None)
        body = msgspec.json.encode({"ok": True, "result": result})
        if len(body) >= MAX_RESPONSE_BYTES:
            return _Answer(
                encode_error(
                    ErrorCode.INVALID_ARGUMENT, "the result is too large; ask for fewer --lines"
                )
            )
        return _Answer(body)

    def _record(
        self, op: str, identity: str | None, target: str | None, outcome: str, code: str | None
    ) -> None:
        """Log the call; audit it when it was attested, known and not a read.

        A request refused before its caller was attested (or naming no command) has no
        one to attribute it to: the service log has it, the audit file does not.
        """
        _log_call(op, identity, outcome, code)
        if (
            self._audit is not None
            and identity is not None
            and op in self._commands
            and op not in READ_ONLY_COMMANDS
        ):
            self._audit(identity, f"ctl {op}", target, outcome, code)


async def _refuse(writer: asyncio.StreamWriter, why: str) -> None:
    """Answer a connection beyond a bound with one ``ctl_busy`` line, at once."""
    writer.write(encode_error(ErrorCode.CTL_BUSY, f"{why}; try again later") + b"\n")
    with contextlib.suppress(ConnectionError, TimeoutError):
        await asyncio.wait_for(writer.drain(), REFUSAL_WRITE_TIMEOUT_S)


async def _read_request(reader: asyncio.StreamReader) -> CtlRequest:
    """The client's one request line, bounded in size and time."""
    try:
        line = await asyncio.wait_for(reader.readuntil(b"\n"), REQUEST_READ_TIMEOUT_S)
    except TimeoutError:
        raise PanewardenError(
            ErrorCode.TIMEOUT, f"no request within {REQUEST_READ_TIMEOUT_S:.0f}s"
        ) from None
    except asyncio.IncompleteReadError as exc:  # the client's end before a newline
        line = exc.partial
    except asyncio.LimitOverrunError:
        # The stream's limit (MAX_REQUEST_BYTES): refused at once; unlike readline,
        # readuntil leaves the line in the buffer, so the discard knows where it ends.
        raise _TooLarge from None
    if not line.endswith(b"\n"):
        raise PanewardenError(ErrorCode.INVALID_ARGUMENT, "a request is one line ending in \\n")
    try:
        return msgspec.json.decode(line, type=CtlRequest)
    except msgspec.ValidationError as exc:
        raise PanewardenError(ErrorCode.INVALID_ARGUMENT, f"bad request: {exc}") from None
    except msgspec.DecodeError:
        raise PanewardenError(ErrorCode.INVALID_ARGUMENT, "a request is one JSON object") from None


async def _discard_rest_of_line(reader: asyncio.StreamReader) -> None:
    """Read and drop what is left of a refused request line (through its newline, or to
    the client's end), bounded by ``DISCARD_BYTES`` and ``DISCARD_TIMEOUT_S``; a client
    that sends more than that is cut off (its problem, not the service's)."""
    left = DISCARD_BYTES
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(DISCARD_TIMEOUT_S):
            while left > 0:
                chunk = await reader.read(min(DISCARD_CHUNK_BYTES, left))
                if not chunk or b"\n" in chunk:
                    return
                left -= len(chunk)


async def _unless_client_leaves(
    reader: asyncio.StreamReader, work: Awaitable[dict[str, Any]]
) -> dict[str, Any]:
    """Run ``work``; cancel it if the client closes its end (or sends anything more)."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(reader.read(1))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        raise _ClientGone
    finally:
        for pending in (task, watch):
            if not pending.done():
                pending.cancel()
        await asyncio.gather(task, watch, return_exceptions=True)


def _log_call(op: str, identity: str | None, outcome: str, code: str | None) -> None:
    """One content-free log line per ctl call (the pane, never arguments)."""
    pane = None if identity is None else pane_of_identity(identity)
    level = logging.INFO if outcome != "ok" or op not in ("status", "receipts") else logging.DEBUG
    log.log(level, "ctl call %s", outcome, extra={"tool": f"ctl {op}", "pane": pane, "code": code})
