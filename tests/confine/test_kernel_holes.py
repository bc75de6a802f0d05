"""The kernel's side of a confined pane, attacked from inside (issue 27 items 2, 7, 8, 13,
19, 20, 21): a probe program (``kernel_probe.py``) in a real confined pane tries each
thing and reports what the kernel said. The service's files sit outside ``/tmp``
(``/var/tmp``), as under a systemd ``XDG_RUNTIME_DIR``."""

from __future__ import annotations

import ctypes
import json
import os
import platform
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp.client.client import Client

from supervisor.confinement.sockets import SETTLED_S
from tests.conftest import REPO, Tools, stdio_params
from tests.polling import apoll

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

PROBE = REPO / "tests" / "confine" / "kernel_probe.py"
SETTLE_S = 30
DENIED = "PermissionError:13"
EROFS = "OSError:30"
HAS_MTRR = os.path.exists("/proc/mtrr")


@dataclass
class Host:
    base: Path
    home: Path
    work: Path
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

    def profile(self, **fields: Any) -> None:
        entry = {
            "name": "probe",
            "argv": [sys.executable, str(PROBE)],
            "cwds": [str(self.work)],
            "confine": True,
            "network": "none",
            **fields,
        }
        (self.base / "profiles.json").write_text(json.dumps({"profiles": [entry]}))


@pytest.fixture
def host() -> Iterator[Host]:
    base = Path("/var/tmp") / f"pw-kernel-{secrets.token_hex(4)}"
    dirs = {name: base / name for name in ("home", "work", "state", "run")}
    for path in dirs.values():
        path.mkdir(parents=True, mode=0o700)
    token = base / "token"
    token.write_text(secrets.token_hex(16) + "\n")
    token.chmod(0o600)
    made = Host(base, dirs["home"], dirs["work"], dirs["state"], dirs["run"], token)
    made.profile()
    try:
        yield made
    finally:
        shutil.rmtree(base, ignore_errors=True)


async def _probe(
    host: Host, checks: dict[str, Any], *, cwd: Path | None = None, **env: str
) -> dict[str, str]:
    """Start the probe pane with ``checks``, return what it saw, remove it."""
    where = cwd or host.work
    results = where / "results.json"
    results.unlink(missing_ok=True)
    (where / "checks.json").write_text(json.dumps(checks))
    async with Client(stdio_params(host.state, **host.env(**env))) as client:
        tools = Tools(client)
        await tools.call("start_pane", name="p", profile="probe")
        if not await apoll(results.exists, SETTLE_S):
            screen = (await tools.call("read_output", name="p"))["text"]
            status = await tools.call("get_status", name="p")
            raise AssertionError(f"the probe wrote no results: {status} {screen}")
        assert (await tools.call("get_status", name="p"))["confined"] is True
        await tools.call("remove_pane", name="p")
    return dict(json.loads(results.read_text()))


def _run(*argv: str) -> list[str]:
    return ["run", json.dumps(list(argv))]


async def test_proc_sys_is_read_only_and_a_root_service_program_is_nobody(host: Host) -> None:
    """Item 2: a root service's program wrote kernel.core_pattern (whose ``|program`` the
    kernel runs as root outside). Opening for writing is the attack's first step, and
    harmless to try: nothing is ever written."""
    checks = {
        "core_pattern": ["open_write", "/proc/sys/kernel/core_pattern"],
        "hostname": ["open_write", "/proc/sys/kernel/hostname"],
        "mtrr": ["open_write", "/proc/mtrr"],
        "keys": ["read", "/proc/keys"],
        "own_oom": ["open_write", "/proc/self/oom_score_adj"],
        "uid": _run("id", "-u"),
    }
    if not HAS_MTRR:
        del checks["mtrr"]
    seen = await _probe(host, checks)
    assert seen["core_pattern"] == EROFS, seen
    assert seen["hostname"] == EROFS, seen
    if "mtrr" in checks:
        assert seen["mtrr"] == EROFS, seen
    assert seen["keys"] == DENIED, seen  # masked: every key description the uid may view
    assert seen["own_oom"] == "ok:opened", seen  # its own processes' files stay its own
    expected = "65534" if os.geteuid() == 0 else str(os.geteuid())
    assert seen["uid"].startswith(f"ok:rc=0 {expected}"), seen


async def test_no_user_namespace_can_be_made_inside(host: Host) -> None:
    """Item 20: a nested user namespace gave the agent every capability over mounts and
    nf_tables of its own."""
    seen = await _probe(host, {"unshare": _run("unshare", "-U", "true")})
    assert seen["unshare"].startswith("ok:rc=1 "), seen
    assert "No space left on device" in seen["unshare"], seen  # max_user_namespaces = 0


