"""A confined pane's network, from inside a real one started by the service: the
default (``network`` unset: ``["public"]``) reaches nothing of the host (its loopback
services, its abstract Unix sockets) and, through the HTTP proxy ``HTTPS_PROXY`` names,
no loopback, private, link-local or CGNAT address, nor a name that resolves to one; a
listed loopback destination is reached directly and through the proxy; a listed port
below 1024 starts and is reached, and the program holds no capability and keeps the full
user isolation (nobody inside, no nested user namespace); ``"host"`` says
what it exposes.

No traffic is ever sent to a non-loopback address: the proxy refuses those before it
connects (a public destination cannot be reached here; ``test_egress_proxy`` checks
the decision on public addresses without connecting).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp.client.client import Client

from protocol.egress import PROXY_INSIDE, PROXY_PORT
from tests.confine.echo import EchoServer
from tests.conftest import REPO, Tools, stdio_params
from tests.polling import apoll

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

PROBE = REPO / "tests" / "confine" / "net_probe.py"
SETTLE_S = 30
FORBIDDEN = "HTTP/1.1 403 Forbidden"


@dataclass
class Host:
    base: Path
    work: Path
    state: Path

    def env(self) -> dict[str, str]:
        return {
            "HOME": str(self.base / "home"),
            "XDG_RUNTIME_DIR": str(self.base / "run"),
            "PANEWARDEN_PROFILES": str(self.base / "profiles.json"),
            "PANEWARDEN_TOKEN_FILE": str(self.base / "token"),
            "PANEWARDEN_CONFINE": "on",
        }

    def profile(self, **fields: Any) -> None:
        """The one profile ``net``: the probe, confined, with ``fields`` on top (no
        ``network`` key unless given: the default a user gets)."""
        entry = {
            "name": "net",
            "argv": [sys.executable, str(PROBE)],
            "cwds": [str(self.work)],
            "confine": True,
            **fields,
        }
        (self.base / "profiles.json").write_text(json.dumps({"profiles": [entry]}))


@pytest.fixture
def host() -> Iterator[Host]:
    base = Path("/var/tmp") / f"pw-net-{secrets.token_hex(4)}"
    for name in ("home", "work", "state", "run"):
        (base / name).mkdir(parents=True, mode=0o700)
    (base / "token").write_text(secrets.token_hex(16) + "\n")
    found = Host(base, base / "work", base / "state")
    found.profile()
    try:
        yield found
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def abstract() -> Iterator[tuple[str, socket.socket]]:
    """An abstract Unix socket listening on the host (an X11 display, a bus)."""
    name = f"pw-abstract-{secrets.token_hex(4)}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind("\0" + name)
    sock.listen(8)
    sock.setblocking(False)
    try:
        yield name, sock
    finally:
        sock.close()


async def _probe(tools: Tools, host: Host, checks: dict[str, Any]) -> dict[str, str]:
    results = host.work / "results.json"
    results.unlink(missing_ok=True)
    (host.work / "checks.json").write_text(json.dumps(checks))
    await tools.call("start_pane", name="p", profile="net")
    assert await apoll(results.exists, SETTLE_S), "the probe wrote no results"
    return dict(json.loads(results.read_text()))


def _untouched(listener: socket.socket) -> bool:
    listener.setblocking(False)
    try:
        conn, _ = listener.accept()
    except BlockingIOError:
        return True
    conn.close()
    return False


async def test_the_default_network_reaches_nothing_of_the_host(
    host: Host, abstract: tuple[str, socket.socket]
) -> None:
    name, abstract_sock = abstract
    with EchoServer() as echo:
        async with Client(stdio_params(host.state, **host.env())) as client:
            tools = Tools(client)
            checks = {
                "loopback": ["tcp", f"127.0.0.1:{echo.port}"],
                "abstract": ["abstract", name],
                "https_proxy": ["env", "HTTPS_PROXY"],
                "http_proxy": ["env", "http_proxy"],
                "no_proxy": ["env", "NO_PROXY"],
                # Through the proxy: the host's loopback, by address and by a name that
                # resolves to it (resolved by the worker, checked on the address).
                "via_loopback": ["proxy", f"127.0.0.1:{echo.port}"],
                "via_localhost": ["proxy", f"localhost:{echo.port}"],
                "via_v6_loopback": ["proxy", f"[::1]:{echo.port}"],
                "via_metadata": ["proxy", "169.254.169.254:80"],
                "via_private": ["proxy", "10.0.0.1:443"],
                "via_cgnat": ["proxy", "100.64.0.1:443"],
                "via_ula": ["proxy", "[fd00::1]:443"],
                "via_mapped": ["proxy", f"[::ffff:127.0.0.1]:{echo.port}"],
                "via_unspecified": ["proxy", f"0.0.0.0:{echo.port}"],
                "get_loopback": ["get", f"http://127.0.0.1:{echo.port}/"],
            }
            seen = await _probe(tools, host, checks)
            status = await tools.call("get_status", name="p")
            await tools.call("remove_pane", name="p")
        assert echo.accepted == 0, "a connection from inside reached the host's loopback"
    assert _untouched(abstract_sock), "a connection from inside reached the abstract socket"
    assert seen["loopback"] == "ConnectionRefusedError:111", seen  # its own loopback
    assert seen["abstract"] == "ConnectionRefusedError:111", seen  # its own namespace
    proxy = f"http://{PROXY_INSIDE}:{PROXY_PORT}"
    assert seen["https_proxy"] == seen["http_proxy"] == f"ok:{proxy}", seen
    assert seen["no_proxy"] == "ok:localhost,127.0.0.1,::1", seen
    for check in checks:
        if check.startswith("via_"):
            assert seen[check] == f"ok:{FORBIDDEN}", (check, seen)
    assert seen["get_loopback"] == f"ok:{FORBIDDEN} | panewarden egress: not a public address\n"
    assert status["confined"] is True
    assert status["network"] == "list", status
    assert "public unicast addresses" in status["network_exposes"], status


async def test_a_listed_loopback_destination_is_reached_directly_and_through_the_proxy(
    host: Host,
) -> None:
    with EchoServer() as echo, socket.create_server(("127.0.0.1", 0)) as other:
        host.profile(network=["public", f"127.0.0.1:{echo.port}"])
        async with Client(stdio_params(host.state, **host.env())) as client:
            tools = Tools(client)
            checks = {
                "direct": ["tcp", f"127.0.0.1:{echo.port}"],
                "via_proxy": ["proxy", f"127.0.0.1:{echo.port}"],
                "other": ["proxy", f"127.0.0.1:{other.getsockname()[1]}"],
                "no_proxy": ["env", "no_proxy"],
            }
            seen = await _probe(tools, host, checks)
            await tools.call("remove_pane", name="p")
        assert _untouched(other)
    assert seen["direct"] == "ok:ping", seen
    assert seen["via_proxy"] == "ok:HTTP/1.1 200 Connection established | ping", seen
    assert seen["other"] == f"ok:{FORBIDDEN}", seen
    assert seen["no_proxy"] == "ok:localhost,127.0.0.1,::1", seen


async def test_a_listed_port_below_1024_starts_and_the_program_holds_no_capability(
    host: Host,
) -> None:
    # 127.0.0.2:443 on the host (we run as root): the listed destination itself.
    with EchoServer(("127.0.0.2", 443)) as echo, EchoServer() as unlisted:
        host.profile(network=[f"127.0.0.2:{echo.port}"])
        async with Client(stdio_params(host.state, **host.env())) as client:
            tools = Tools(client)
            checks = {
                "https": ["tcp", "127.0.0.2:443"],
                "caps": ["caps", ""],
                "uid": ["run", json.dumps(["id", "-u"])],
                "userns": ["run", json.dumps(["unshare", "-U", "true"])],
                # The network namespace the worker made is a new one: not the host's.
                "loopback": ["tcp", f"127.0.0.1:{unlisted.port}"],
            }
            seen = await _probe(tools, host, checks)
            status = await tools.call("get_status", name="p")
            await tools.call("remove_pane", name="p")
    assert status["lifecycle"] == "running", status
    assert seen["https"] == "ok:ping", seen
    zero = "0000000000000000"
    want = f"CapInh:{zero} CapPrm:{zero} CapEff:{zero} CapBnd:{zero} CapAmb:{zero} NoNewPrivs:1"
    assert seen["caps"] == f"ok:{want}", seen
    # The user isolation every other confined pane has (design §13 item 51).
    assert seen["uid"].startswith("ok:rc=0 65534"), seen
    assert seen["userns"].startswith("ok:rc=1 "), seen
    assert "No space left on device" in seen["userns"], seen  # max_user_namespaces = 0
    assert seen["loopback"] == "ConnectionRefusedError:111", seen
    assert unlisted.accepted == 0, "a connection from inside reached the host's loopback"


async def test_network_host_is_an_explicit_choice_and_get_status_says_what_it_exposes(
    host: Host, abstract: tuple[str, socket.socket]
) -> None:
    name, _ = abstract
    host.profile(network="host")
    async with Client(stdio_params(host.state, **host.env())) as client:
        tools = Tools(client)
        seen = await _probe(tools, host, {"abstract": ["abstract", name]})
        status = await tools.call("get_status", name="p")
        await tools.call("remove_pane", name="p")
    assert seen["abstract"] == "ok:connected", seen
    assert status["network"] == "host", status
    exposes = status["network_exposes"]
    assert "loopback services" in exposes and "abstract Unix sockets" in exposes, status


def test_doctor_names_the_profiles_with_network_host_and_what_they_expose(host: Host) -> None:
    def doctor() -> str:
        env = {**os.environ, "PANEWARDEN_PROFILES": str(host.base / "profiles.json")}
        done = subprocess.run(
            [sys.executable, "-m", "supervisor", "doctor"],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return done.stdout

    assert "ok  network     confined panes have a network namespace of their own" in doctor()
    host.profile(network="host")
    line = next(line for line in doctor().splitlines() if line.startswith("--  network"))
    assert '"host" (net)' in line and "loopback services" in line, line
    assert "abstract Unix sockets" in line, line
