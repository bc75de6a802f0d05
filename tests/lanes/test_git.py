"""The Git seam: fixed argv, cleared environment, typed failures, no repository code
run; and the worktree digest, recomputed here from its documented format."""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from protocol.errors import PanewardenError
from supervisor.lanes.repo.git import Git
from supervisor.lanes.repo.worktree_digest import worktree_digest
from supervisor.workers.subprocesses import ChildResult, ManagedChildren
from tests.lanes.gitrepo import GIT_ENV, Repo, git, make_repo, status_sha256

pytestmark = pytest.mark.anyio
HOST = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


class Recording:
    """The real runner, remembering each call's argv and environment."""

    def __init__(self) -> None:
        self.children = ManagedChildren()
        self.calls: list[tuple[list[str], dict[str, str]]] = []

    async def __call__(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        timeout_s: float,
        output_limit: int = 65536,
    ) -> ChildResult:
        self.calls.append((list(argv), dict(env)))
        return await self.children.run(
            argv, cwd=cwd, env=env, timeout_s=timeout_s, output_limit=output_limit
        )


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return make_repo(tmp_path)


async def test_linked_worktrees_are_told_from_the_primary_checkout_and_clones(
    repo: Repo, tmp_path: Path
) -> None:
    runner = Recording()
    env = {
        **HOST,
        "GIT_DIR": "/nonexistent",
        "GIT_WORK_TREE": "/",
        "GIT_CONFIG_GLOBAL": "/x",
        "PANEWARDEN_TOKEN_FILE": "/secret/token",
    }
    gitq = Git(runner, env)
    wt = repo.worktree("wt-a", "lane-a")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(repo.root), str(clone))

    linked = await gitq.layout(str(wt / "src"))
    assert linked.linked and linked.toplevel == str(wt)
    assert linked.common_dir == str(repo.common_dir)
    assert not (await gitq.layout(str(repo.root))).linked
    assert not (await gitq.layout(str(clone))).linked
    assert await gitq.branch(str(wt)) == "lane-a"
    assert await gitq.head(str(wt)) == repo.base
    assert await gitq.is_ancestor(str(wt), repo.base, repo.base)
    git(wt, "checkout", "-q", "--detach")
    assert await gitq.branch(str(wt)) is None

    for argv, child_env in runner.calls:
        assert argv[:4] == ["git", "--no-pager", "--no-optional-locks", "-C"]
        # Nothing of the supervisor's environment but PATH (its GIT_DIR above among it):
        # the git dirs are the ones the supervisor resolved from the worktree's files.
        assert child_env["PATH"] == HOST["PATH"] and child_env["HOME"] == "/nonexistent"
        assert child_env["GIT_CONFIG_GLOBAL"] == "/dev/null"
        assert child_env["GIT_CONFIG_NOSYSTEM"] == "1"
        assert child_env.get("GIT_DIR") != "/nonexistent"
        assert child_env.get("GIT_WORK_TREE") != "/"
        assert not [key for key in child_env if key.startswith("PANEWARDEN")]
        assert "/secret/token" not in child_env.values()


async def test_the_status_digest_is_that_of_the_command_line(repo: Repo) -> None:
    wt = repo.worktree("wt-a", "lane-a")
    (wt / "src" / "a.py").write_text("changed\n")
    (wt / "new dir").mkdir()
    (wt / "new dir" / "naïve name.txt").write_text("x\n")
    git(wt, "add", "src/a.py")
    (wt / "docs" / "guide.md").unlink()
    gitq = Git(ManagedChildren().run, HOST)
    assert (await gitq.status(str(wt))).sha256 == status_sha256(wt)


async def test_reading_never_runs_the_repositorys_fsmonitor_hook(
    repo: Repo, tmp_path: Path
) -> None:
    marker = tmp_path / "hook-ran"
    hook = tmp_path / "fsmonitor.sh"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    hook.chmod(0o755)
    git(repo.root, "config", "core.fsmonitor", str(hook))
    wt = repo.worktree("wt-a", "lane-a")
    _plain_status(wt)
    assert marker.exists(), "plain git status runs the hook: the check below could not fail"
    marker.unlink()
    gitq = Git(ManagedChildren().run, HOST)
    await gitq.status(str(wt))
    await gitq.diff_from(str(wt), repo.base)
    assert not marker.exists()


async def test_failures_through_the_seam_are_git_precondition(repo: Repo) -> None:
    async def timing_out(argv: Sequence[str], **_kw: object) -> ChildResult:
        return ChildResult(-9, True, 30.0, b"", b"", "", "", 0, 0)

    async def missing(argv: Sequence[str], **_kw: object) -> ChildResult:
        return await ManagedChildren().run(["/nonexistent/git"], cwd="/", env={}, timeout_s=5)

    for runner, words in ((timing_out, "took longer"), (missing, "cannot run")):
        with pytest.raises(PanewardenError) as caught:
            await Git(runner, HOST).head(str(repo.root))
        assert caught.value.code.value == "git_precondition"
        assert words in caught.value.message
    with pytest.raises(PanewardenError) as caught:
        await Git(ManagedChildren().run, HOST).layout("/")
    assert caught.value.code.value == "git_precondition"


