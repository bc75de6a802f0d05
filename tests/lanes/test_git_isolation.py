"""No panewarden Git call runs a program the repository names or writes an index, and
the status digest is still what the operator's shell prints; tested against a
repository that names a marker-writing program at every point Git runs one."""

from __future__ import annotations

import ast
import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from protocol.errors import PanewardenError
from supervisor.lanes.repo.git import Git
from supervisor.lanes.repo.worktree_digest import worktree_digest
from supervisor.workers.subprocesses import ManagedChildren
from tests.lanes.conftest import CHECKPOINT_SHA, Lanes
from tests.lanes.gitrepo import GIT_ENV, Repo, git, head, make_repo, status_sha256
from tests.lanes.hostile import Hostile, make_hostile

pytestmark = pytest.mark.anyio
HOST = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
SUPERVISOR = Path(__file__).resolve().parents[2] / "supervisor"


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return make_repo(tmp_path)


def _plain(cwd: Path, *args: str) -> bytes:
    """``git ARGS`` as an operator's shell runs it (the repository's config in force)."""
    return subprocess.run(
        ["git", "-C", str(cwd), *args],
        env=GIT_ENV, stdin=subprocess.DEVNULL, capture_output=True, timeout=30, check=True,
    ).stdout  # fmt: skip


def _live(hostile: Hostile, wt: Path, base: str) -> None:
    """Plain Git runs the repository's programs and rewrites the index: what the checks
    below look for is there to be found."""
    before = hostile.fingerprint()
    hostile.touch(wt)
    _plain(wt, "status", "--porcelain=v1", "--untracked-files=all")
    _plain(wt, "diff", base, "--")
    ran = set(hostile.ran())
    assert {"filter-clean", "filter-eq-clean", "fsmonitor", "post-index-change"} <= ran, ran
    assert "diff-external" in ran or "diff-command" in ran, ran
    assert hostile.fingerprint() != before
    hostile.log.unlink()


async def test_no_git_query_runs_a_repository_program_or_writes_an_index(repo: Repo) -> None:
    wt = repo.worktree("wt-a", "lane-a")
    hostile = make_hostile(repo, wt)
    (wt / "src" / "a.py").write_text("def answer() -> int:\n    return 43\n")
    (wt / "docs" / "guide.md").write_text("# Guide, edited\n")
    (wt / "notes.txt").write_text("untracked\n")
    _live(hostile, wt, repo.base)

    hostile.touch(wt)
    before = hostile.fingerprint()
    gitq = Git(ManagedChildren().run, HOST)
    for where in (str(wt), str(repo.root)):
        await gitq.layout(where)
        await gitq.branch(where)
        head = await gitq.head(where)
        assert await gitq.is_ancestor(where, repo.base, head)
        await gitq.status(where)
        await gitq.diff_from(where, repo.base)
        await gitq.untracked(where)
        assert await gitq.show(where, head, "src/a.py", 65536) is not None
        await worktree_digest(gitq, where, repo.base)
    status = await gitq.status(str(wt))

    assert hostile.ran() == []
    assert hostile.fingerprint() == before
    # The filters are identities: raw bytes and cleaned bytes agree, and so does the
    # digest with what the operator's shell prints (which runs them).
    assert (
        status.sha256
        == hashlib.sha256(
            _plain(wt, "status", "--porcelain=v1", "--untracked-files=all")
        ).hexdigest()
    )