@pytest.fixture
def listener(host: Host) -> Iterator[list[str]]:
    """Unix sockets listening on the host outside /tmp: a session bus in
    XDG_RUNTIME_DIR, an agent's socket in a directory of its own."""
    agent_dir = host.base / "agent"
    agent_dir.mkdir()
    paths = [str(host.runtime / "bus"), str(agent_dir / "agent.sock")]
    socks = []
    for path in paths:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(path)
        sock.listen()
        socks.append(sock)
    try:
        yield paths
    finally:
        for sock in socks:
            sock.close()


async def test_no_host_unix_socket_is_reachable(host: Host, listener: list[str]) -> None:
    """Item 7: ``--ro-bind / /`` left every socket outside /tmp connectable (the session
    bus runs anything through ``systemd-run --user``), even with ``network: "none"``."""
    bus, agent = listener
    # A socket bound this instant is left to the next start (it may be gone before bwrap
    # mounts over it): wait until the agent's has settled.
    assert await apoll(lambda: time.time() - os.stat(agent).st_ctime > SETTLED_S, 10)
    checks = {
        "bus": ["connect_unix", bus],
        "agent": ["connect_unix", agent],
        "runtime_dir": ["list", str(host.runtime)],
        "ctl_inside": ["connect_unix", "/tmp/.panewarden/ctl.sock"],
    }
    seen = await _probe(host, checks)
    assert seen["bus"] == DENIED, seen
    assert seen["agent"] == DENIED, seen
    assert seen["runtime_dir"] == DENIED, seen  # whole: a socket made later is hidden too
    assert seen["ctl_inside"] == "ok:connected", seen


KEYCTL_NR = {"x86_64": 250, "aarch64": 219}


def _add_session_key(description: str, payload: bytes) -> int:
    """A user key in this process's session keyring (made if it has none), which the
    service started below inherits."""
    libc = ctypes.CDLL(None, use_errno=True)
    add_key = {"x86_64": 248, "aarch64": 217}[platform.machine()]
    serial = int(
        libc.syscall(
            add_key, b"user", description.encode(), payload, len(payload), ctypes.c_long(-3)
        )
    )
    assert serial > 0, os.strerror(ctypes.get_errno())
    return serial


@pytest.mark.skipif(platform.machine() not in KEYCTL_NR, reason="keyctl numbers for x86_64/arm64")
async def test_the_services_session_keyring_is_not_the_panes(host: Host) -> None:
    """Item 8: a confined pane read a key from the service's session keyring."""
    description = f"pw-kernel-{secrets.token_hex(4)}"
    serial = _add_session_key(description, b"the service's secret")
    seen = await _probe(
        host,
        {"by_serial": ["key_read", str(serial)], "by_name": ["key_search", description]},
    )
    assert not seen["by_serial"].startswith("ok:"), seen
    assert not seen["by_name"].startswith("ok:"), seen


async def test_secrets_named_through_a_link_under_tmp_are_hidden(host: Host) -> None:
    """Item 13: the token, or a ``hide`` entry, given through a symlink under /tmp was
    dropped by name (the private /tmp hides it) before the link was resolved."""
    secret = host.base / "secret.txt"
    secret.write_text("secret\n")
    links = [Path(f"/tmp/pw-kernel-{secrets.token_hex(4)}") for _ in range(2)]
    links[0].symlink_to(host.token)
    links[1].symlink_to(secret)
    try:
        host.profile(hide=[str(links[1])])
        checks = {"token": ["read", str(host.token)], "secret": ["read", str(secret)]}
        seen = await _probe(host, checks, PANEWARDEN_TOKEN_FILE=str(links[0]))
    finally:
        for link in links:
            link.unlink()
    assert seen["token"] == DENIED, seen
    assert seen["secret"] == DENIED, seen


async def test_a_panes_processes_memory_and_tmp_are_bounded(host: Host) -> None:
    """Item 19: 1,000 of 1,000 processes started, and /tmp was a tmpfs of half of RAM."""
    host.profile(limits={"processes": 64, "memory_mb": 512, "tmp_mb": 16})
    checks = {
        "forks": ["fork_many", "200"],
        "alloc": ["alloc", "1024"],
        "tmp": ["fill_tmp", "64"],
        "shm": ["statvfs", "/dev/shm"],
    }
    seen = await _probe(host, checks)
    forks = int(seen["forks"].removeprefix("ok:"))
    assert forks < 64, seen
    assert seen["alloc"] == "OSError:12", seen
    assert seen["tmp"] == "ok:15 ENOSPC" or seen["tmp"] == "ok:16 ENOSPC", seen
    assert seen["shm"] == "ok:16", seen


