"""The worker's ZeroMQ DEALER link to the supervisor's ROUTER.

Sends never block (a supervisor that is gone must not stall the pane); frames
that fail to decode are logged and dropped, never fatal.
"""

from __future__ import annotations

import logging

import zmq

from protocol.framing import MAX_FRAME_BYTES, Codec, FrameError
from protocol.messages import ToSupervisor, ToWorker

log = logging.getLogger(__name__)


class SupervisorLink:
    """A DEALER socket whose routing id is the pane instance id."""

    def __init__(self, endpoint: str, instance: str) -> None:
        self._ctx = zmq.Context()
        self.socket: zmq.Socket[bytes] = self._ctx.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.ROUTING_ID, instance.encode())
        self.socket.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES + 1024)
        self.socket.setsockopt(zmq.SNDHWM, 10000)
        self.socket.setsockopt(zmq.RECONNECT_IVL, 100)
        self.socket.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        self.socket.connect(endpoint)
        self._codec = Codec()

    def send(self, msg: ToSupervisor) -> bool:
        """Queue ``msg``; returns False (and logs) when it could not be queued."""
        try:
            data = self._codec.encode(msg)
        except (FrameError, ValueError, TypeError, OverflowError) as exc:
            # Whatever a value from the program makes the encoder raise costs this
            # frame, never the worker (an int past 2^64 - 1 raised OverflowError).
            log.error("dropping outgoing %s frame: %s", type(msg).__name__, str(exc)[:200])
            return False
        try:
            self.socket.send(data, zmq.NOBLOCK)
        except zmq.Again:
            log.warning("supervisor link full; dropped a %s frame", type(msg).__name__)
            return False
        return True

    def receive_ready(self) -> list[ToWorker]:
        """Every frame waiting now, decoded; bad frames are logged and dropped."""
        out: list[ToWorker] = []
        while True:
            try:
                data = self.socket.recv(zmq.NOBLOCK)
            except zmq.Again:
                return out
            try:
                out.append(self._codec.decode_to_worker(data))
            except FrameError as exc:
                log.warning("dropped a malformed frame from the supervisor: %s", exc)

    def close(self, linger_ms: int = 0) -> None:
        """Close the socket before the context; a bounded linger lets last frames out."""
        self.socket.close(linger=linger_ms)
        self._ctx.term()
