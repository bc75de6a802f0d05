"""The service reads where a worktree's Git lives from its files: a symlinked ``.git``, an
admin dir that names another worktree, and a worktree larger than the walk's bound are
``git_precondition``; Git is pinned to what was read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from protocol.errors import PanewardenError
from supervisor.lanes.repo import git_dirs
from supervisor.lanes.repo.git import Git
from supervisor.workers.subprocesses import ManagedChildren
from tests.lanes.gitrepo import Repo, git, make_repo

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
HOST = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return make_repo(tmp_path)


def _refused(directory: Path) -> str:
    with pytest.raises(PanewardenError) as caught:
        git_dirs.resolve(str(directory))
    assert caught.value.code.value == "git_precondition"
    return caught.value.message


def test_a_linked_worktree_is_read_from_its_files(repo: Repo) -> None:
    wt = repo.worktree("wt-a", "lane-a")
    dirs = git_dirs.resolve(str(wt / "src"))
    assert dirs.toplevel == str(wt)
    assert dirs.common_dir == str(repo.common_dir)
    assert dirs.git_dir == str(repo.common_dir / "worktrees" / "wt-a")
    primary = git_dirs.resolve(str(repo.root))
    assert primary.git_dir == primary.common_dir == str(repo.common_dir)


def test_a_symlinked_top_git_is_refused(repo: Repo, tmp_path: Path) -> None:
    wt = repo.worktree("wt-a", "lane-a")
    (wt / ".git").rename(tmp_path / "gitfile")
    (wt / ".git").symlink_to(tmp_path / "gitfile")
    assert "is a symbolic link" in _refused(wt)


def test_an_admin_dir_that_names_another_worktree_is_refused(repo: Repo) -> None:
    wt = repo.worktree("wt-a", "lane-a")
    other = repo.worktree("wt-b", "lane-b")
    admin = repo.common_dir / "worktrees" / "wt-a"
    (wt / ".git").write_text(f"gitdir: {repo.common_dir / 'worktrees' / 'wt-b'}\n")
    assert "does not belong to the worktree" in _refused(wt)
    (wt / ".git").write_text(f"gitdir: {admin}\n")
    (admin / "commondir").write_text("/nonexistent\n")
    assert "names no directory" in _refused(wt)
    (admin / "commondir").write_text(str(other / "src") + "\n")
    # The commondir names a directory: read, and it is the caller's to compare it with
    # the recorded repository (verification does).
    assert git_dirs.resolve(str(wt)).common_dir == str(other / "src")


async def test_git_is_pinned_to_the_dirs_read(repo: Repo) -> None:
    """Git is given the dirs the service read (GIT_DIR, GIT_WORK_TREE, GIT_COMMON_DIR)
    and answers with them."""
    wt = repo.worktree("wt-a", "lane-a")
    gitq = Git(ManagedChildren().run, HOST)
    dirs = git_dirs.resolve(str(wt))
    layout = await gitq.layout(str(wt))
    assert (layout.toplevel, layout.git_dir, layout.common_dir) == (
        dirs.toplevel,
        dirs.git_dir,
        dirs.common_dir,
    )


def test_the_walk_is_bounded(repo: Repo) -> None:
    wt = repo.worktree("wt-a", "lane-a")
    for i in range(20):
        (wt / "docs" / f"f{i}.md").write_text("x\n")
    dirs = git_dirs.resolve(str(wt))
    git_dirs.nested_git_entries(dirs)
    with pytest.raises(PanewardenError) as caught:
        git_dirs.nested_git_entries(dirs, limit=10)
    assert "holds more than 10 files and directories" in caught.value.message


def test_an_absorbed_submodule_is_accepted(repo: Repo, tmp_path: Path) -> None:
    wt = repo.worktree("wt-a", "lane-a")
    library = tmp_path / "library"
    library.mkdir()
    (library / "lib.txt").write_text("library\n")
    git(library, "init", "-q", "-b", "main")
    git(library, "add", "-A")
    git(library, "commit", "-q", "-m", "library")
    git(wt, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(library), "lib")
    git_dirs.nested_git_entries(git_dirs.resolve(str(wt)))
    (wt / "lib" / ".git").write_text(f"gitdir: {library / '.git'}\n")
    with pytest.raises(PanewardenError) as caught:
        git_dirs.nested_git_entries(git_dirs.resolve(str(wt)))
    assert "names a git dir outside the modules/" in caught.value.message
