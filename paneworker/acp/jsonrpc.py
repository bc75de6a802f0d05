"""JSON-RPC 2.0 frames as ACP carries them on stdio: one JSON object per line.

Hand-written rather than taken from the ``agent-client-protocol`` package (0.12.1):
its connection is asyncio (futures, tasks, ``StreamReader``) and its schema is pydantic
(273 models; ``import acp`` took 0.46 s and 25 MB here), while a worker is one
single-threaded poll loop that decodes with msgspec. ACP needs a few frame shapes.

Reading is bounded: a line longer than ``MAX_FRAME_BYTES`` is never held whole; the
reader reports it once (``FrameTooLarge``) and drops bytes up to its newline.
"""

from __future__ import annotations

from typing import Any

import msgspec

# The longest line taken from an agent: a file read into a tool result fits many times.
MAX_FRAME_BYTES = 4 * 1024 * 1024

# Standard JSON-RPC error codes the client answers with.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602

RequestId = int | str


class RpcError(msgspec.Struct, frozen=True):
    """A JSON-RPC error object."""

    code: int
    message: str = ""
    data: Any = None


class Frame(msgspec.Struct, frozen=True):
    """Any JSON-RPC message: a request (method + id), a notification (method, no id)
    or a response (id + result or error)."""

    jsonrpc: str = ""
    id: RequestId | None = None
    method: str | None = None
    params: Any = None
    result: Any = None
    error: RpcError | None = None

    @property
    def is_request(self) -> bool:
        """A call from the agent that wants an answer."""
        return self.method is not None and self.id is not None

    @property
    def is_notification(self) -> bool:
        """A call from the agent that wants none."""
        return self.method is not None and self.id is None

    @property
    def is_response(self) -> bool:
        """An answer to one of our requests."""
        return self.method is None and self.id is not None


class BadFrame(ValueError):
    """A line that is not a JSON-RPC 2.0 message."""


class FrameTooLarge(ValueError):
    """A line over ``MAX_FRAME_BYTES``."""


_DECODER = msgspec.json.Decoder(Frame)
_ENCODER = msgspec.json.Encoder()


def decode(line: bytes) -> Frame:
    """One line to a frame; raises BadFrame."""
    try:
        frame = _DECODER.decode(line)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise BadFrame(str(exc)) from None
    except RecursionError:
        # msgspec's own depth limit (JSON nested ~1,000 deep) raises this, not DecodeError.
        raise BadFrame("nested too deep") from None
    if frame.jsonrpc != "2.0" or (frame.method is None and frame.id is None):
        raise BadFrame("not a JSON-RPC 2.0 message")
    return frame


def request(rid: RequestId, method: str, params: object) -> bytes:
    """A request line."""
    return _line({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})


def notification(method: str, params: object) -> bytes:
    """A notification line."""
    return _line({"jsonrpc": "2.0", "method": method, "params": params})


def result(rid: RequestId, value: object) -> bytes:
    """A successful response line (the id echoed as given: codex-acp sends strings)."""
    return _line({"jsonrpc": "2.0", "id": rid, "result": value})


def error(rid: RequestId | None, code: int, message: str) -> bytes:
    """An error response line."""
    return _line({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}})


def _line(obj: dict[str, Any]) -> bytes:
    return _ENCODER.encode(obj) + b"\n"


class LineReader:
    """Splits a byte stream into lines, holding at most ``limit`` bytes of one."""

    def __init__(self, limit: int = MAX_FRAME_BYTES) -> None:
        self._limit = limit
        self._buf = bytearray()
        self._skipping = False

    @property
    def buffered(self) -> int:
        """Bytes of an unfinished line held now (never more than the limit)."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[bytes | FrameTooLarge]:
        """The complete lines in ``data`` (with what came before), in order; an
        over-long line is one ``FrameTooLarge`` in its place."""
        out: list[bytes | FrameTooLarge] = []
        start = 0
        while start < len(data):
            nl = data.find(b"\n", start)
            end = len(data) if nl < 0 else nl
            if self._skipping:
                if nl >= 0:
                    self._skipping = False
            else:
                self._buf += data[start:end]
                if len(self._buf) > self._limit:
                    out.append(FrameTooLarge(f"a frame over {self._limit} bytes"))
                    self._buf.clear()
                    self._skipping = nl < 0
                elif nl >= 0:
                    line = bytes(self._buf).strip()
                    self._buf.clear()
                    if line:
                        out.append(line)
            if nl < 0:
                break
            start = nl + 1
        return out