async def test_show_reads_a_file_at_a_commit_and_says_when_it_is_absent(repo: Repo) -> None:
    gitq = Git(ManagedChildren().run, HOST)
    wt = str(repo.worktree("wt-a", "lane-a"))
    data = await gitq.show(wt, repo.base, ".panewarden/recipes.toml", 65536)
    assert data == (repo.root / ".panewarden" / "recipes.toml").read_bytes()
    assert await gitq.show(wt, repo.base, "no/such/file", 65536) is None
    with pytest.raises(PanewardenError) as caught:
        await gitq.show(wt, "0" * 40, "README", 65536)
    assert caught.value.code.value == "git_precondition"
    with pytest.raises(PanewardenError):
        await gitq.show(wt, repo.base, ".panewarden/recipes.toml", 10)


def _plain_status(wt: Path) -> None:
    subprocess.run(
        ["git", "-C", str(wt), "status"], env=GIT_ENV, capture_output=True, timeout=30, check=False
    )


def _entry(wt: Path, name: bytes) -> bytes:
    path = wt / os.fsdecode(name)
    if path.is_symlink():
        kind, data = b"link", os.readlink(path).encode()
    else:
        kind = b"exec" if os.stat(path).st_mode & 0o111 else b"file"
        data = path.read_bytes()
    sha = hashlib.sha256(data).hexdigest().encode()
    return b"%s %d %s %d %s\n" % (kind, len(name), name, len(data), sha)


def _expected_digest(wt: Path, base: str, scopes: Sequence[str] = ()) -> str:
    """worktree_sha256 from its documented format, with the git command line."""
    diff = subprocess.run(
        ["git", "-C", str(wt), "diff", "--binary", "--full-index", "--no-color",
         "--no-ext-diff", "--no-textconv", base, "--"],
        env=GIT_ENV, capture_output=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    names = git(wt, "ls-files", "--others", "--exclude-standard", "-z").split("\0")
    h = hashlib.sha256(b"panewarden-worktree-v2\n")
    h.update(b"diff %d %s\n" % (len(diff), hashlib.sha256(diff).hexdigest().encode()))
    for name in sorted(os.fsencode(n) for n in names if n):
        h.update(_entry(wt, name))
    ignored: list[str] = []
    if scopes:
        listed = git(
            wt, "ls-files", "--others", "--ignored", "--exclude-standard", "-z", "--", *scopes
        )
        ignored = [n for n in listed.split("\0") if n]
    h.update(b"ignored %d\n" % len(ignored))
    for name in sorted(os.fsencode(n) for n in ignored):
        h.update(_entry(wt, name))
    return h.hexdigest()


async def test_the_worktree_digest_follows_its_format_and_sees_every_change(repo: Repo) -> None:
    gitq = Git(ManagedChildren().run, HOST)
    wt = repo.worktree("wt-a", "lane-a")

    async def digest() -> str:
        return (await worktree_digest(gitq, str(wt), repo.base)).sha256

    clean = await digest()
    assert clean == _expected_digest(wt, repo.base)
    (wt / "src" / "a.py").write_text("edited\n")
    git(wt, "commit", "-q", "-am", "committed edit")
    committed = await digest()
    (wt / "notes.txt").write_text("untracked\n")
    (wt / "link").symlink_to("/dev/zero")  # hashed as a link: never followed
    os.mkfifo(wt / "fifo")  # listed by nobody, never opened
    untracked = await digest()
    assert untracked == _expected_digest(wt, repo.base)
    (wt / "notes.txt").chmod(0o755)
    executable = await digest()
    (wt / "out").mkdir()
    (wt / "out" / "ignored.txt").write_text("ignored by .gitignore\n")
    ignored = await digest()
    assert len({clean, committed, untracked, executable}) == 4
    # Ignored outside the lane's owned scopes (a recipe's outputs): not in the digest.
    assert ignored == executable
    # Ignored inside them (the lane wrote it, and made it ignored): in it.
    (wt / "src" / "shadow").mkdir()
    (wt / "src" / "shadow" / ".gitignore").write_text("*\n")
    (wt / "src" / "shadow" / "__init__.py").write_text("ANSWER = 0\n")
    scoped = await worktree_digest(gitq, str(wt), repo.base, ["src"])
    assert scoped.sha256 == _expected_digest(wt, repo.base, ["src"])
    assert scoped.ignored == ("src/shadow/.gitignore", "src/shadow/__init__.py")
    assert await digest() == executable
    (wt / "src" / "shadow" / "__init__.py").write_text("ANSWER = 1\n")
    assert (await worktree_digest(gitq, str(wt), repo.base, ["src"])).sha256 != scoped.sha256