async def test_a_stale_file_whose_filter_changes_it_reads_as_its_raw_bytes(
    repo: Repo, tmp_path: Path
) -> None:
    """Git cannot run the clean filter here, so a filtered file with stale stat data is
    compared as it is on disk; once the operator's own ``git status`` has refreshed the
    index (it writes it), both agree again."""
    wt = repo.worktree("wt-a", "lane-a")
    strip = tmp_path / "strip.sh"
    strip.write_text("#!/bin/sh\nsed 's/ *$//'\n")
    strip.chmod(0o755)
    git(repo.root, "config", "filter.strip.clean", str(strip))
    (wt / ".gitattributes").write_text("*.txt filter=strip\n")
    (wt / "spaced.txt").write_text("trailing   \n")
    git(wt, "add", ".gitattributes", "spaced.txt")
    git(wt, "commit", "-q", "-m", "a filtered file")
    assert git(wt, "cat-file", "blob", "HEAD:spaced.txt") == "trailing"
    gitq = Git(ManagedChildren().run, HOST)
    info = os.stat(wt / "spaced.txt")
    os.utime(wt / "spaced.txt", ns=(info.st_atime_ns, info.st_mtime_ns - 10_000_000_000))

    raw = await gitq.status(str(wt))
    assert raw.sha256 == hashlib.sha256(b" M spaced.txt\n").hexdigest()
    assert status_sha256(wt) == hashlib.sha256(b"").hexdigest()  # refreshes the index
    assert (await gitq.status(str(wt))).sha256 == status_sha256(wt)


def _marker_filter(tmp: Path, name: str) -> str:
    program = tmp / f"{name}.sh"
    program.write_text(f"#!/bin/sh\necho {name} >> '{tmp / 'ran.log'}'\ncat\n")
    program.chmod(0o755)
    return str(program)


async def test_git_never_looks_into_an_absorbed_submodule(repo: Repo, tmp_path: Path) -> None:
    """Git looks into a checked-out submodule by running Git there, under the
    submodule's own config; the service's Git never does (``--ignore-submodules=dirty``),
    so its filter never runs, and the status digest is what the operator's shell prints
    when the submodule is clean."""
    wt = repo.worktree("wt-a", "lane-a")
    library = tmp_path / "library"
    library.mkdir()
    (library / ".gitattributes").write_text("* filter=sub\n")
    (library / "lib.txt").write_text("library\n")
    git(library, "init", "-q", "-b", "main")
    git(library, "add", "-A")
    git(library, "commit", "-q", "-m", "library")
    git(wt, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(library), "lib")
    git(wt, "commit", "-q", "-m", "a submodule")
    git(wt / "lib", "config", "filter.sub.clean", _marker_filter(tmp_path, "submodule"))
    log = tmp_path / "ran.log"

    def touch() -> None:
        path = wt / "lib" / "lib.txt"
        info = os.stat(path)
        os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns - 10_000_000_000))

    touch()
    _plain(wt, "status", "--porcelain=v1", "--untracked-files=all")
    assert set(log.read_text().split()) == {"submodule"}, "the setup is not live"
    log.unlink()
    touch()
    gitq = Git(ManagedChildren().run, HOST)
    status = await gitq.status(str(wt))
    await gitq.diff_from(str(wt), repo.base)
    await worktree_digest(gitq, str(wt), repo.base)
    assert not log.exists(), log.read_text()
    assert (
        status.sha256
        == hashlib.sha256(
            _plain(wt, "status", "--porcelain=v1", "--untracked-files=all")
        ).hexdigest()
    )


async def test_an_embedded_repository_or_a_linked_git_dir_is_refused(
    repo: Repo, tmp_path: Path
) -> None:
    """A ``.git`` below the worktree's top that is a directory (an embedded repository,
    at any depth, ignored or not) or a link is ``git_precondition`` naming it, before any
    Git that reads the index runs; its filter never runs."""
    wt = repo.worktree("wt-a", "lane-a")
    log = tmp_path / "ran.log"
    gitq = Git(ManagedChildren().run, HOST)
    outer = wt / "src" / "outer"
    inner = outer / "deep" / "inner"
    for path in (outer, inner):
        path.mkdir(parents=True)
        (path / ".gitattributes").write_text("* filter=emb\n")
        (path / "e.txt").write_text("embedded\n")
        git(path, "init", "-q", "-b", "main")
    git(inner, "add", "-A")
    git(inner, "commit", "-q", "-m", "inner")
    git(outer, "add", "-A")
    git(outer, "commit", "-q", "-m", "outer")
    git(wt, "add", "src/outer")
    for path in (outer, inner):
        git(path, "config", "filter.emb.clean", _marker_filter(tmp_path, "embedded"))
        (path / "e.txt").touch()
    for call in (gitq.status(str(wt)), gitq.diff_from(str(wt), repo.base), gitq.untracked(str(wt))):
        with pytest.raises(PanewardenError) as caught:
            await call
        assert caught.value.code.value == "git_precondition"
        assert f"{outer / '.git'} is an embedded repository" in caught.value.message
    git(wt, "reset", "-q", "--", "src/outer")
    (outer / ".git").rename(tmp_path / "outer.git")
    (outer / ".git").symlink_to(tmp_path / "outer.git")
    (wt / "src" / ".gitignore").write_text("*\n")
    with pytest.raises(PanewardenError) as caught:
        await gitq.status(str(wt))
    assert f"{outer / '.git'} is a symbolic link" in caught.value.message
    assert not log.exists(), log.read_text()


