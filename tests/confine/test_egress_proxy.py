"""The egress proxy alone, over real sockets: what it lets through, what it refuses, and
that it holds nothing back once stopped."""

from __future__ import annotations

import hashlib
import logging
import os
import select
import socket
import stat
import threading
import time
from collections.abc import Iterator

import pytest

from paneworker.confine.egress_proxy import (
    CHUNK,
    HEADER_LIMIT,
    WARNINGS_PER_WINDOW,
    EgressProxy,
    start_egress,
)
from protocol.boot import PaneLaunch
from protocol.egress import Destination
from tests.confine.echo import EchoServer, SinkServer, ended, read_all, read_line, socket_dir
from tests.polling import poll

TIMEOUT_S = 10.0


@pytest.fixture
def sockdir() -> Iterator[str]:
    with socket_dir() as path:
        yield path


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    with EchoServer() as server:
        yield server


def _dest(port: int) -> Destination:
    return Destination("127.0.0.1", port, "127.0.0.1")


def _open(path: str, header: bytes) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(TIMEOUT_S)
    sock.connect(path)
    if header:
        sock.sendall(header)
    return sock


def _proxy(sockdir: str, *dests: Destination, **kw: object) -> EgressProxy:
    proxy = EgressProxy(list(dests), os.path.join(sockdir, "egress.sock"), **kw)  # type: ignore[arg-type]
    return proxy.start()


def test_allowed_destination_is_carried_both_ways_with_half_close(
    sockdir: str, echo: EchoServer
) -> None:
    proxy = _proxy(sockdir, _dest(echo.port))
    try:
        mode = os.stat(proxy.path).st_mode
        assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
        with _open(proxy.path, f"CONNECT 127.0.0.1:{echo.port}\n".encode()) as sock:
            assert read_line(sock) == b"OK\n"
            sock.sendall(b"hello")
            assert sock.recv(5) == b"hello"
            # Half-close: the echo still comes back after our side has finished writing.
            sock.sendall(b" world")
            sock.shutdown(socket.SHUT_WR)
            assert read_all(sock) == b" world"
    finally:
        proxy.stop()


def test_bytes_sent_with_the_header_are_not_lost(sockdir: str, echo: EchoServer) -> None:
    proxy = _proxy(sockdir, _dest(echo.port))
    try:
        with _open(proxy.path, f"CONNECT 127.0.0.1:{echo.port}\nearly".encode()) as sock:
            assert read_line(sock) == b"OK\n"
            sock.shutdown(socket.SHUT_WR)
            assert read_all(sock) == b"early"
    finally:
        proxy.stop()


def test_a_large_transfer_passes_intact(sockdir: str, echo: EchoServer) -> None:
    payload = os.urandom(8 * 1024 * 1024 + 123)
    proxy = _proxy(sockdir, _dest(echo.port))
    try:
        with _open(proxy.path, f"CONNECT 127.0.0.1:{echo.port}\n".encode()) as sock:
            assert read_line(sock) == b"OK\n"

            def send() -> None:
                sock.sendall(payload)
                sock.shutdown(socket.SHUT_WR)

            sender = threading.Thread(target=send)
            sender.start()
            got = read_all(sock)
            sender.join(TIMEOUT_S)
        assert len(got) == len(payload)
        assert hashlib.sha256(got).digest() == hashlib.sha256(payload).digest()
    finally:
        proxy.stop()


def test_a_writer_is_held_back_when_the_destination_does_not_read(sockdir: str) -> None:
    with SinkServer() as sink:
        proxy = _proxy(sockdir, _dest(sink.port))
        try:
            with _open(proxy.path, f"CONNECT 127.0.0.1:{sink.port}\n".encode()) as sock:
                assert read_line(sock) == b"OK\n"
                sock.setblocking(False)
                block = b"x" * CHUNK
                sent = 0
                # Write while the socket becomes writable within a second: it stops
                # when the kernel buffers and the proxy's one chunk are full.
                while sent < 256 * 1024 * 1024:
                    _, writable, _ = select.select([], [sock], [], 1.0)
                    if not writable:
                        break
                    try:
                        sent += sock.send(block)
                    except BlockingIOError:
                        continue
        finally:
            proxy.stop()
    # Kernel buffers on both legs (a few MiB of TCP autotuning) plus one chunk; an
    # unbounded proxy would have taken all 256 MiB.
    assert sent < 48 * 1024 * 1024, sent


def test_a_destination_not_on_the_list_is_refused_and_logged(
    sockdir: str, echo: EchoServer, caplog: pytest.LogCaptureFixture
) -> None:
    other = socket.create_server(("127.0.0.1", 0))
    other_port = other.getsockname()[1]
    long_name = "a" * 200 + ".example"
    proxy = _proxy(sockdir, _dest(echo.port))
    caplog.set_level(logging.WARNING, logger="paneworker.confine.egress_proxy")
    try:
        for header, answer in [
            (f"CONNECT 127.0.0.1:{other_port}\n", b"NO not allowed\n"),
            (f"CONNECT localhost:{echo.port}\n", b"NO not allowed\n"),
            (f"CONNECT {long_name}:{echo.port}\n", b"NO not allowed\n"),
            (f"CONNECT 127.0.0.1:{echo.port}x\n", b"NO bad destination\n"),
            (f"GET / HTTP/1.1\nHost: 127.0.0.1:{echo.port}\n\n", b"NO bad header\n"),
        ]:
            with _open(proxy.path, header.encode()) as sock:
                assert read_line(sock) == answer, header
                assert ended(sock)
        # The listener outside was never connected to.
        other.setblocking(False)
        with pytest.raises(BlockingIOError):
            other.accept()
    finally:
        proxy.stop()
        other.close()
    refusals = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"egress refused 127.0.0.1:{other_port}: not allowed" in refusals
    clipped = f"{long_name}:{echo.port}"[:64]
    assert f"egress refused {clipped}: not allowed" in refusals


