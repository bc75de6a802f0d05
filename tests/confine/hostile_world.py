"""The user's world around the hostile-agent chain (tests/confine/test_hostile_chain.py),
and how the test compares it before and after: a HOME outside /tmp with other CLIs'
files, a runtime dir (as ``/run/user/<uid>``) holding a session bus, the service's token,
host sockets no pane may reach, the user's HTTP service on its default paths; file,
ref and object digests read from the host."""

from __future__ import annotations

import contextlib
import hashlib
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

from tests.conftest import PASSED_ON
from tests.lanes.gitrepo import GIT_ENV
from tests.service.conftest import Service

GIT_TIMEOUT_S = 60
# What the operator's CLIs keep in HOME: settings they run programs from, credentials.
HOME_FILES = {
    ".claude/settings.json": '{"permissions": {"allow": []}}\n',
    ".claude/.credentials.json": '{"claudeAiOauth": {"accessToken": "sk-claude"}}\n',
    ".codex/config.toml": 'model = "gpt-5"\n',
    ".codex/auth.json": '{"OPENAI_API_KEY": "sk-codex"}\n',
    ".config/opencode/opencode.json": '{"$schema": "https://opencode.ai/config.json"}\n',
    ".local/share/opencode/auth.json": '{"anthropic": {"key": "sk-opencode"}}\n',
    ".bashrc": "# the operator's shell\n",
}


@dataclass(frozen=True)
class Host:
    """Paths of the user's world; ``markers`` is where a planted program would write if
    it ever ran outside a sandbox (nothing inside can)."""

    base: Path
    home: Path
    runtime: Path
    token: Path
    markers: Path

    @property
    def other_state(self) -> Path:
        """The user's HTTP service's state dir: the default one."""
        return self.home / ".local" / "state" / "panewarden"

    @property
    def other_token(self) -> Path:
        return self.home / ".config" / "panewarden" / "token"


@contextlib.contextmanager
def make_host() -> Iterator[Host]:
    """A fresh world under /var/tmp (outside /tmp, as a real HOME and runtime dir are)."""
    base = Path("/var/tmp") / f"pw-hostile-{secrets.token_hex(4)}"
    host = Host(base, base / "home", base / "run", base / "token", base / "markers")
    for path in (host.home, host.runtime, host.markers):
        path.mkdir(parents=True, mode=0o700)
    try:
        _secret(host.token, secrets.token_hex(16))
        for rel, text in HOME_FILES.items():
            _secret(host.home / rel, text.rstrip("\n"))
        _secret(host.other_token, secrets.token_hex(32))
        yield host
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _secret(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_text(text + "\n")
    path.chmod(0o600)


@dataclass
class Listeners:
    """Host sockets nothing in a pane may reach: a loopback TCP port, an abstract Unix
    socket, the session bus in the runtime dir. The kernel queues a connection whether
    or not it is accepted, so ``reached`` counts every one that got there."""

    tcp: socket.socket
    abstract: socket.socket
    bus: socket.socket
    abstract_name: str
    bus_path: str

    @property
    def tcp_address(self) -> str:
        return f"127.0.0.1:{self.tcp.getsockname()[1]}"

    def reached(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for name, sock in (("tcp", self.tcp), ("abstract", self.abstract), ("bus", self.bus)):
            counts[name] = 0
            while True:
                try:
                    peer, _ = sock.accept()
                except BlockingIOError:
                    break
                peer.close()
                counts[name] += 1
        return counts


@contextlib.contextmanager
def make_listeners(host: Host) -> Iterator[Listeners]:
    name = f"pw-hostile-{secrets.token_hex(4)}"
    bus_path = str(host.runtime / "bus")
    socks = [
        socket.socket(socket.AF_INET, socket.SOCK_STREAM),
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM),
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM),
    ]
    try:
        addresses: list[tuple[str, int] | str] = [("127.0.0.1", 0), "\0" + name, bus_path]
        for sock, address in zip(socks, addresses, strict=True):
            sock.bind(address)
            sock.listen(64)
            sock.setblocking(False)
        yield Listeners(socks[0], socks[1], socks[2], name, bus_path)
    finally:
        for sock in socks:
            sock.close()


