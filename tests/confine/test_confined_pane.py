"""A confined pane, from inside: a probe program tries each forbidden thing and reports
what the kernel said. The service's files sit outside /tmp (``/var/tmp``, as under a
systemd ``XDG_RUNTIME_DIR``), so hiding them is what keeps them out of reach, not the
private /tmp."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from mcp.client.client import Client

from protocol.timing import ORPHAN_AFTER_S
from tests.conftest import REPO, Tools, stdio_params
from tests.faults import CLIENT_GONE, supervisor_of
from tests.polling import apoll

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

PROBE = REPO / "tests" / "confine" / "probe.py"
SETTLE_S = 30


@dataclass
class Host:
    base: Path
    home: Path
    work: Path
    other: Path
    state: Path
    runtime: Path
    token: Path

    def env(self, **extra: str) -> dict[str, str]:
        return {
            "HOME": str(self.home),
            "XDG_RUNTIME_DIR": str(self.runtime),
            "PANEWARDEN_PROFILES": str(self.base / "profiles.json"),
            "PANEWARDEN_TOKEN_FILE": str(self.token),
            "PANEWARDEN_CONFINE": "on",
            **extra,
        }


@pytest.fixture
def host() -> Iterator[Host]:
    base = Path("/var/tmp") / f"pw-confine-{secrets.token_hex(4)}"
    dirs = {name: base / name for name in ("home", "work", "other", "state", "run")}
    for path in dirs.values():
        path.mkdir(parents=True, mode=0o700)
    (dirs["home"] / ".ssh").mkdir()
    (dirs["home"] / ".ssh" / "id_rsa").write_text("KEY\n")
    token = base / "token"
    token.write_text(secrets.token_hex(16) + "\n")
    token.chmod(0o600)
    profiles = {
        "profiles": [
            {
                "name": name,
                "argv": [sys.executable, str(PROBE)],
                "cwds": [str(dirs["work"])],
                "confine": True,
                "network": network,
            }
            for name, network in (("probe", "none"), ("probe-host", "host"))
        ]
    }
    (base / "profiles.json").write_text(json.dumps(profiles))
    try:
        yield Host(
            base,
            dirs["home"],
            dirs["work"],
            dirs["other"],
            dirs["state"],
            dirs["run"],
            token,
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def echo_port() -> Iterator[int]:
    """A loopback TCP server on the host that answers each connection with ``pong``."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"pong\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        server.close()


def _runtime_sockets(runtime: Path) -> list[Path]:
    return sorted(runtime.rglob("*.ipc")) + sorted(runtime.rglob("ctl*"))


def _marked(marker: str) -> list[int]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if marker in (proc.info["cmdline"] or []):
            found.append(proc.pid)
    return found


async def _probe(tools: Tools, host: Host, profile: str, checks: dict[str, Any]) -> dict[str, str]:
    results = host.work / "results.json"
    results.unlink(missing_ok=True)
    (host.work / "checks.json").write_text(json.dumps(checks))
    await tools.call("start_pane", name="p", profile=profile)
    assert await apoll(results.exists, SETTLE_S), "the probe wrote no results"
    return dict(json.loads(results.read_text()))