def test_an_allowed_destination_that_is_down_gets_the_reason(sockdir: str) -> None:
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    proxy = _proxy(sockdir, _dest(port))
    try:
        with _open(proxy.path, f"CONNECT 127.0.0.1:{port}\n".encode()) as sock:
            assert read_line(sock) == b"NO connection refused\n"
            assert ended(sock)
    finally:
        proxy.stop()


def test_a_header_too_long_is_dropped(sockdir: str, echo: EchoServer) -> None:
    proxy = _proxy(sockdir, _dest(echo.port))
    try:
        with _open(proxy.path, b"CONNECT " + b"a" * HEADER_LIMIT) as sock:
            assert read_line(sock) == b"NO header too long\n"
            assert ended(sock)
        # Exactly at the limit with its newline still counts as too long.
        line = f"CONNECT 127.0.0.1:{echo.port}".encode()
        with _open(proxy.path, line + b" " * (HEADER_LIMIT - len(line)) + b"\n") as sock:
            assert read_line(sock) == b"NO header too long\n"
    finally:
        proxy.stop()


def test_a_header_too_slow_is_dropped(sockdir: str, echo: EchoServer) -> None:
    proxy = _proxy(sockdir, _dest(echo.port), header_timeout_s=0.3)
    try:
        started = time.monotonic()
        with _open(proxy.path, b"CONNECT 127.0") as sock:
            assert read_line(sock) == b"NO header timeout\n"
            assert ended(sock)
        assert time.monotonic() - started < 5.0
    finally:
        proxy.stop()


def test_connections_beyond_the_bound_are_refused_busy(sockdir: str, echo: EchoServer) -> None:
    proxy = _proxy(sockdir, _dest(echo.port), max_connections=2)
    held = [_open(proxy.path, b"") for _ in range(2)]
    try:
        with _open(proxy.path, b"") as sock:
            assert read_line(sock) == b"NO busy\n"
        # One ends: its place is free again.
        held.pop().close()

        def admitted() -> bool:
            with _open(proxy.path, f"CONNECT 127.0.0.1:{echo.port}\n".encode()) as sock:
                return read_line(sock) == b"OK\n"

        poll(admitted, TIMEOUT_S, what="a place after one connection ended")
    finally:
        for sock in held:
            sock.close()
        proxy.stop()


def _fds() -> set[str]:
    """This process's open fds, each as ``N -> what``."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.add(f"{fd} -> {os.readlink(f'/proc/self/fd/{fd}')}")
        except FileNotFoundError:
            continue  # the listing's own fd
    return out


def test_stop_leaves_no_fd_thread_or_socket_file(sockdir: str, echo: EchoServer) -> None:
    before_fds = _fds()
    before_threads = set(threading.enumerate())
    proxy = _proxy(sockdir, _dest(echo.port))
    # Connections in every phase: splicing, waiting for a header, and refused.
    splicing = _open(proxy.path, f"CONNECT 127.0.0.1:{echo.port}\n".encode())
    assert read_line(splicing) == b"OK\n"
    waiting = _open(proxy.path, b"CONNECT")
    proxy.stop()
    proxy.stop()  # idempotent
    # Our ends see the proxy's ends close.
    assert read_all(splicing) == b""
    assert ended(waiting)
    splicing.close()
    waiting.close()
    assert not os.path.exists(proxy.path)
    # The echo server's end closes when it sees the proxy's close.
    poll(lambda: _fds() == before_fds, TIMEOUT_S)
    assert _fds() == before_fds, f"left open: {sorted(_fds() - before_fds)}"
    poll(lambda: set(threading.enumerate()) == before_threads, TIMEOUT_S, what="threads of before")


def test_start_egress_is_none_without_destinations(sockdir: str, echo: EchoServer) -> None:
    base = PaneLaunch(pane="p", agent="shell", argv=["true"], cwd="/", env={}, cols=80, rows=24)
    assert start_egress(base) is None
    path = os.path.join(sockdir, "egress.sock")
    launch = PaneLaunch(
        pane="p",
        agent="shell",
        argv=["true"],
        cwd="/",
        env={},
        cols=80,
        rows=24,
        egress=[_dest(echo.port)],
        egress_socket=path,
    )
    proxy = start_egress(launch)
    assert proxy is not None
    proxy.start()
    try:
        with _open(path, f"CONNECT 127.0.0.1:{echo.port}\n".encode()) as sock:
            assert read_line(sock) == b"OK\n"
    finally:
        proxy.stop()


def test_refusal_warnings_are_capped_per_window(
    sockdir: str, echo: EchoServer, caplog: pytest.LogCaptureFixture
) -> None:
    proxy = _proxy(sockdir, _dest(echo.port))
    caplog.set_level(logging.WARNING, logger="paneworker.confine.egress_proxy")
    try:
        for _ in range(WARNINGS_PER_WINDOW + 5):
            with _open(proxy.path, b"CONNECT 127.0.0.1:1\n") as sock:
                assert read_line(sock) == b"NO not allowed\n"
    finally:
        proxy.stop()
    refusals = [r for r in caplog.records if r.getMessage().startswith("egress refused")]
    assert len(refusals) == WARNINGS_PER_WINDOW
