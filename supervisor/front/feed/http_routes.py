"""The feed and the status page on the HTTP service, beside the SDK's ``/mcp``.

- ``GET /feed?pane=NAME``: ``text/event-stream`` of one pane's ``status`` and ``screen``
  events; without ``pane``, every pane's ``status`` events (contract in
  :mod:`supervisor.front.feed.events`). A comment line (``: keepalive``) after
  ``KEEPALIVE_S`` of silence. Bearer token in ``Authorization`` (the ``read`` scope is
  enough), checked against the same client table as ``/mcp``; 401 without a valid one,
  403 without ``read``, 404 for an unknown pane, 429 past the viewer bound.
- ``GET /`` and its two assets: the status page (:mod:`supervisor.front.page`),
  public (it holds nothing; it asks for the token and keeps it in the tab's memory).

Everything is behind the same Host/Origin gate as ``/mcp`` (it wraps the whole app),
every answer is ``Cache-Control: no-store``, and nothing here can type into a pane.
A reload of the clients file ends at once every open feed whose token it removed or
left without ``read``.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from protocol.errors import ErrorCode, PanewardenError
from supervisor.auth.clients import ClientTable
from supervisor.auth.http_access import HttpGate
from supervisor.front.feed.hub import FeedHub, Viewer
from supervisor.front.feed.wire import KEEPALIVE_S
from supervisor.front.page import PAGE_ASSETS, PAGE_CSP

FEED_PATH = "/feed"
NO_STORE = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
_STATUS_OF = {
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.PANE_LIMIT: 429,
    ErrorCode.FORBIDDEN: 403,
    ErrorCode.INVALID_ARGUMENT: 400,
}


def _error(code: ErrorCode, message: str, status: int) -> Response:
    headers = dict(NO_STORE)
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer error="invalid_token"'
    return JSONResponse({"code": code.value, "message": message}, status, headers=headers)


def _token(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if not hmac.compare_digest(scheme.lower().encode(), b"bearer") or not token.strip():
        return None
    return token.strip()


def _may_read(table: ClientTable, token: str) -> bool:
    caller = table.lookup(token)
    return caller is not None and "read" in caller.scopes


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


async def _stream(viewer: Viewer) -> AsyncIterator[bytes]:
    yield b": feed\n\n"
    while True:
        events = await viewer.next(KEEPALIVE_S)
        if events:
            yield b"".join(_sse(name, data) for name, data in events)
        elif viewer.ended:
            return
        else:
            yield b": keepalive\n\n"


class FeedRoutes:
    """Pure ASGI: the feed and page paths here, every other path to the SDK's app."""

    def __init__(self, app: ASGIApp, hub: FeedHub | None, gate: HttpGate) -> None:
        self._app = app
        self._hub = hub
        self._gate = gate
        # The open feeds and the token each was opened with.
        self._open: dict[Viewer, str] = {}
        gate.on_reload(self._revoke)

    def _revoke(self, table: ClientTable) -> None:
        for viewer, token in list(self._open.items()):
            if not _may_read(table, token):
                viewer.end()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or (path != FEED_PATH and path not in PAGE_ASSETS):
            await self._app(scope, receive, send)
            return
        request = Request(scope, receive)
        if request.method not in ("GET", "HEAD"):
            response: Response = _error(ErrorCode.INVALID_ARGUMENT, "only GET is served", 405)
            await response(scope, receive, send)
            return
        if path in PAGE_ASSETS:
            body, media_type = PAGE_ASSETS[path]
            headers = NO_STORE | {
                "Content-Security-Policy": PAGE_CSP,
                "Referrer-Policy": "no-referrer",
                "X-Frame-Options": "DENY",
            }
            await Response(body, media_type=media_type, headers=headers)(scope, receive, send)
            return
        await self._feed(request, scope, receive, send)

    async def _feed(self, request: Request, scope: Scope, receive: Receive, send: Send) -> None:
        token = _token(request)
        caller = None if token is None else self._gate.table.lookup(token)
        if caller is None or token is None:
            response = _error(ErrorCode.FORBIDDEN, "a valid bearer token is required", 401)
        elif "read" not in caller.scopes:
            response = _error(
                ErrorCode.FORBIDDEN, f"client {caller.name!r} lacks the 'read' scope", 403
            )
        elif self._hub is None:
            response = _error(ErrorCode.NOT_FOUND, "no feed on this service", 404)
        else:
            pane = request.query_params.get("pane")
            try:
                viewer = await self._hub.open(pane or None)
            except PanewardenError as exc:
                response = _error(exc.code, exc.message, _STATUS_OF.get(exc.code, 400))
            else:
                self._open[viewer] = token
                try:
                    stream = StreamingResponse(
                        _stream(viewer),
                        media_type="text/event-stream",
                        headers=NO_STORE | {"X-Accel-Buffering": "no"},
                    )
                    await stream(scope, receive, send)
                finally:
                    self._open.pop(viewer, None)
                    self._hub.close(viewer)
                return
        await response(scope, receive, send)
