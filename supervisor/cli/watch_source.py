"""Where ``panewarden watch`` reads the feed: the HTTP service's ``/feed`` stream
(bearer token) or the local service's operator socket. Both yield the same
``(event, data)`` pairs (:mod:`supervisor.front.feed.events`); every failure is a
``WatchError`` with a one-line message, cleaned by ``terminal_safe``. Both hold an event
to ``MAX_EVENT_BYTES``: the HTTP stream is split into lines here, from the raw bytes
(``identity`` encoding only), so one endless line costs that bound, not the memory it
would take.
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2

from protocol.safe_files import FileReadError, read_regular_file
from protocol.terminal_text import terminal_safe
from supervisor.cli.capped_http import IDENTITY
from supervisor.front.feed.wire import MAX_EVENT_BYTES, OPERATOR_RECORD

CONNECT_TIMEOUT_S = 5.0
# Longer than the service's keepalive period: a silent stream is a dead one.
READ_TIMEOUT_S = 40.0
FEED_PATH = "/feed"

Event = tuple[str, dict[str, Any]]


class WatchError(Exception):
    """A failure to say in one line (bad token, unknown pane, no service)."""

    def __init__(self, message: str) -> None:
        super().__init__(terminal_safe(message)[:300])


async def bounded_lines(chunks: AsyncIterator[bytes], limit: int) -> AsyncIterator[str]:
    """The lines (LF or CRLF ended) of a byte stream; a line longer than ``limit`` bytes
    is a ``WatchError``."""
    pending = b""
    async for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if len(line) > limit:
                raise WatchError(f"a feed line passed {limit} bytes")
            yield line.removesuffix(b"\r").decode(errors="replace")
        if len(pending) > limit:
            raise WatchError(f"a feed line passed {limit} bytes")


def feed_url(url: str, pane: str | None) -> str:
    """The ``/feed`` URL on the origin of ``url`` (a service's ``/mcp`` URL or its root,
    checked by ``top_targets.check_url``)."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.urlencode({"pane": pane}) if pane is not None else ""
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, FEED_PATH, query, ""))


async def http_events(url: str, token: str, pane: str | None) -> AsyncIterator[Event]:
    """The feed over HTTP (``text/event-stream``)."""
    target = feed_url(url, pane)
    client = httpx2.AsyncClient(
        timeout=httpx2.Timeout(CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S),
        # Loopback only: an HTTP(S)_PROXY from the environment must never see the token.
        trust_env=False,
    )
    try:
        async with (
            client,
            client.stream(
                "GET", target, headers={"Authorization": f"Bearer {token}", **IDENTITY}
            ) as response,
        ):
            encoding = response.headers.get("content-encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                raise WatchError(f"the feed came {encoding!r}-encoded; identity was asked")
            if response.status_code != 200:
                raise WatchError(_refusal(response.status_code, await _head(response)))
            event = "message"
            data: list[str] = []
            size = 0
            async for line in bounded_lines(response.aiter_raw(), MAX_EVENT_BYTES):
                if line.startswith(":"):
                    continue
                if line == "":
                    if data:
                        yield event, _decode("\n".join(data))
                    event, data, size = "message", [], 0
                elif line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    size += len(line)
                    if size > MAX_EVENT_BYTES:
                        raise WatchError(f"a feed event passed {MAX_EVENT_BYTES} bytes")
                    data.append(line[5:].strip())
    except httpx2.TimeoutException:
        raise WatchError(f"the service at {target} stopped answering") from None
    except httpx2.HTTPError as exc:
        raise WatchError(f"cannot reach the service at {target}: {exc}") from None
    raise WatchError("the service closed the feed")


async def _head(response: httpx2.Response, limit: int = 4096) -> bytes:
    """At most ``limit`` raw bytes of a refusal's body."""
    body = b""
    async for chunk in response.aiter_raw():
        body += chunk
        if len(body) >= limit:
            break
    return body[:limit]


def _decode(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        raise WatchError("the service sent an event that is not JSON") from None
    if not isinstance(value, dict):
        raise WatchError("the service sent an event that is not a JSON object")
    return value


def _refusal(status: int, body: bytes) -> str:
    try:
        detail = json.loads(body)
        message = detail.get("message") or detail.get("error_description") or detail.get("error")
    except (ValueError, AttributeError):
        message = None
    if status == 401:
        return "the service refused the token (401)"
    return f"{message or 'refused'} ({status})"


def operator_socket_path(state_dir: Path) -> Path:
    """The operator socket a service on ``state_dir`` recorded.

    Raises:
        WatchError: no service recorded one.
    """
    record = state_dir / "run" / OPERATOR_RECORD
    try:
        data = read_regular_file(record, limit_bytes=4096, follow_symlinks=False)
    except FileReadError:
        raise WatchError(f"no service is running for {state_dir} ({record} is absent)") from None
    return Path(data.decode(errors="replace").strip())


async def socket_events(path: Path, pane: str | None) -> AsyncIterator[Event]:
    """The feed over the operator socket (one JSON line per event)."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_unix_connection(str(path), limit=MAX_EVENT_BYTES), CONNECT_TIMEOUT_S
        )
    except (OSError, TimeoutError) as exc:
        raise WatchError(f"cannot reach the service at {path}: {exc}") from None
    try:
        writer.write((json.dumps({"op": "watch", "pane": pane}) + "\n").encode())
        await writer.drain()
        while True:
            line = await asyncio.wait_for(reader.readline(), READ_TIMEOUT_S)
            if not line:
                raise WatchError("the service closed the feed")
            message = json.loads(line)
            name, data = message["event"], message["data"]
            if not isinstance(name, str) or not isinstance(data, dict):
                raise ValueError("an event is not {event, data}")
            if name == "error":
                raise WatchError(f"{data.get('message')} ({data.get('code')})")
            yield name, data
    except (OSError, TimeoutError, ValueError, KeyError, TypeError) as exc:
        raise WatchError(f"the feed from {path} failed: {exc or type(exc).__name__}") from None
    finally:
        writer.close()