async def test_a_confined_pane_reaches_nothing_of_the_service_or_the_host(
    host: Host, echo_port: int
) -> None:
    marker = f"--pw-daemon-{secrets.token_hex(4)}"
    async with Client(stdio_params(host.state, **host.env())) as client:
        tools = Tools(client)
        # A first pane tells the supervisor's pid (its worker's parent, or its template's).
        first = await tools.call("start_pane", name="first", profile="probe-host")
        supervisor = supervisor_of(first["pane"]["worker_pid"])
        assert supervisor is not None
        await tools.call("remove_pane", name="first")
        sockets = _runtime_sockets(host.runtime)
        assert sockets, "the service made no sockets under XDG_RUNTIME_DIR"
        checks = {
            "token": ["read", str(host.token)],
            "state": ["list", str(host.state)],
            "profiles": ["read", str(host.base / "profiles.json")],
            "ssh_key": ["read", str(host.home / ".ssh" / "id_rsa")],
            "home_write": ["write", str(host.home / "planted")],
            "other_write": ["write", str(host.other / "planted")],
            "cwd_write": ["write", str(host.work / "mine.txt")],
            "supervisor": ["signal", str(supervisor)],
            "pids": ["pids", ""],
            "loopback": ["connect_tcp", f"127.0.0.1:{echo_port}"],
            "ctl_inside": ["connect_unix", "/tmp/.panewarden/ctl.sock"],
            "daemon": ["daemon", marker],
            **{f"socket {path.name}": ["connect_unix", str(path)] for path in sockets},
        }
        seen = await _probe(tools, host, "probe", checks)
        status = await tools.call("get_status", name="p")
        assert status["confined"] is True
        listed = (await tools.call("list_panes"))["panes"]
        assert [p["confined"] for p in listed] == [True]
        denied = "PermissionError:13"
        assert seen["token"] == denied, seen
        assert seen["state"] == denied, seen
        assert seen["profiles"] == denied, seen
        assert seen["ssh_key"] == denied, seen
        assert seen["home_write"] == "OSError:30", seen  # EROFS
        assert seen["other_write"] == "OSError:30", seen
        assert seen["cwd_write"] == "ok:5", seen
        assert seen["supervisor"] == "ProcessLookupError:3", seen  # not in its PID namespace
        assert seen["pids"].startswith("ok:") and int(seen["pids"][3:]) <= 5, seen
        assert seen["loopback"] == "ConnectionRefusedError:111", seen  # its own loopback
        assert seen["ctl_inside"] == "ok:connected", seen
        assert seen["env_ctl"] == "/tmp/.panewarden/ctl.sock", seen
        for path in sockets:
            assert seen[f"socket {path.name}"] == denied, (path, seen)
        assert seen["daemon"] == "ok:started", seen
        assert _marked(marker), "the probe's daemon is not running"
        await tools.call("remove_pane", name="p")
        # The daemon left the pane's session; it died with the sandbox's PID namespace.
        assert await apoll(lambda: not _marked(marker), 10), "the daemon outlived its pane"
        assert not (host.home / "planted").exists()


async def test_network_host_reaches_the_loopback_and_off_confines_nothing(
    host: Host, echo_port: int
) -> None:
    async with Client(stdio_params(host.state, **host.env())) as client:
        tools = Tools(client)
        seen = await _probe(
            tools, host, "probe-host", {"loopback": ["connect_tcp", f"127.0.0.1:{echo_port}"]}
        )
        assert seen["loopback"] == "ok:pong", seen
        await tools.call("remove_pane", name="p")
    # PANEWARDEN_CONFINE=off does not override a profile's `confine: true`.
    async with Client(stdio_params(host.state, **host.env(PANEWARDEN_CONFINE="off"))) as client:
        tools = Tools(client)
        seen = await _probe(tools, host, "probe", {"token": ["read", str(host.token)]})
        assert seen["token"] == "PermissionError:13", seen
        assert (await tools.call("get_status", name="p"))["confined"] is True
        await tools.call("remove_pane", name="p")


async def test_confine_true_is_refused_on_a_host_that_cannot_and_auto_runs_unconfined(
    host: Host,
) -> None:
    # No bwrap on the service's PATH: this host "cannot build the sandbox".
    env = host.env(PATH="/nonexistent", PANEWARDEN_CONFINE="auto")
    async with Client(stdio_params(host.state, **env)) as client:
        tools = Tools(client)
        refused = await tools.error("start_pane", name="p", profile="probe")
        assert refused["code"] == "sandbox_unavailable", refused
        assert "bwrap" in refused["message"], refused
        assert (await tools.call("list_panes"))["panes"] == []
    profiles = json.loads((host.base / "profiles.json").read_text())
    for profile in profiles["profiles"]:
        profile["confine"] = "auto"
    (host.base / "profiles.json").write_text(json.dumps(profiles))
    async with Client(stdio_params(host.state, **env)) as client:
        tools = Tools(client)
        seen = await _probe(tools, host, "probe", {"token": ["read", str(host.token)]})
        assert seen["token"].startswith("ok:"), seen  # unconfined: the old trust model
        assert (await tools.call("get_status", name="p"))["confined"] is False
        await tools.call("remove_pane", name="p")


