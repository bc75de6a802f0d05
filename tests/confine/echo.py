"""Real TCP servers and a short socket directory for the egress tests.

``EchoServer`` sends back what it reads and half-closes when its client does;
``SinkServer`` accepts and never reads (to see that the proxy holds back a writer).
Both run a thread per connection and join every thread when closed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from types import TracebackType
from typing import Self

JOIN_S = 10.0


class _Server:
    def __init__(self, address: tuple[str, int] = ("127.0.0.1", 0)) -> None:
        self.listener = socket.create_server(address)
        self.port: int = self.listener.getsockname()[1]
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._handle, args=(conn,), daemon=True)
            with self._lock:
                self._conns.append(conn)
                self._threads.append(thread)
            thread.start()

    @property
    def accepted(self) -> int:
        """How many connections it has accepted."""
        with self._lock:
            return len(self._conns)

    def _handle(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        # shutdown() wakes the accept (close() alone would not).
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self._accepting.join(JOIN_S)
        with self._lock:
            conns, threads = list(self._conns), list(self._threads)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for thread in threads:
            thread.join(JOIN_S)
        for conn in conns:
            conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class EchoServer(_Server):
    def _handle(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := conn.recv(65536):
                conn.sendall(data)
            conn.shutdown(socket.SHUT_WR)
        conn.close()


class SinkServer(_Server):
    """Accepts and reads nothing until closed."""

    def __init__(self) -> None:
        self._closed = threading.Event()
        super().__init__()

    def _handle(self, conn: socket.socket) -> None:
        self._closed.wait(JOIN_S * 6)

    def close(self) -> None:
        self._closed.set()
        super().close()


@contextlib.contextmanager
def socket_dir() -> Iterator[str]:
    """A 0700 directory with a short path (AF_UNIX paths are limited to 107 bytes)."""
    path = tempfile.mkdtemp(prefix="pw-egress-", dir="/tmp")
    os.chmod(path, 0o700)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def read_line(sock: socket.socket, limit: int = 256) -> bytes:
    """One line from ``sock`` (with its newline), a byte at a time; b"" at EOF."""
    line = b""
    while not line.endswith(b"\n") and len(line) < limit:
        byte = sock.recv(1)
        if not byte:
            break
        line += byte
    return line


def read_all(sock: socket.socket) -> bytes:
    chunks = []
    while data := sock.recv(65536):
        chunks.append(data)
    return b"".join(chunks)


def ended(sock: socket.socket) -> bool:
    """True when the peer has closed: EOF, or a reset (a Unix socket closed with bytes
    of ours unread resets)."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
