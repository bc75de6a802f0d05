"""The operator socket: the screen feed for a local operator, without HTTP or a token.

Contract in :mod:`supervisor.front.feed.wire`. Access is the file's: the socket is
0600 in the 0700 runtime directory (which confined panes cannot see), a peer in a
sandbox of any service (another PID namespace: ``peer_namespace``) is refused, and so
is a peer that runs inside one of this service's panes (attested as the ctl socket
attests its callers): a pane's program must not read other panes' screens.
Each connection is served by its
own task; a client that stops reading is dropped after ``WRITE_TIMEOUT_S`` (its mailbox
coalesces meanwhile, so it never costs more than one frame).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from protocol.errors import ErrorCode, PanewardenError
from supervisor.front.ctl.attestation import boot_ticks_now
from supervisor.front.feed.hub import FeedHub
from supervisor.front.feed.peer_namespace import refuse_sandboxed_peer
from supervisor.front.feed.wire import KEEPALIVE_S, MAX_REQUEST_BYTES, REQUEST_READ_TIMEOUT_S

log = logging.getLogger(__name__)

WRITE_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 5.0

# Raises forbidden when the peer runs in no pane (the ctl socket's attestation).
Identify = Callable[[socket.socket, int], Awaitable[str]]


def _line(event: str, data: dict[str, Any]) -> bytes:
    return (json.dumps({"event": event, "data": data}, separators=(",", ":")) + "\n").encode()


class OperatorSocket:
    """Serves the feed on ``path``; see the module docstring."""

    def __init__(self, path: Path, hub: FeedHub, identify: Identify) -> None:
        self.path = path
        self._hub = hub
        self._identify = identify
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Bind (0600, from the start: the umask is tightened around the bind)."""
        self.path.unlink(missing_ok=True)
        old = os.umask(0o177)
        try:
            self._server = await asyncio.start_unix_server(self._serve, path=str(self.path))
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)

    async def stop(self) -> None:
        """Close the listener and every connection."""
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=STOP_TIMEOUT_S)
        self.path.unlink(missing_ok=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._exchange(reader, writer)
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError):
            pass
        except PanewardenError as exc:
            with contextlib.suppress(ConnectionError, TimeoutError):
                writer.write(_line("error", {"code": exc.code.value, "message": exc.message}))
                await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), STOP_TIMEOUT_S)

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted = boot_ticks_now()
        sock = writer.get_extra_info("socket")
        if sock is None:
            raise PanewardenError(ErrorCode.FORBIDDEN, "the operator socket cannot see its peer")
        # The request is read first, so a refused client hears why instead of a broken pipe.
        pane = await _read_request(reader)
        refuse_sandboxed_peer(sock)
        if await self._in_a_pane(sock, accepted):
            raise PanewardenError(
                ErrorCode.FORBIDDEN, "the operator socket serves no program running in a pane"
            )
        viewer = await self._hub.open(pane)
        hangup = asyncio.ensure_future(reader.read(1))
        try:
            while True:
                events = await viewer.next(KEEPALIVE_S)
                if hangup.done():
                    return
                lines = [_line(name, data) for name, data in events] or [_line("keepalive", {})]
                writer.write(b"".join(lines))
                await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)
                if viewer.ended and not events:
                    return
        finally:
            hangup.cancel()
            self._hub.close(viewer)

    async def _in_a_pane(self, sock: socket.socket, accepted: int) -> bool:
        try:
            await self._identify(sock, accepted)
        except PanewardenError:
            return False
        return True


async def _read_request(reader: asyncio.StreamReader) -> str | None:
    try:
        line = await asyncio.wait_for(reader.readuntil(b"\n"), REQUEST_READ_TIMEOUT_S)
    except asyncio.LimitOverrunError:
        raise PanewardenError(ErrorCode.INVALID_ARGUMENT, "the request line is too long") from None
    if len(line) > MAX_REQUEST_BYTES:
        raise PanewardenError(ErrorCode.INVALID_ARGUMENT, "the request line is too long")
    try:
        request = json.loads(line)
    except ValueError:
        raise PanewardenError(ErrorCode.INVALID_ARGUMENT, "the request is not JSON") from None
    if not isinstance(request, dict) or request.get("op") != "watch":
        raise PanewardenError(ErrorCode.INVALID_ARGUMENT, 'the request must be {"op": "watch"}')
    pane = request.get("pane")
    if pane is not None and not isinstance(pane, str):
        raise PanewardenError(ErrorCode.INVALID_ARGUMENT, "pane must be a string")
    return pane