def test_doctor_says_whether_panes_can_be_confined() -> None:
    def doctor(**env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "supervisor", "doctor"],
            env={**os.environ, **env},
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    works = doctor()
    assert works.returncode == 0, works.stdout
    assert "ok  confinement panes are confined" in works.stdout, works.stdout
    without = doctor(PATH="/nonexistent")
    assert without.returncode == 0, without.stdout  # auto: optional
    assert "--  confinement panes run UNCONFINED" in without.stdout, without.stdout
    required = doctor(PATH="/nonexistent", PANEWARDEN_CONFINE="on")
    assert required.returncode == 1, required.stdout
    assert "BAD confinement" in required.stdout, required.stdout


async def test_a_network_list_reaches_its_one_destination_and_nothing_else(
    host: Host, echo_port: int
) -> None:
    other = socket.create_server(("127.0.0.1", 0))  # listening, but not on the list
    try:
        profiles = json.loads((host.base / "profiles.json").read_text())
        profiles["profiles"][0]["network"] = [f"127.0.0.1:{echo_port}"]
        (host.base / "profiles.json").write_text(json.dumps(profiles))
        async with Client(stdio_params(host.state, **host.env())) as client:
            tools = Tools(client)
            checks = {
                "allowed": ["connect_tcp", f"127.0.0.1:{echo_port}"],
                "other": ["connect_tcp", f"127.0.0.1:{other.getsockname()[1]}"],
                "egress_direct": ["connect_unix", "/tmp/.panewarden/egress.sock"],
                "token": ["read", str(host.token)],
            }
            seen = await _probe(tools, host, "probe", checks)
            assert seen["allowed"] == "ok:pong", seen
            assert seen["other"] == "ConnectionRefusedError:111", seen
            assert seen["egress_direct"] == "ok:connected", seen  # the proxy checks each one
            assert seen["token"] == "PermissionError:13", seen
            await tools.call("remove_pane", name="p")
    finally:
        other.close()


TERM_PROBE = REPO / "tests" / "confine" / "term_probe.py"


async def test_a_confined_program_keeps_its_terminal_and_gets_its_own_ctrl_c(
    host: Host,
) -> None:
    profiles = {
        "profiles": [
            {
                "name": "term",
                "argv": [sys.executable, str(TERM_PROBE)],
                "cwds": [str(host.work)],
                "confine": True,
                "cols": 100,
                "rows": 30,
            }
        ]
    }
    (host.base / "profiles.json").write_text(json.dumps(profiles))
    async with Client(stdio_params(host.state, **host.env())) as client:
        tools = Tools(client)
        await tools.call("start_pane", name="t", profile="term")
        idle = await tools.wait("t", until=["idle"])
        assert idle["source"] == "osc7501", idle
        screen = (await tools.call("read_output", name="t"))["text"]
        for line in ("size 30 100", "tty writable", "foreground yes", "query answered"):
            assert line in screen, screen
        await tools.call("interrupt_pane", name="t")
        got = await tools.call("wait_output", name="t", pattern="got INT", timeout_s=10)
        assert got["matched"], screen
        # ^C reached the program only: the sandbox around it is still there.
        assert (await tools.call("get_status", name="t"))["lifecycle"] == "running"
        await tools.call("interrupt_pane", name="t")
        screen = (await tools.call("read_output", name="t"))["text"]
        assert (await tools.call("get_status", name="t"))["lifecycle"] == "running", screen
        await tools.call("remove_pane", name="t")


