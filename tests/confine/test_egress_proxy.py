"""The egress proxy alone, over real sockets: what it lets through, what it refuses, and
that it holds nothing back once stopped."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import select
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from paneworker.confine.addresses import own_addresses, refusal
from paneworker.confine.egress_proxy import (
    CHUNK,
    HEADER_LIMIT,
    WARNINGS_PER_WINDOW,
    EgressProxy,
    public_only,
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


# -- "public": the address check, the decision, DNS rebinding, the HTTP proxy ---------

REFUSED_ADDRESSES = [
    "127.0.0.1",
    "127.5.5.5",
    "::1",
    "10.0.0.1",
    "172.16.0.1",
    "192.168.1.1",
    "169.254.169.254",
    "fe80::1",
    "100.64.0.1",
    "fc00::1",
    "fd12:3456::1",
    "224.0.0.1",
    "239.255.255.250",
    "ff02::1",
    "0.0.0.0",
    "::",
    "255.255.255.255",
    "240.0.0.1",
    "192.0.2.1",
    "198.51.100.1",
    "203.0.113.1",
    "198.18.0.1",
    "2001:db8::1",
    "::ffff:127.0.0.1",
    "::ffff:10.0.0.1",
    "64:ff9b::a00:1",
    "2002:a00:1::1",
]


@pytest.mark.parametrize("address", REFUSED_ADDRESSES)
def test_non_public_addresses_are_refused(address: str) -> None:
    assert refusal(address) is not None


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "151.101.1.1"])
def test_public_unicast_addresses_are_accepted_unless_the_hosts_own(address: str) -> None:
    assert refusal(address) is None
    assert refusal(address, own={address}) == "the host's own address"


def test_the_decision_keeps_only_the_public_addresses_a_name_resolved_to() -> None:
    mixed = [
        (socket.AF_INET, ("127.0.0.1", 443)),
        (socket.AF_INET, ("8.8.8.8", 443)),
        (socket.AF_INET6, ("fd00::1", 443)),
    ]
    assert public_only(mixed, frozenset()) == [(socket.AF_INET, ("8.8.8.8", 443))]
    with pytest.raises(Exception, match="not a public address"):
        public_only(mixed, frozenset({"8.8.8.8"}))


def test_the_machines_own_addresses_are_known() -> None:
    assert "127.0.0.1" in own_addresses()


def test_a_name_that_resolves_to_loopback_is_refused_with_public(
    sockdir: str, echo: EchoServer
) -> None:
    # The worker resolves the name once and checks the address it would connect to.
    proxy = _proxy(sockdir, public=True, resolve={"rebind.test": "127.0.0.1"})
    try:
        for header in (f"CONNECT rebind.test:{echo.port}\n", f"CONNECT 127.0.0.1:{echo.port}\n"):
            with _open(proxy.path, header.encode()) as sock:
                assert read_line(sock) == b"NO not a public address\n", header
        head = f"CONNECT rebind.test:{echo.port} HTTP/1.1\r\nHost: rebind.test\r\n\r\n"
        with _open(proxy.path, head.encode()) as sock:
            assert read_all(sock).startswith(b"HTTP/1.1 403 Forbidden\r\n")
    finally:
        proxy.stop()
    assert echo.accepted == 0


def test_without_public_an_unlisted_destination_is_not_allowed(
    sockdir: str, echo: EchoServer
) -> None:
    proxy = _proxy(sockdir)
    try:
        head = "CONNECT example.com:443 HTTP/1.1\r\n\r\n"
        with _open(proxy.path, head.encode()) as sock:
            reply = read_all(sock)
        assert reply.startswith(b"HTTP/1.1 403 Forbidden\r\n"), reply
        assert reply.endswith(b"panewarden egress: not allowed\n"), reply
    finally:
        proxy.stop()


def test_http_connect_to_a_listed_destination_is_carried(sockdir: str, echo: EchoServer) -> None:
    proxy = _proxy(sockdir, _dest(echo.port), public=True)
    try:
        head = f"CONNECT 127.0.0.1:{echo.port} HTTP/1.1\r\nHost: x\r\n\r\nearly"
        with _open(proxy.path, head.encode()) as sock:
            assert read_line(sock) == b"HTTP/1.1 200 Connection established\r\n"
            assert read_line(sock) == b"\r\n"
            sock.shutdown(socket.SHUT_WR)
            assert read_all(sock) == b"early"
    finally:
        proxy.stop()


def test_an_absolute_uri_request_goes_on_in_origin_form_with_connection_close(
    sockdir: str, echo: EchoServer
) -> None:
    proxy = _proxy(sockdir, _dest(echo.port), public=True)
    try:
        head = (
            f"POST http://127.0.0.1:{echo.port}/v1/x?y=1 HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{echo.port}\r\nProxy-Connection: keep-alive\r\n"
            "Proxy-Authorization: Basic eA==\r\nContent-Length: 4\r\n\r\nbody"
        )
        with _open(proxy.path, head.encode()) as sock:
            sock.shutdown(socket.SHUT_WR)
            echoed = read_all(sock)  # the echo server sends back what it was sent
    finally:
        proxy.stop()
    assert (
        echoed
        == (
            f"POST /v1/x?y=1 HTTP/1.1\r\nHost: 127.0.0.1:{echo.port}\r\nContent-Length: 4\r\n"
            "Connection: close\r\n\r\nbody"
        ).encode()
    )


@pytest.mark.parametrize(
    ("head", "status"),
    [
        ("GET /relative HTTP/1.1\r\n\r\n", b"400"),
        ("GET https://example.com/ HTTP/1.1\r\n\r\n", b"400"),
        ("CONNECT not a host HTTP/1.1\r\n\r\n", b"400"),
        ("CONNECT example.com:99999 HTTP/1.1\r\n\r\n", b"400"),
        ("CONNECT x:1 HTTP/1.1\r\nX: " + "a" * HEADER_LIMIT, b"431"),
    ],
)
def test_bad_http_requests_get_their_status(sockdir: str, head: str, status: bytes) -> None:
    proxy = _proxy(sockdir, public=True)
    try:
        with _open(proxy.path, head.encode()) as sock:
            assert read_line(sock).split(b" ")[1] == status
    finally:
        proxy.stop()


def test_start_egress_starts_no_thread_before_the_worker_forks(sockdir: str) -> None:
    """The worker forks its program after ``start_egress`` and before ``start``: until
    then the proxy runs no thread (one thread at that fork), and its socket listens."""
    launch = PaneLaunch(
        pane="p",
        agent="shell",
        argv=["true"],
        cwd="/",
        env={},
        cols=80,
        rows=24,
        egress_public=True,
        egress_socket=os.path.join(sockdir, "egress.sock"),
    )
    before = set(threading.enumerate())
    proxy = start_egress(launch)
    assert proxy is not None
    try:
        assert set(threading.enumerate()) == before
        queued = _open(proxy.path, b"CONNECT 127.0.0.1:1\n")  # waits in the backlog
        proxy.start()
        with queued:
            assert read_line(queued) == b"NO not a public address\n"
    finally:
        proxy.stop()


_FORK_COUNT = r"""
import json, os, sys, threading
import paneworker.procs.program as program
from paneworker.loop.worker import PaneWorker
from protocol.boot import BootRecord, PaneLaunch
from protocol import PROTOCOL_VERSION

seen = {}
spawn = program.PtyProcess.spawn

def counted(*args, **kwargs):
    seen["threads_at_fork"] = len(os.listdir("/proc/self/task"))
    return spawn(*args, **kwargs)

program.PtyProcess.spawn = counted
launch = PaneLaunch(
    pane="p", agent="generic", argv=["sleep", "30"], cwd="/", env={}, cols=80, rows=24,
    egress_public=True, egress_socket=sys.argv[1],
)
worker = PaneWorker(BootRecord(
    protocol_version=PROTOCOL_VERSION, instance="i", secret=b"s",
    endpoint="ipc:///nonexistent", launch=launch,
))
seen["egress_thread"] = any(t.name == "egress-proxy" for t in threading.enumerate())
print(json.dumps(seen), flush=True)
os.kill(worker.child_pid, 9)
os._exit(0)
"""


def test_the_worker_forks_its_program_with_one_thread_and_then_starts_the_proxy(
    sockdir: str,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _FORK_COUNT, os.path.join(sockdir, "egress.sock")],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S * 3,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {
        "threads_at_fork": 1,
        "egress_thread": True,
    }