async def test_the_default_limits_hold_and_real_clis_run_under_them(host: Host) -> None:
    """Item 19's defaults: a profile without ``limits`` gets them, and node CLIs (which
    reserve large address spaces) start under them."""
    checks: dict[str, Any] = {
        "tmp": ["statvfs", "/tmp"],
        "shm": ["statvfs", "/dev/shm"],
        "data": ["rlimit_data", ""],
        "node": _run("node", "-e", "console.log(require('os').userInfo().uid)"),
    }
    # What the CLIs write under HOME (a generic profile's HOME is read-only).
    state = ["~/.local", "~/.cache", "~/.config", "~/.claude"]
    for entry in state:
        (host.home / entry.removeprefix("~/")).mkdir()
    host.profile(writable=state)
    bin_dir = REPO / ".npm-cli" / "node_modules" / ".bin"
    for cli in ("claude", "opencode"):
        if (bin_dir / cli).exists():
            checks[cli] = _run(str(bin_dir / cli), "--version")
    seen = await _probe(host, checks)
    assert seen["tmp"] == "ok:1024", seen
    assert seen["shm"] == "ok:64", seen
    assert seen["data"] == f"ok:{8192 * 1024 * 1024}", seen
    if shutil.which("node"):
        assert seen["node"].startswith("ok:rc=0 "), seen
    for cli in ("claude", "opencode"):
        if cli in checks:
            assert seen[cli].startswith("ok:rc=0 "), seen


@pytest.fixture
def installed_under_tmp() -> Iterator[tuple[Path, Path]]:
    """A program installed under /tmp (its ``#!`` interpreter, a link, there too; its
    package tree beside it) and a config file there: (program, config)."""
    prefix = Path(f"/tmp/pw-kernel-prefix-{secrets.token_hex(4)}")
    config = Path(f"/tmp/pw-kernel-conf-{secrets.token_hex(4)}")
    try:
        (prefix / "interp" / "bin").mkdir(parents=True)
        (prefix / "interp" / "bin" / "python3").symlink_to(sys.executable)
        (prefix / "lib").mkdir()
        for name in ("kernel_probe.py", "probe.py"):
            shutil.copy(REPO / "tests" / "confine" / name, prefix / "lib" / name)
        (prefix / "bin").mkdir()
        tool = prefix / "bin" / "tool"
        tool.write_text(
            f"#!{prefix}/interp/bin/python3\n"
            "import os, runpy\n"
            "here = os.path.dirname(os.path.realpath(__file__))\n"
            "runpy.run_path(os.path.join(here, '..', 'lib', 'kernel_probe.py'),"
            " run_name='__main__')\n"
        )
        tool.chmod(0o755)
        config.write_text("setting\n")
        yield tool, config
    finally:
        shutil.rmtree(prefix, ignore_errors=True)
        config.unlink(missing_ok=True)


async def test_a_program_installed_under_tmp_runs_with_its_tree(
    host: Host, installed_under_tmp: tuple[Path, Path]
) -> None:
    """Item 21: only argv's own path was bound under the private /tmp, so a program whose
    package tree and ``#!`` interpreter lie under /tmp failed ("No such file or
    directory"), and a variable naming a file there pointed at nothing."""
    tool, config = installed_under_tmp
    host.profile(argv=[str(tool)], env={"PW_PROBE_CONFIG": str(config)})
    seen = await _probe(host, {"config": ["env_file", "PW_PROBE_CONFIG"]})
    assert seen["config"] == "ok:8", seen


def _doctor(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor", "doctor"],
        env={**os.environ, **env},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_doctor_says_what_this_hosts_sandbox_lacks(tmp_path: Path) -> None:
    """A bwrap that cannot make its own user namespace (here: one that refuses
    ``--disable-userns``, as before 0.8) still confines panes, and doctor says what they
    lack; a root service is warned about."""
    real = shutil.which("bwrap")
    assert real is not None
    fake = tmp_path / "bwrap"
    fake.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do [ "$a" = --disable-userns ] && '
        "{ echo 'bwrap: Unknown option --disable-userns' >&2; exit 1; }; done\n"
        f'exec {real} "$@"\n'
    )
    fake.chmod(0o755)
    weaker = _doctor(PATH=f"{tmp_path}:{os.environ.get('PATH', '')}")
    assert weaker.returncode == 0, weaker.stdout
    assert "not its own user namespace" in weaker.stdout, weaker.stdout
    assert "--disable-userns" in weaker.stdout, weaker.stdout
    full = _doctor()
    assert "no nested user namespaces" in full.stdout, full.stdout
    if os.geteuid() == 0:
        assert "--  root" in full.stdout, full.stdout
    line = [row for row in full.stdout.splitlines() if "limits" in row]
    assert line, full.stdout