def base_env(host: Host) -> dict[str, str]:
    """A service's environment in this world: the user's HOME and runtime dir, no
    PANEWARDEN_ variable but the suite's passed-on ones, no other XDG base dir."""
    env = {
        k: v
        for k, v in os.environ.items()
        if (not k.startswith("PANEWARDEN_") or k in PASSED_ON)
        and not k.startswith(("XDG_", "HTTP", "ALL_"))
    }
    env |= {
        "HOME": str(host.home),
        "XDG_RUNTIME_DIR": str(host.runtime),
        "PANEWARDEN_LOG_LEVEL": "WARNING",
    }
    return env


@contextlib.contextmanager
def other_service(host: Host, root: Path) -> Iterator[Service]:
    """The user's HTTP service: the default state dir, its token in
    ``~/.config/panewarden``, the same HOME and runtime dir; a demo profile."""
    root.mkdir()
    profiles = root / "profiles.json"
    demo = [sys.executable, "-m", "supervisor.demo.agent"]
    profile = {"name": "demo", "agent": "demo", "argv": demo, "cwds": ["/"]}
    profiles.write_text(json.dumps({"profiles": [profile]}))
    env = base_env(host) | {
        "PANEWARDEN_STATE_DIR": str(host.other_state),
        "PANEWARDEN_TOKEN_FILE": str(host.other_token),
        "PANEWARDEN_PROFILES": str(profiles),
        "PANEWARDEN_ORPHAN_GRACE_S": "10",
    }
    args = ["serve", "--http", "--host", "127.0.0.1", "--port", "0"]
    service = Service(root=root, env=env, args=args)
    try:
        yield service.start()
    finally:
        service.stop()


def files_digest(root: Path, *skip: Path) -> dict[str, str]:
    """sha256 of every file's bytes (of a link's target) below ``root``, the trees at
    ``skip`` left out; a directory counts by the files in it."""
    found: dict[str, str] = {}
    skipped = {str(path) for path in skip}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) not in skipped]
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        for name in [*filenames, *links]:
            path = os.path.join(dirpath, name)
            try:
                if os.path.islink(path):
                    data = os.readlink(path).encode()
                else:
                    data = Path(path).read_bytes()
            except OSError as exc:
                data = f"unreadable {exc.errno}".encode()
            found[os.path.relpath(path, root)] = hashlib.sha256(data).hexdigest()
    return found


def changed(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """The keys whose values differ (added and removed ones included)."""
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def git_dir(common: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """Git on the common dir itself, never through a worktree a writer shaped."""
    return subprocess.run(
        ["git", f"--git-dir={common}", *args],
        env=GIT_ENV,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=GIT_TIMEOUT_S,
        check=False,
    )


def fsck_store(common: Path, skip_ref: str, scratch: Path) -> subprocess.CompletedProcess[bytes]:
    """``git fsck --full`` of the shared object store, reached from every ref but
    ``skip_ref``: a bare repository at ``scratch`` borrows the store as its alternate
    (``--full`` checks an alternate's objects too) and holds those refs. A lane's own
    commits may live elsewhere until its release; nothing else may be missing."""
    scratch.mkdir()
    subprocess.run(
        ["git", "init", "-q", "--bare", str(scratch)],
        env=GIT_ENV,
        check=True,
        timeout=GIT_TIMEOUT_S,
    )
    (scratch / "objects" / "info" / "alternates").write_text(f"{common / 'objects'}\n")
    for ref, oid in refs(common).items():
        if ref != skip_ref:
            git_dir(scratch, "update-ref", "--no-deref", ref, oid)
    return git_dir(scratch, "fsck", "--full", "--no-dangling")


def refs(common: Path) -> dict[str, str]:
    """Every ref and the object it names, as Git resolves it (loose over packed)."""
    out = git_dir(common, "for-each-ref", "--format=%(refname) %(objectname)").stdout
    return dict(line.split(" ", 1) for line in out.decode().splitlines())


def objects(common: Path) -> dict[str, bytes]:
    """Every object's stored content, as Git reads it back (without checking its id)."""
    check = "--batch-check=%(objectname) %(objecttype)"
    listing = git_dir(common, "cat-file", "--batch-all-objects", check).stdout.decode()
    found: dict[str, bytes] = {}
    for line in listing.splitlines():
        oid, kind = line.split()
        found[oid] = git_dir(common, "cat-file", kind, oid).stdout
    return found