async def _confined_daemon(tools: Tools, host: Host, marker: str) -> dict[str, Any]:
    """A confined probe pane that double-forked a setsid daemon; the pane's PaneInfo."""
    await _probe(tools, host, "probe", {"daemon": ["daemon", marker]})
    assert await apoll(lambda: bool(_marked(marker)), 10), "no daemon"
    panes = (await tools.call("list_panes"))["panes"]
    assert [p["confined"] for p in panes] == [True]
    return dict(panes[0])


async def test_a_sigkilled_worker_takes_its_whole_sandbox_with_it(host: Host) -> None:
    marker = f"--pw-daemon-{secrets.token_hex(4)}"
    async with Client(stdio_params(host.state, **host.env())) as client:
        tools = Tools(client)
        pane = await _confined_daemon(tools, host, marker)
        os.kill(pane["worker_pid"], signal.SIGKILL)
        lost = await tools.wait("p", until=["lost", "exited"], timeout_s=30)
        assert lost["lifecycle"] == "lost", lost
        # bwrap dies with its worker (--die-with-parent), the PID namespace with it.
        assert await apoll(lambda: not _marked(marker), 15), "the daemon outlived its worker"
        assert not psutil.pid_exists(pane["pid"]) or psutil.Process(pane["pid"]).status() == (
            psutil.STATUS_ZOMBIE
        )


async def test_a_sigkilled_supervisor_leaves_no_process_of_a_confined_pane(host: Host) -> None:
    marker = f"--pw-daemon-{secrets.token_hex(4)}"
    env = host.env(PANEWARDEN_ORPHAN_GRACE_S="1")
    client = Client(stdio_params(host.state, **env))
    pane: dict[str, Any] = {}
    try:
        async with client:
            tools = Tools(client)
            pane = await _confined_daemon(tools, host, marker)
            supervisor = supervisor_of(pane["worker_pid"])
            assert supervisor is not None
            os.kill(supervisor, signal.SIGKILL)
    except* CLIENT_GONE:
        pass  # leaving the client of a dead server
    # The orphaned worker waits out the silence and the grace, then kills its tree.
    within = ORPHAN_AFTER_S + 1 + 15
    assert await apoll(lambda: not _marked(marker), within), "the daemon outlived the service"
    assert await apoll(lambda: not psutil.pid_exists(pane["worker_pid"]), 10)


# `panewarden ctl` as a probe inside a pane runs it.
CTL = [sys.executable, "-m", "supervisor", "ctl", "--json"]


def _ctl_acquire(controller_id: str) -> list[str]:
    """The ctl command that makes the calling pane the holder of a controller lease."""
    authority = ["--authority-ref", "confined", "--authority-sha256", "0" * 64]
    return [*CTL, "acquire", "--controller-id", controller_id, *authority]


async def test_panewarden_ctl_works_from_inside_a_confined_pane(host: Host) -> None:
    acquire = _ctl_acquire("boxed")
    async with Client(stdio_params(host.state, **host.env())) as client:
        tools = Tools(client)
        seen = await _probe(
            tools,
            host,
            "probe",
            {
                "acquire": ["run", json.dumps(acquire)],
                "status": ["run", json.dumps([*CTL, "status"])],
            },
        )
        assert seen["acquire"].startswith("ok:rc=0 "), seen
        assert seen["status"].startswith("ok:rc=0 "), seen
        # Attested as its own pane through the PID namespace: the lease is the pane's.
        controllers = (await tools.call("controller_list"))["leases"]
        assert [c["controller_id"] for c in controllers] == ["pane:p/boxed"], controllers
        await tools.call("remove_pane", name="p")


