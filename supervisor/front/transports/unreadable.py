"""The answer to a request the SDK cannot read: ``-32700`` or ``-32600``, never silence.

The SDK parses each stdio line (and each HTTP body) with its own JSON-RPC message
adapter. Over stdio a line it cannot parse or validate becomes an ``Exception`` on the
read stream, which the server only logs: the client waits forever (``AnsweringReader``
answers it). Over HTTP the SDK answers with status 400, but always with ``id: null`` and
with ``-32602`` for a message that is JSON but no JSON-RPC message (``AnsweringHttp``
rewrites that answer, after authentication, leaving every other response alone). Both
turn the adapter's own ``ValidationError`` into the answer JSON-RPC 2.0 prescribes:

- the text is not JSON the adapter accepts (truncated, garbage, a lone surrogate escape,
  a 5,000-digit number, nesting past pydantic's recursion limit): ``-32700`` parse error;
- it is JSON but not a JSON-RPC message: ``-32600`` invalid request;

each with the request's ``id`` whenever it can still be read from the text, else
``null``. The messages name what failed, never the client's text.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
import pydantic
import pydantic_core
from mcp.shared.message import SessionMessage
from mcp.types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    jsonrpc_message_adapter,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from protocol.errors import clip

log = logging.getLogger(__name__)

# Longer integer literals are not read as an id (Python refuses > 4,300 digits anyway).
ID_DIGITS = 20

RequestId = str | int


def answer_for(exc: Exception) -> JSONRPCError:
    """The JSON-RPC error for a message the SDK's adapter refused with ``exc``."""
    if isinstance(exc, pydantic.ValidationError):
        errors = exc.errors(include_url=False)
        invalid_json = [e for e in errors if e["type"] == "json_invalid"]
        if invalid_json:
            raw = invalid_json[0]["input"]
            text = clip(str(invalid_json[0]["msg"]))
            return _error(PARSE_ERROR, f"Parse error: {text}", readable_id(raw))
        # An error inside a field carries that field's value; one about a missing field
        # carries the message itself, and every union member misses one of its own.
        message = next((e["input"] for e in errors if isinstance(e["input"], dict)), None)
        return _error(
            INVALID_REQUEST,
            "Invalid request: not a JSON-RPC 2.0 request, notification or response",
            _id_of(message),
        )
    return _error(PARSE_ERROR, f"Parse error: {type(exc).__name__}", None)


def readable_id(raw: Any) -> RequestId | None:
    """The ``id`` of a request text that is not valid JSON-RPC, if it can still be read.

    The SDK's parser refuses what plain JSON allows (lone surrogate escapes, long
    integers, deep nesting); Python's reader is tried first, then pydantic's partial
    mode for a truncated text whose ``id`` came before the cut.
    """
    if not isinstance(raw, str | bytes | bytearray):
        return None
    raw = raw.strip()  # a stdio line ends in its newline: no JSON may follow a cut
    try:
        return _id_of(json.loads(raw, parse_int=_short_int))
    except (ValueError, RecursionError):
        pass
    try:
        return _id_of(pydantic_core.from_json(raw, allow_partial=True))
    except ValueError:
        return None


def _short_int(digits: str) -> int | None:
    return int(digits) if len(digits) <= ID_DIGITS else None


def _id_of(parsed: Any) -> RequestId | None:
    if not isinstance(parsed, dict):
        return None
    value = parsed.get("id")
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    return value


def _error(code: int, message: str, request_id: RequestId | None) -> JSONRPCError:
    log.info("unreadable request answered with %d", code, extra={"op": "jsonrpc"})
    return JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))


class AnsweringReader:
    """The SDK's stdio read stream, with every unreadable line answered on the spot.

    ``stdio_server`` hands the server an ``Exception`` for a line its adapter refused,
    and the server only logs it; here that item is answered on the write stream and
    the next message is read instead.
    """

    def __init__(self, inner: Any, writer: Any) -> None:
        self._inner = inner
        self._writer = writer

    @property
    def last_context(self) -> Any:
        """The sender context of the last message (the dispatcher reads it)."""
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        """The next readable message; unreadable ones are answered and skipped."""
        while True:
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item  # type: ignore[no-any-return]
            await self._writer.send(SessionMessage(answer_for(item)))

    async def aclose(self) -> None:
        """Close the SDK's stream."""
        await self._inner.aclose()

    def __aiter__(self) -> AnsweringReader:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> AnsweringReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AnsweringHttp:
    """Pure ASGI: the SDK's 400 answer to an unreadable body, with the right code and id.

    The body is recorded as the app reads it (up to ``limit``, the SDK's own body bound:
    beyond it the SDK answers 413, which passes untouched). Only a 400 whose JSON-RPC
    error is the SDK's own parse or validation refusal (``id: null``, ``-32700`` or
    ``-32602``) of a body its adapter indeed refuses is replaced.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self._app = app
        self._limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on; rewrite the SDK's refusal of an unreadable body."""
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self._app(scope, receive, send)
            return
        body = bytearray()
        held: list[Message] = []

        async def recording() -> Message:
            message = await receive()
            if message["type"] == "http.request" and len(body) <= self._limit:
                body.extend(message.get("body", b""))
            return message

        async def rewriting(message: Message) -> None:
            if message["type"] == "http.response.start" and message.get("status") == 400:
                held.append(message)
                return
            if not held:
                await send(message)
                return
            held.append(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                for out in self._answered(bytes(body), held):
                    await send(out)
                held.clear()

        await self._app(scope, recording, rewriting)

    def _answered(self, body: bytes, held: list[Message]) -> list[Message]:
        start, chunks = held[0], held[1:]
        sent = b"".join(m.get("body", b"") for m in chunks)
        try:
            refusal = JSONRPCError.model_validate_json(sent)
        except pydantic.ValidationError:
            return held
        if refusal.id is not None or refusal.error.code not in (PARSE_ERROR, INVALID_PARAMS):
            return held
        try:
            jsonrpc_message_adapter.validate_json(body, by_name=False)
        except pydantic.ValidationError as exc:
            text = answer_for(exc).model_dump_json(by_alias=True, exclude_unset=True).encode()
        else:
            return held
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(text)).encode()))
        return [
            {**start, "headers": headers},
            {"type": "http.response.body", "body": text, "more_body": False},
        ]
