"""Encoding of protocol messages into ZeroMQ frames and back.

A message travels as one msgpack frame. Frames above ``MAX_FRAME_BYTES`` are
refused on both sides; a malformed or unknown frame raises ``FrameError`` so the
socket loop can log and drop it without dying.
"""

from __future__ import annotations

import msgspec

from protocol.messages import ToSupervisor, ToWorker

MAX_FRAME_BYTES = 1024 * 1024


class FrameError(ValueError):
    """A frame that cannot be accepted (too large, malformed, unknown op)."""


class Codec:
    """One encoder and the two decoders; create one per socket owner."""

    def __init__(self) -> None:
        self._encoder = msgspec.msgpack.Encoder()
        self._to_worker = msgspec.msgpack.Decoder(ToWorker)
        self._to_supervisor = msgspec.msgpack.Decoder(ToSupervisor)

    def encode(self, msg: ToWorker | ToSupervisor) -> bytes:
        """Encode ``msg``; raises FrameError when the result exceeds the limit."""
        data = self._encoder.encode(msg)
        if len(data) > MAX_FRAME_BYTES:
            raise FrameError(f"frame of {len(data)} bytes exceeds {MAX_FRAME_BYTES}")
        return data

    def decode_to_worker(self, data: bytes) -> ToWorker:
        """Decode a supervisor->worker frame; raises FrameError."""
        _check_size(data)
        try:
            return self._to_worker.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise FrameError(str(exc)) from exc

    def decode_to_supervisor(self, data: bytes) -> ToSupervisor:
        """Decode a worker->supervisor frame; raises FrameError."""
        _check_size(data)
        try:
            return self._to_supervisor.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise FrameError(str(exc)) from exc


def _check_size(data: bytes) -> None:
    if len(data) > MAX_FRAME_BYTES:
        raise FrameError(f"frame of {len(data)} bytes exceeds {MAX_FRAME_BYTES}")