async def test_another_panes_cwd_inside_a_writable_one_is_read_only(host: Host) -> None:
    inner = host.work / "inner"
    inner.mkdir()
    profiles = json.loads((host.base / "profiles.json").read_text())
    for profile in profiles["profiles"]:
        profile["cwds"] = [str(host.work), str(inner)]
    (host.base / "profiles.json").write_text(json.dumps(profiles))
    async with Client(stdio_params(host.state, **host.env())) as client:
        tools = Tools(client)
        (inner / "checks.json").write_text(json.dumps({}))
        await tools.call("start_pane", name="inner", profile="probe-host", cwd=str(inner))
        assert await apoll((inner / "results.json").exists, SETTLE_S)
        checks = {
            "own": ["write", str(host.work / "mine.txt")],
            "other_pane": ["write", str(inner / "planted")],
        }
        seen = await _probe(tools, host, "probe", checks)
        assert seen["own"] == "ok:5", seen
        assert seen["other_pane"] == "OSError:30", seen  # EROFS: the other pane's cwd
        assert not (inner / "planted").exists()
        await tools.call("remove_pane", name="p")
        await tools.call("remove_pane", name="inner")


async def test_a_confined_controller_starts_only_confined_reviewers(host: Host) -> None:
    # A prompt-injected agent in a confined pane can become a controller over ctl; a
    # reviewer it starts is confined even when its profile says `confine: false`.
    profiles = json.loads((host.base / "profiles.json").read_text())
    # The probe's own network ("none"): a wider one is refused (test_ctl_authority).
    loose = dict(profiles["profiles"][0], name="loose", confine=False)
    profiles["profiles"].append(loose)
    (host.base / "profiles.json").write_text(json.dumps(profiles))
    acquire = _ctl_acquire("evil")
    start = [*CTL, "reviewer-start", "--profile", "loose", "--cwd", str(host.work)]
    start += ["--purpose", "escape", "loose-rev"]
    async with Client(stdio_params(host.state, **host.env())) as client:
        tools = Tools(client)
        seen = await _probe(
            tools,
            host,
            "probe",
            {"acquire": ["run", json.dumps(acquire)], "start": ["run", json.dumps(start)]},
        )
        assert seen["acquire"].startswith("ok:rc=0 "), seen
        assert seen["start"].startswith("ok:rc=0 "), seen
        panes = {p["name"]: p for p in (await tools.call("list_panes"))["panes"]}
        assert panes["loose-rev"]["confined"] is True, panes
        # From outside (no pane identity), the same profile runs as it says.
        await tools.call("start_pane", name="outside", profile="loose")
        assert (await tools.call("get_status", name="outside"))["confined"] is False


async def test_a_pi_pane_runs_confined_whatever_the_service_default_or_not_at_all(
    host: Host,
) -> None:
    """Pi asks before nothing: a ``pi`` profile that leaves ``confine`` to the service runs
    confined under ``PANEWARDEN_CONFINE=off``, and on a host that cannot confine it does not
    start (under ``auto`` another kind would run unconfined there)."""
    profiles = json.loads((host.base / "profiles.json").read_text())
    for profile in profiles["profiles"]:
        profile["agent"] = "pi"
        del profile["confine"]
    (host.base / "profiles.json").write_text(json.dumps(profiles))
    async with Client(stdio_params(host.state, **host.env(PANEWARDEN_CONFINE="off"))) as client:
        tools = Tools(client)
        seen = await _probe(tools, host, "probe", {"token": ["read", str(host.token)]})
        assert seen["token"] == "PermissionError:13", seen
        assert (await tools.call("get_status", name="p"))["confined"] is True
        await tools.call("remove_pane", name="p")
    env = host.env(PATH="/nonexistent", PANEWARDEN_CONFINE="auto")
    async with Client(stdio_params(host.state, **env)) as client:
        tools = Tools(client)
        refused = await tools.error("start_pane", name="p", profile="probe")
        assert refused["code"] == "sandbox_unavailable", refused
        assert (await tools.call("list_panes"))["panes"] == []
