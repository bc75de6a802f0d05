"""Real HTTP endpoints on 127.0.0.1 for the notification tests, each on its own thread.

``Recorder`` answers 204 to every POST and keeps each request with its arrival time;
``Hanging`` accepts connections and never answers (nor closes them); ``GzipBomb``
answers a small gzip body that decodes to hundreds of MiB.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import zlib
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Arrival:
    """One request as it arrived."""

    monotonic: float
    wall: float
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    raw: bytes


class Recorder:
    """An HTTP server recording POSTs; use as a context manager."""

    def __init__(self) -> None:
        self.arrivals: list[Arrival] = []
        self._lock = threading.Lock()
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                arrival = Arrival(
                    time.monotonic(),
                    time.time(),
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    json.loads(raw),
                    raw,
                )
                with recorder._lock:
                    recorder.arrivals.append(arrival)
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/hook"

    def events(self) -> list[str]:
        with self._lock:
            return [a.body["event"] for a in self.arrivals]

    def of(self, event: str) -> Arrival:
        with self._lock:
            return next(a for a in self.arrivals if a.body["event"] == event)

    def __enter__(self) -> Recorder:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class Hanging:
    """A TCP listener that accepts and never answers; use as a context manager."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._sock.getsockname()[:2]
        return f"http://{host}:{port}/hang"

    @property
    def accepted(self) -> int:
        return len(self._held)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._held.append(conn)

    def __enter__(self) -> Hanging:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for conn in self._held:
            conn.close()
        self._sock.close()


def _gzip_bomb(decoded_bytes: int) -> bytes:
    """``decoded_bytes`` of zeros, gzipped (some 1/1000 of the size)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1024 * 1024)
    parts = [packer.compress(block) for _ in range(decoded_bytes // len(block))]
    return b"".join([*parts, packer.flush()])


class GzipBomb:
    """An HTTP server answering every POST 200 with a gzip body of ``decoded_bytes``
    (whatever encoding was asked); use as a context manager."""

    def __init__(self, decoded_bytes: int = 400 * 1024 * 1024) -> None:
        self.body = _gzip_bomb(decoded_bytes)
        self.posts: list[dict[str, str]] = []
        bomb = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                bomb.posts.append({k.lower(): v for k, v in self.headers.items()})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(bomb.body)))
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(bomb.body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/hook"

    def __enter__(self) -> GzipBomb:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
