"""The forwarder as a real process, outside any sandbox: its exits on bad arguments and
failed binds, and its serving child (alive through ^C to the group, gone with the
program)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

from paneworker.confine.egress_proxy import EgressProxy
from paneworker.confine.forwarder import EXIT_BIND, EXIT_USAGE
from protocol.egress import PROXY_INSIDE, PROXY_PORT, Destination, forwarder_argv
from supervisor.confinement.pane import FORWARDER_SCRIPT
from tests.confine.echo import EchoServer, socket_dir
from tests.polling import poll

RUN_S = 30.0


@pytest.fixture
def sockdir() -> Iterator[str]:
    with socket_dir() as path:
        yield path


def _free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        port: int = sock.getsockname()[1]
    return port


def test_forwarder_argv_lists_every_destination() -> None:
    dests = [
        Destination("127.0.0.1", 8080, "127.0.0.1"),
        Destination("api.test", 443, "127.100.0.1"),
    ]
    assert forwarder_argv("/py", "/f.py", dests, "/tmp/s") == [
        "/py", "-I", "-S", "/f.py", "--socket", "/tmp/s",
        "--listen", "127.0.0.1:8080=127.0.0.1:8080",
        "--listen", "127.100.0.1:443=api.test:443",
        "--",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "args",
    [
        ["--socket", "/s", "--listen", "127.0.0.1:1=a:1"],  # no program
        ["--socket", "/s", "--listen", "nonsense", "--", "true"],
        ["--listen", "127.0.0.1:1=a:1", "--", "true"],  # no socket
        ["--bogus", "x", "--", "true"],
    ],
)
def test_bad_arguments_exit_with_usage(args: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-I", "-S", FORWARDER_SCRIPT, *args],
        capture_output=True,
        timeout=RUN_S,
    )
    assert done.returncode == EXIT_USAGE
    assert done.stderr.decode().startswith("panewarden forwarder: ")
    assert done.stderr.decode().count("\n") == 1


def test_a_failed_bind_exits_70_with_one_line_and_runs_nothing(tmp_path: os.PathLike[str]) -> None:
    marker = os.path.join(tmp_path, "ran")
    taken = socket.create_server(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    dests = [Destination("127.0.0.1", port, "127.0.0.1")]
    try:
        done = subprocess.run(
            [
                *forwarder_argv(sys.executable, FORWARDER_SCRIPT, dests, "/nonexistent"),
                "touch",
                marker,
            ],
            capture_output=True,
            timeout=RUN_S,
        )
    finally:
        taken.close()
    assert done.returncode == EXIT_BIND
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 1 and f"cannot listen on 127.0.0.1:{port}" in lines[0], lines
    assert not os.path.exists(marker)


def test_a_program_that_cannot_run_exits_127() -> None:
    done = subprocess.run(
        [*forwarder_argv(sys.executable, FORWARDER_SCRIPT, [], "/s"), "/nonexistent/program"],
        capture_output=True,
        timeout=RUN_S,
    )
    assert done.returncode == 127
    assert b"cannot run" in done.stderr


# The program: it is the forwarder's process (same pid), its child serves the listener.
# It sends ^C to its whole group, as the terminal would, then connects through.
_PROGRAM = textwrap.dedent(
    """
    import json, os, signal, socket, sys
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    kids = open(f"/proc/self/task/{os.getpid()}/children").read().split()
    os.killpg(0, signal.SIGINT)
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
    s.sendall(b"ping")
    s.shutdown(socket.SHUT_WR)
    got = b""
    while data := s.recv(100):
        got += data
    print(json.dumps({"pid": os.getpid(), "kids": kids, "got": got.decode()}))
    """
)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_the_child_serves_through_sigint_and_dies_with_the_program(sockdir: str) -> None:
    with EchoServer() as echo:
        port = _free_port()
        # Inside, the program's 127.0.0.1:port is carried to the echo server's port.
        dests = [Destination("127.0.0.1", echo.port, "127.0.0.1")]
        proxy = EgressProxy(dests, os.path.join(sockdir, "egress.sock")).start()
        argv = forwarder_argv(sys.executable, FORWARDER_SCRIPT, dests, proxy.path)
        argv[argv.index("--listen") + 1] = f"127.0.0.1:{port}=127.0.0.1:{echo.port}"
        try:
            proc = subprocess.Popen(
                [*argv, sys.executable, "-c", _PROGRAM, str(port)],
                stdout=subprocess.PIPE,
                start_new_session=True,  # its ^C must not reach pytest's group
            )
            out, _ = proc.communicate(timeout=RUN_S)
        finally:
            proxy.stop()
    assert proc.returncode == 0
    report = json.loads(out)
    assert report["pid"] == proc.pid  # exec'd in place: the pane's pid is the program's
    assert report["got"] == "ping"
    assert len(report["kids"]) == 1
    child = int(report["kids"][0])
    try:
        poll(lambda: _gone(child), RUN_S, what=f"the forwarder's child {child} to die")
    finally:
        if not _gone(child):
            os.kill(child, signal.SIGKILL)


def test_forwarder_argv_with_public_adds_the_http_proxy_listener() -> None:
    dests = [Destination("127.0.0.1", 8080, "127.0.0.1")]
    assert forwarder_argv("/py", "/f.py", dests, "/tmp/s", public=True) == [
        "/py", "-I", "-S", "/f.py", "--socket", "/tmp/s",
        "--proxy", f"{PROXY_INSIDE}:{PROXY_PORT}",
        "--listen", "127.0.0.1:8080=127.0.0.1:8080",
        "--",
    ]  # fmt: skip


def test_a_bad_proxy_argument_exits_with_usage() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            FORWARDER_SCRIPT,
            "--socket",
            "/s",
            "--proxy",
            "x",
            "--",
            "true",
        ],
        capture_output=True,
        timeout=RUN_S,
    )
    assert done.returncode == EXIT_USAGE, done.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs capabilities to drop")
def test_the_program_holds_no_capability_whatever_the_forwarder_had() -> None:
    # Run as root outside any sandbox: the forwarder holds every capability, and drops
    # them all (bounding and ambient sets too) before it runs the program.
    program = [sys.executable, "-c", "print(open('/proc/self/status').read())"]
    done = subprocess.run(
        [*forwarder_argv(sys.executable, FORWARDER_SCRIPT, [], "/s"), *program],
        capture_output=True,
        text=True,
        timeout=RUN_S,
    )
    assert done.returncode == 0, done.stderr
    fields = dict(line.split(":\t", 1) for line in done.stdout.splitlines() if ":\t" in line)
    for name in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert fields[name].strip() == "0000000000000000", (name, fields[name])
    assert fields["NoNewPrivs"].strip() == "1"
