"""A confined program's network, end to end in a real Bubblewrap sandbox: the worker's
proxy outside, the forwarder and the program inside, no network but the sandbox's own
loopback.

The probe inside reports what it could reach as one JSON line: the allowed destination
(the echo comes back), a port with a real listener outside that is not on the list
(refused: the sandbox's loopback is its own), and the proxy's socket asked directly for
that forbidden destination (``NO``).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Sequence

import pytest

from paneworker.confine.egress_proxy import EgressProxy
from protocol.egress import forwarder_argv, hosts_file, plan
from supervisor.confinement.pane import FORWARDER_SCRIPT
from supervisor.confinement.policy import SandboxPolicy, bwrap_argv
from tests.confine.echo import EchoServer, socket_dir
from tests.conftest import REPO

BWRAP = shutil.which("bwrap")
INSIDE_SOCKET = "/tmp/.panewarden/egress.sock"
RUN_S = 60.0

pytestmark = [
    pytest.mark.skipif(BWRAP is None, reason="bwrap is not installed"),
    pytest.mark.timeout(120),
]

_PROBE = textwrap.dedent(
    """
    import json, socket, sys
    host, port, other, sock_path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    out = {}
    s = socket.create_connection((host, port), timeout=10)
    s.sendall(b"through the proxy")
    s.shutdown(socket.SHUT_WR)
    got = b""
    while data := s.recv(65536):
        got += data
    out["allowed"] = got.decode()
    try:
        socket.create_connection(("127.0.0.1", other), timeout=10)
        out["other"] = "connected"
    except OSError as exc:
        out["other"] = type(exc).__name__
    u = socket.socket(socket.AF_UNIX)
    u.settimeout(10)
    u.connect(sock_path)
    u.sendall(f"CONNECT 127.0.0.1:{other}\\n".encode())
    out["direct"] = u.recv(100).decode()
    print(json.dumps(out))
    """
)


@pytest.fixture
def sockdir() -> Iterator[str]:
    with socket_dir() as path:
        yield path


def _sandbox(proxy_socket: str, argv: list[str], extra: Sequence[str] = ()) -> list[str]:
    assert BWRAP is not None
    # This installation stays visible when it lies under /tmp (a clone there).
    policy = SandboxPolicy(
        cwd="/",
        network="none",
        visible=(sys.prefix, str(REPO)),
        sockets=((proxy_socket, INSIDE_SOCKET),),
    )
    full = bwrap_argv(BWRAP, policy, argv)
    # Extra mounts (the hosts file) go with the others, before the working directory.
    at = full.index("--chdir")
    return [*full[:at], *extra, *full[at:]]


def _run(argv: list[str]) -> dict[str, str]:
    done = subprocess.run(argv, capture_output=True, timeout=RUN_S)
    assert done.returncode == 0, done.stderr.decode()
    result: dict[str, str] = json.loads(done.stdout)
    return result


def test_only_the_listed_destination_is_reachable_from_inside(sockdir: str) -> None:
    with EchoServer() as echo, socket.create_server(("127.0.0.1", 0)) as other:
        other_port = other.getsockname()[1]
        dests = plan([f"127.0.0.1:{echo.port}"])
        proxy = EgressProxy(dests, os.path.join(sockdir, "egress.sock")).start()
        try:
            program = ["python3", "-c", _PROBE, "127.0.0.1", str(echo.port), str(other_port)]
            argv = [
                *forwarder_argv(sys.executable, FORWARDER_SCRIPT, dests, INSIDE_SOCKET),
                *program,
                INSIDE_SOCKET,
            ]
            result = _run(_sandbox(proxy.path, argv))
        finally:
            proxy.stop()
        # Nothing from inside ever reached the other listener.
        other.setblocking(False)
        with pytest.raises(BlockingIOError):
            other.accept()
    assert result == {
        "allowed": "through the proxy",
        "other": "ConnectionRefusedError",
        "direct": "NO not allowed\n",
    }


def test_a_named_destination_is_reached_through_the_sandbox_hosts_file(sockdir: str) -> None:
    with EchoServer() as echo, socket.create_server(("127.0.0.1", 0)) as other:
        dests = plan([f"example.test:{echo.port}"])
        assert dests[0].inside.startswith("127.100.")
        hosts = os.path.join(sockdir, "hosts")
        with open(hosts, "w") as f:
            f.write(hosts_file(dests))
        # No DNS here: the proxy is told where example.test is.
        proxy = EgressProxy(
            dests, os.path.join(sockdir, "egress.sock"), resolve={"example.test": "127.0.0.1"}
        ).start()
        try:
            program = ["python3", "-c", _PROBE, "example.test", str(echo.port)]
            program += [str(other.getsockname()[1]), INSIDE_SOCKET]
            argv = [
                *forwarder_argv(sys.executable, FORWARDER_SCRIPT, dests, INSIDE_SOCKET),
                *program,
            ]
            result = _run(_sandbox(proxy.path, argv, ["--ro-bind", hosts, "/etc/hosts"]))
        finally:
            proxy.stop()
    assert result["allowed"] == "through the proxy"
    assert result["other"] == "ConnectionRefusedError"
    assert result["direct"] == "NO not allowed\n"
