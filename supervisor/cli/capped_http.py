"""An httpx2 transport for the operator's tools whose answers are bounded.

``top`` and ``watch --url`` read services they do not control: a response body is read
only up to ``MAX_BODY_BYTES`` (the operator socket's event-line bound, so both paths of
``watch`` and ``top`` hold the same), then the read fails with ``ResponseTooLarge``.
``identity`` is the only encoding asked for, and one the service applies anyway is
refused before a byte is decoded: a small compressed answer cannot grow past the bound
in memory.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2

from supervisor.front.feed.wire import MAX_EVENT_BYTES

MAX_BODY_BYTES = MAX_EVENT_BYTES
IDENTITY = {"Accept-Encoding": "identity"}


class ResponseTooLarge(httpx2.ReadError):
    """A service's answer passed the bound (or came compressed)."""


class _CappedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, limit: int) -> None:
        self._inner = inner
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit:
                raise ResponseTooLarge(f"the answer passed {self._limit} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class CappedTransport(httpx2.AsyncBaseTransport):
    """``AsyncHTTPTransport`` whose response bodies stop at ``limit`` bytes."""

    def __init__(self, limit: int = MAX_BODY_BYTES) -> None:
        self._inner = httpx2.AsyncHTTPTransport(trust_env=False)
        self._limit = limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            await response.aclose()
            raise ResponseTooLarge(f"the answer came {encoding!r}-encoded; identity was asked")
        stream = response.stream
        assert isinstance(stream, httpx2.AsyncByteStream)
        response.stream = _CappedStream(stream, self._limit)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()