@pytest.mark.timeout(180)
async def test_no_writer_or_verification_tool_runs_a_repository_program(lanes: Lanes) -> None:
    """writer_start, verification_snapshot, verify and writer_release on a hostile repository:
    not one marker, and every index byte-identical with the same mtime after each."""
    repo = lanes.repo
    wt = repo.worktree("wt-a", "lane-a/work")
    hostile = make_hostile(repo, wt)
    (wt / "src" / "a.py").write_text("def answer() -> int:\n    return 43\n")
    (wt / "notes.txt").write_text("untracked\n")
    _live(hostile, wt, repo.base)
    # The evidence, as the coordinator's shell reads it (running the programs).
    args = lanes.writer_args("alpha", wt, "lane-a/work", ["src"])
    hostile.log.unlink(missing_ok=True)
    hostile.touch(wt)
    before = hostile.fingerprint()

    lease = await lanes.tools.call("writer_start", **args)
    assert lease["state"] == "active"
    assert (hostile.ran(), hostile.fingerprint()) == ([], before)
    snap = await lanes.tools.call("verification_snapshot", lease_id=lease["lease_id"])
    assert snap["status_sha256"] == args["expected_status_sha256"]
    assert (hostile.ran(), hostile.fingerprint()) == ([], before)

    seen = await lanes.tools.wait("alpha", until=["idle"])
    # The recipe is the repository's code too, but it runs in the sandbox and runs no Git.
    record = await lanes.tools.call(
        "verify",
        creds=lanes.creds,
        lease_id=lease["lease_id"],
        recipe="slow-pass",
        expected_worktree_sha256=snap["worktree_sha256"],
    )
    assert record["state"] == "passed", record
    assert (hostile.ran(), hostile.fingerprint()) == ([], before)
    release = {
        "creds": lanes.creds,
        "lease_id": lease["lease_id"],
        "expected_seq": seen["seq"],
        "expected_head": head(wt),
        "expected_status_sha256": status_sha256(wt),
        "checkpoint_ref": "issue 10 checkpoint",
        "checkpoint_sha256": CHECKPOINT_SHA,
    }
    hostile.log.unlink(missing_ok=True)
    hostile.touch(wt)
    before = hostile.fingerprint()
    released = await lanes.tools.call("writer_release", **release)
    assert released["state"] == "released"
    assert (hostile.ran(), hostile.fingerprint()) == ([], before)


def test_no_other_supervisor_module_runs_git() -> None:
    """Only supervisor/lanes/repo/git.py names the git program (its argv comes from
    git_command.py): no other module can run Git around the isolation."""
    found = []
    for path in sorted(SUPERVISOR.rglob("*.py")):
        if path.name in ("git.py", "git_command.py") and path.parent.name == "repo":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and node.value in ("git", "/usr/bin/git"):
                found.append(f"{path.relative_to(SUPERVISOR)}:{node.lineno}")
    assert found == []


async def test_an_index_that_is_not_a_regular_file_is_git_precondition(repo: Repo) -> None:
    wt = repo.worktree("wt-a", "lane-a")
    index = Path(git(wt, "rev-parse", "--path-format=absolute", "--git-dir")) / "index"
    index.rename(index.with_name("index.real"))
    index.symlink_to(index.with_name("index.real"))
    with pytest.raises(PanewardenError) as caught:
        await Git(ManagedChildren().run, HOST).status(str(wt))
    assert caught.value.code.value == "git_precondition"
    assert "cannot copy the index" in caught.value.message
