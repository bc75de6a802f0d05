"""A verification recipe cannot reach the service: its token, clients and audit files,
its state dir, its ctl and worker sockets and the user's keys are hidden as they are
from a confined pane. They sit outside /tmp (``/var/tmp``, as under a systemd
``XDG_RUNTIME_DIR``), so the hiding is what keeps them out of reach, not the private
/tmp. The recipe is a probe committed in the repository: it tries each thing
``out/checks.json`` lists and writes what the kernel said to ``out/results.json`` (its
declared, ignored output)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.conftest import Tools, stdio_params
from tests.lanes.conftest import Lanes, acquire, profiles_file
from tests.lanes.gitrepo import REFUSED_EXIT, Repo, git, head, make_repo

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

DENIED = "PermissionError:13"

# Standard library only: it runs inside the sandbox, with the real interpreter.
PROBE = """import json, os, socket, sys


def read(path):
    with open(path, "rb") as handle:
        return len(handle.read())


def listdir(path):
    return len(os.listdir(path))


def connect(path):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(path)
    return "connected"


ACTIONS = {"read": read, "list": listdir, "connect_unix": connect}
with open("out/checks.json") as handle:
    checks = json.load(handle)
results = {}
for name, (kind, arg) in checks.items():
    try:
        results[name] = "ok:" + str(ACTIONS[kind](arg))
    except OSError as exc:
        results[name] = type(exc).__name__ + ":" + str(exc.errno)
with open("out/results.json", "w") as handle:
    json.dump(results, handle)
"""


@dataclass
class Service:
    """The service's files, all under one ``/var/tmp`` directory."""

    base: Path
    home: Path
    state: Path
    runtime: Path
    token: Path
    clients: Path
    audit: Path

    def env(self) -> dict[str, str]:
        return {
            "HOME": str(self.home),
            "XDG_RUNTIME_DIR": str(self.runtime),
            "PANEWARDEN_TOKEN_FILE": str(self.token),
            "PANEWARDEN_CLIENTS": str(self.clients),
            "PANEWARDEN_AUDIT_FILE": str(self.audit),
        }


def _private_file(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


@pytest.fixture
def service() -> Iterator[Service]:
    base = Path("/var/tmp") / f"pw-verify-{secrets.token_hex(4)}"
    dirs = {name: base / name for name in ("home", "state", "run", "audit")}
    for path in dirs.values():
        path.mkdir(parents=True, mode=0o700)
    (dirs["home"] / ".ssh").mkdir()
    _private_file(dirs["home"] / ".ssh" / "id_rsa", "KEY\n")
    try:
        yield Service(
            base=base,
            home=dirs["home"],
            state=dirs["state"],
            runtime=dirs["run"],
            token=_private_file(base / "token", secrets.token_hex(16) + "\n"),
            clients=_private_file(base / "clients.json", "[]\n"),
            audit=_private_file(dirs["audit"] / "audit.jsonl", '{"op": "planted"}\n'),
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def probe_repo(tmp_path: Path) -> Repo:
    """The lane tests' repository, with the probe and its recipe committed on ``main``."""
    repo = make_repo(tmp_path)
    (repo.root / "probe.py").write_text(PROBE)
    recipes = repo.root / ".panewarden" / "recipes.toml"
    py = json.dumps(os.path.realpath(sys.executable))
    recipes.write_text(
        recipes.read_text() + f'\n[recipes.probe]\nargv = [{py}, "probe.py"]\nwritable = ["out"]\n'
    )
    git(repo.root, "add", "-A")
    git(repo.root, "commit", "-q", "-m", "the probe")
    return Repo(root=repo.root, base=head(repo.root))


@pytest.fixture
async def lanes(tmp_path: Path, service: Service, probe_repo: Repo) -> AsyncIterator[Lanes]:
    params = stdio_params(
        service.state, PANEWARDEN_PROFILES=str(profiles_file(tmp_path)), **service.env()
    )
    async with Client(params) as client:
        tools = Tools(client)
        yield Lanes(tools, await acquire(tools), probe_repo)


async def _verify(lanes: Lanes, lease: dict[str, Any], recipe: str) -> dict[str, Any]:
    snap = await lanes.tools.call("verification_snapshot", lease_id=lease["lease_id"])
    return await lanes.tools.call(
        "verify",
        creds=lanes.creds,
        lease_id=lease["lease_id"],
        recipe=recipe,
        expected_worktree_sha256=snap["worktree_sha256"],
    )


def _sockets(service: Service) -> list[Path]:
    """The worker socket and the ctl socket the service made under XDG_RUNTIME_DIR."""
    found = sorted(service.runtime.rglob("*.ipc"))
    found.append(Path((service.state / "run" / "ctl").read_text().strip()))
    return found


async def test_a_recipe_reads_and_reaches_nothing_of_the_service(
    lanes: Lanes, service: Service
) -> None:
    wt = lanes.repo.worktree("wt-probe", "lane-probe/work")
    lease = await lanes.start("probe", wt, "lane-probe/work", ["src/probe.py"])
    await lanes.tools.wait("probe", until=["idle"])
    sockets = _sockets(service)
    assert any(p.name == "supervisor.ipc" for p in sockets), sockets
    assert all(p.is_relative_to(service.runtime) and p.is_socket() for p in sockets), sockets
    checks = {
        "token": ["read", str(service.token)],
        "clients": ["read", str(service.clients)],
        "audit": ["read", str(service.audit)],
        "state": ["list", str(service.state)],
        "runtime": ["list", str(service.runtime / "panewarden")],
        "ssh_key": ["read", str(service.home / ".ssh" / "id_rsa")],
        "worktree": ["list", str(wt)],
        **{f"socket {p.name}": ["connect_unix", str(p)] for p in sockets},
    }
    (wt / "out").mkdir()
    (wt / "out" / "checks.json").write_text(json.dumps(checks))  # ignored by Git

    run = await _verify(lanes, lease, "probe")
    assert run["state"] == "passed" and run["exit_code"] == 0, run
    seen = json.loads((wt / "out" / "results.json").read_text())
    for name in checks:
        if name != "worktree":
            assert seen[name] == DENIED, (name, seen)
    assert seen["worktree"].startswith("ok:"), seen  # the sandbox still shows its own

    # Everything else runs as it did: the project's tests pass, the network is refused.
    passed = await _verify(lanes, lease, "tests")
    assert passed["state"] == "passed", passed
    network = await _verify(lanes, lease, "network")
    assert network["state"] == "failed" and network["exit_code"] == REFUSED_EXIT, network
