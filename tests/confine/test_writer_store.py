"""A writer lane against the repository's shared Git state, attacked from inside its real
confined pane: it cannot replace an object of the shared store under its id, nor move
``main`` with a loose ref once the refs are packed; ``verify`` runs the recipe
``writer_start`` recorded, whatever the store says later; its commits land in its private
object directory and ``writer_release`` imports them verified (a corrupt one refused); a
lane that broke its own index is ended by ``writer_close``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.conftest import REPO, Tools, stdio_params
from tests.lanes.conftest import CHECKPOINT_SHA, Lanes, acquire
from tests.lanes.gitrepo import GIT_ENV as HOST_GIT_ENV
from tests.lanes.gitrepo import Repo, git, head, make_repo
from tests.polling import apoll

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

PROBE = REPO / "tests" / "confine" / "lane_probe.py"
SETTLE_S = 30
EROFS = "OSError:30"
LANE_GIT_ENV = {
    "HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "Lane",
    "GIT_AUTHOR_EMAIL": "lane@example.invalid",
    "GIT_COMMITTER_NAME": "Lane",
    "GIT_COMMITTER_EMAIL": "lane@example.invalid",
}
# Replaces the loose object at argv[1] with a blob of argv[2] under the same id (a new
# file renamed over it, as an agent would); exits with the errno of a refusal.
FORGE = (
    "import os, sys, zlib\n"
    "path, data = sys.argv[1], sys.argv[2].encode()\n"
    "body = b'blob %d\\0' % len(data) + data\n"
    "try:\n"
    "    os.makedirs(os.path.dirname(path), exist_ok=True)\n"
    "    with open(path + '.forged', 'wb') as handle: handle.write(zlib.compress(body))\n"
    "    os.replace(path + '.forged', path)\n"
    "except OSError as exc: sys.exit(exc.errno)\n"
)
# The interpreter itself (a venv under /tmp is not in the recipe sandbox).
PYTHON = os.path.realpath(sys.executable)
PROBE_TEXT = "probe\n"  # what the probe's `write` writes


def _git(*args: str) -> dict[str, Any]:
    return {"argv": ["git", *args], "env": LANE_GIT_ENV}


def _forge(path: Path, text: str) -> list[str]:
    return [sys.executable, "-c", FORGE, str(path), text]


def _loose(repo: Repo, oid: str) -> Path:
    return repo.common_dir / "objects" / oid[:2] / oid[2:]


def _shared_inside(repo: Repo, oid: str) -> Path:
    """Where a writer's sandbox shows the shared store's loose object ``oid``."""
    return repo.common_dir / "objects" / "panewarden-shared" / oid[:2] / oid[2:]


def _blob_id(text: str) -> str:
    done = subprocess.run(
        ["git", "hash-object", "--stdin"],
        input=text.encode(),
        env=HOST_GIT_ENV,
        capture_output=True,
        timeout=30,
        check=True,
    )
    return done.stdout.decode().strip()


def _host(argv: list[str]) -> int:
    """Run ``argv`` on the host (outside any sandbox); its exit status."""
    done = subprocess.run(argv, env=HOST_GIT_ENV, capture_output=True, timeout=30, check=False)
    return done.returncode


def _fsck(cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["git", "-C", str(cwd), "fsck", "--full", "--strict", "--no-dangling"],
        env=HOST_GIT_ENV,
        capture_output=True,
        timeout=60,
        check=False,
    )


class Probe:
    """A supervisor whose ``probe`` profile runs lane_probe.py on a checks file."""

    def __init__(self, tmp: Path, state_dir: Path) -> None:
        self.results = tmp / "results"
        self.results.mkdir()
        self.checks = self.results / "checks.json"
        argv = [sys.executable, str(PROBE), str(self.checks), str(self.results / "w")]
        profile = {
            "name": "probe",
            "agent": "demo",
            "argv": argv,
            "cwds": [str(tmp)],
            "writable": [str(self.results)],
        }
        profiles = tmp / "profiles.json"
        profiles.write_text(json.dumps({"profiles": [profile]}))
        self.params = stdio_params(state_dir, PANEWARDEN_PROFILES=str(profiles))

    def plan(self, checks: list[list[object]]) -> None:
        self.checks.write_text(json.dumps(checks))

    async def seen(self) -> dict[str, str]:
        path = self.results / "w"
        assert await apoll(path.exists, SETTLE_S), "the probe wrote no results"
        return dict(json.loads(path.read_text()))


async def _release_args(lanes: Lanes, lease: dict[str, Any], wt: Path) -> dict[str, Any]:
    """writer_release's arguments from the supervisor's own view (the lane's commits are
    not in the shared store yet, so a host ``git status`` could not read them)."""
    snap = await lanes.tools.call("verification_snapshot", lease_id=lease["lease_id"])
    status = await lanes.tools.call("get_status", name=lease["name"])
    return {
        "creds": lanes.creds,
        "lease_id": lease["lease_id"],
        "expected_seq": status["seq"],
        "expected_head": snap["head"],
        "expected_status_sha256": snap["status_sha256"],
        "checkpoint_ref": "store checkpoint",
        "checkpoint_sha256": CHECKPOINT_SHA,
    }


async def test_a_writer_cannot_replace_a_shared_object_nor_move_main_after_pack_refs(
    tmp_path: Path, state_dir: Path
) -> None:
    repo = make_repo(tmp_path)
    wt = repo.worktree("wt-a", "alpha/work")
    # Every ref packed: `refs/heads/alpha/` and every loose ref are gone.
    git(repo.root, "pack-refs", "--all")
    assert not (repo.common_dir / "refs" / "heads" / "alpha").exists()
    common = repo.common_dir
    blob = git(repo.root, "rev-parse", "main:src/a.py")
    original = git(repo.root, "show", "main:src/a.py")
    probe = Probe(tmp_path, state_dir)
    probe.plan(
        [
            # The shared store, as the sandbox shows it: read-only.
            ["replace_shared", "run", _forge(_shared_inside(repo, blob), "def answer(): 0\n")],
            ["write_shared", "write", str(_shared_inside(repo, blob))],
            ["new_shared", "write", str(_shared_inside(repo, blob).parent / ("0" * 38))],
            # Where the store is on the host: the lane's own directory inside.
            ["replace_blob", "run", _forge(_loose(repo, blob), "def answer(): 0\n")],
            ["loose_main", "write", str(common / "refs" / "heads" / "main")],
            ["update_main", "run", _git("update-ref", "refs/heads/main", "HEAD")],
            ["packed_refs", "write", str(common / "packed-refs")],
            ["pack_refs", "run", _git("pack-refs", "--all")],
            ["edit", "write", str(wt / "src" / "a.py")],
            ["commit", "run", _git("commit", "-q", "-am", "inside")],
        ]
    )
    async with Client(probe.params) as client:
        tools = Tools(client)
        lanes = Lanes(tools, await acquire(tools), repo)
        lease = await lanes.start("alpha", wt, "alpha/work", ["src/a.py"], profile="probe")
        assert lease["confined"] is True
        seen = await probe.seen()
        assert seen["replace_shared"] == "rc:30:", seen
        assert seen["replace_blob"] == "rc:0:", seen  # into the lane's private store
        for name in ("write_shared", "new_shared", "loose_main", "packed_refs"):
            assert seen[name] == EROFS, (name, seen)
        for name in ("update_main", "pack_refs"):
            assert seen[name].startswith("rc:128:") and "Read-only" in seen[name], (name, seen)
        # The lane still commits on its own branch (its ref directory was made for it).
        assert seen["commit"] == "rc:0:", seen
        released = await tools.call("writer_release", **await _release_args(lanes, lease, wt))
    assert released["state"] == "released" and released["imported_objects"] == 4
    # main is where it was, its blob is the one it was, and fsck finds nothing.
    assert git(repo.root, "rev-parse", "main") == repo.base
    assert git(repo.root, "show", "main:src/a.py") == original
    assert (repo.root / "src" / "a.py").read_text().strip() == original
    assert git(repo.root, "show", "alpha/work:src/a.py") == PROBE_TEXT.strip()
    checked = _fsck(repo.root)
    assert checked.returncode == 0, checked.stderr


async def test_verify_runs_the_recipe_writer_start_recorded(
    tmp_path: Path, state_dir: Path
) -> None:
    repo = make_repo(tmp_path)
    wt = repo.worktree("wt-a", "alpha/work")
    blob = git(repo.root, "rev-parse", "main:.panewarden/recipes.toml")
    forged = f'[recipes.tests]\nargv = ["{PYTHON}", "-c", "pass"]\n'
    probe = Probe(tmp_path, state_dir)
    probe.plan(
        [
            # Breaks the tests: src/a.py no longer defines answer().
            ["edit", "write", str(wt / "src" / "a.py")],
            ["forge_recipe", "run", _forge(_shared_inside(repo, blob), forged)],
        ]
    )
    async with Client(probe.params) as client:
        tools = Tools(client)
        lanes = Lanes(tools, await acquire(tools), repo)
        lease = await lanes.start("alpha", wt, "alpha/work", ["src/a.py"], profile="probe")
        seen = await probe.seen()
        # Whoever else might write the store (before this fix, the lane itself) forges
        # the base commit's recipe: verify runs what writer_start recorded all the same.
        assert _host(_forge(_loose(repo, blob), forged)) == 0
        assert git(repo.root, "show", "main:.panewarden/recipes.toml") == forged.strip()
        snap = await tools.call("verification_snapshot", lease_id=lease["lease_id"])
        record = await tools.call(
            "verify",
            creds=lanes.creds,
            lease_id=lease["lease_id"],
            expected_worktree_sha256=snap["worktree_sha256"],
            recipe="tests",
        )
    assert record["state"] == "failed" and record["exit_code"] == 1, record
    assert seen["forge_recipe"] == "rc:30:", seen


async def test_a_release_imports_the_lanes_objects_verified_and_refuses_a_corrupt_one(
    tmp_path: Path, state_dir: Path
) -> None:
    repo = make_repo(tmp_path)
    wt = repo.worktree("wt-a", "alpha/work")
    private = repo.common_dir / "worktrees" / "wt-a" / "panewarden-objects"
    blob = _blob_id(PROBE_TEXT)
    loose = private / blob[:2] / blob[2:]
    probe = Probe(tmp_path, state_dir)
    probe.plan(
        [
            ["edit", "write", str(wt / "src" / "a.py")],
            ["add", "run", _git("add", "src/a.py")],
            ["commit", "run", _git("commit", "-q", "-m", "inside")],
            # The lane's own store is the lane's to write: a blob that is not its id.
            ["corrupt", "run", _forge(loose, "not what the id says\n")],
        ]
    )
    async with Client(probe.params) as client:
        tools = Tools(client)
        lanes = Lanes(tools, await acquire(tools), repo)
        lease = await lanes.start("alpha", wt, "alpha/work", ["src/a.py"], profile="probe")
        seen = await probe.seen()
        assert seen["commit"] == "rc:0:" and seen["corrupt"] == "rc:0:", seen
        commit = git(wt, "rev-parse", "alpha/work")
        # The commit is in the lane's private store, not in the shared one.
        assert _host(["git", "-C", str(repo.root), "cat-file", "-e", commit]) != 0
        args = await _release_args(lanes, lease, wt)
        refused = await tools.error("writer_release", **args)
        assert refused["code"] == "object_invalid", refused
        assert blob in refused["message"]
        # Refused with the pane untouched.
        (listed,) = (await tools.call("writer_list"))["leases"]
        assert listed["state"] == "active"
        assert (await tools.call("get_status", name="alpha"))["lifecycle"] == "running"
        # Put right, the release imports the lane's commit, tree and blob.
        body = b"blob %d\0" % len(PROBE_TEXT) + PROBE_TEXT.encode()
        loose.chmod(0o644)
        loose.write_bytes(zlib.compress(body))
        released = await tools.call("writer_release", **await _release_args(lanes, lease, wt))
    assert released["state"] == "released" and released["imported_objects"] == 4
    assert released["release_head"] == commit
    assert git(repo.root, "cat-file", "-t", commit) == "commit"
    assert git(repo.root, "show", "alpha/work:src/a.py") == PROBE_TEXT.strip()
    assert git(repo.root, "rev-parse", "main") == repo.base
    checked = _fsck(repo.root)
    assert checked.returncode == 0, checked.stderr


async def test_a_writer_that_broke_its_index_is_ended_by_writer_close(
    tmp_path: Path, state_dir: Path
) -> None:
    repo = make_repo(tmp_path)
    wt = repo.worktree("wt-a", "alpha/work")
    index = repo.common_dir / "worktrees" / "wt-a" / "index"
    probe = Probe(tmp_path, state_dir)
    probe.plan([["index", "write", str(index)]])
    async with Client(probe.params) as client:
        tools = Tools(client)
        lanes = Lanes(tools, await acquire(tools), repo)
        lease = await lanes.start("alpha", wt, "alpha/work", ["src/a.py"], profile="probe")
        seen = await probe.seen()
        assert seen["index"] == f"ok:{len(PROBE_TEXT)}", seen
        status = await tools.call("get_status", name="alpha")
        # Its evidence cannot be read: no release can end it.
        refused = await tools.error(
            "writer_release",
            creds=lanes.creds,
            lease_id=lease["lease_id"],
            expected_seq=status["seq"],
            expected_head=repo.base,
            expected_status_sha256=CHECKPOINT_SHA,
            checkpoint_ref="store checkpoint",
            checkpoint_sha256=CHECKPOINT_SHA,
        )
        assert refused["code"] == "git_precondition", refused
        stale = {**lanes.creds, "fence_token": "0" * len(lanes.creds["fence_token"])}
        fenced = await tools.error(
            "writer_close", creds=stale, lease_id=lease["lease_id"], reason="index broken"
        )
        assert fenced["code"] == "fence_invalid", fenced
        closed = await tools.call(
            "writer_close", creds=lanes.creds, lease_id=lease["lease_id"], reason="index broken"
        )
        assert closed["state"] == "abandoned" and closed["failure"] == "forced", closed
        assert closed["close_reason"] == "index broken"
        assert (await tools.call("list_panes"))["panes"] == []
        again = await tools.error(
            "writer_close", creds=lanes.creds, lease_id=lease["lease_id"], reason="again"
        )
        assert again["code"] == "lease_state", again
        # Not retained: the worktree takes a new lane (after its index is put right).
        (listed,) = (await tools.call("writer_list"))["leases"]
        assert listed["state"] == "abandoned"
    # The branch and main are where they were.
    assert head(wt) == repo.base and git(repo.root, "rev-parse", "main") == repo.base


async def test_a_lane_tree_naming_dot_git_is_refused_at_release(
    tmp_path: Path, state_dir: Path
) -> None:
    """Every object hashes right, yet Git's own checks refuse it: the import runs
    ``index-pack --strict``, and nothing of the lane reaches the shared store."""
    repo = make_repo(tmp_path)
    wt = repo.worktree("wt-a", "alpha/work")
    plant = (
        "b=$(echo x | git hash-object -w --stdin) && "
        't=$(printf "100644 blob %s\\t.git\\n" "$b" | git mktree) && '
        'c=$(git commit-tree "$t" -p HEAD -m planted) && '
        'git update-ref refs/heads/alpha/work "$c"'
    )
    probe = Probe(tmp_path, state_dir)
    probe.plan([["plant", "run", {"argv": ["sh", "-c", plant], "env": LANE_GIT_ENV}]])
    async with Client(probe.params) as client:
        tools = Tools(client)
        lanes = Lanes(tools, await acquire(tools), repo)
        lease = await lanes.start("alpha", wt, "alpha/work", ["src/a.py"], profile="probe")
        seen = await probe.seen()
        assert seen["plant"] == "rc:0:", seen
        planted = git(wt, "rev-parse", "alpha/work")
        assert planted != repo.base
        refused = await tools.error("writer_release", **await _release_args(lanes, lease, wt))
        assert refused["code"] == "object_invalid", refused
        (listed,) = (await tools.call("writer_list"))["leases"]
        assert listed["state"] == "active"
        assert "index-pack" in refused["message"], refused
    # Nothing of it is in the shared store (the branch names it until a release).
    assert _host(["git", "-C", str(repo.root), "cat-file", "-e", planted]) != 0
    assert git(repo.root, "rev-parse", "main") == repo.base
    assert sorted((repo.common_dir / "objects" / "pack").iterdir()) == []
