"""A writer's ref directory is its own: a branch directly under ``refs/heads`` is refused
(``refs/heads`` would have to be writable), and so is a branch whose directory holds any
other ref, loose or packed (the lane could shadow it with a loose ref); the directory is
made before the bind when packing removed it."""

from __future__ import annotations

import pytest

from tests.lanes.conftest import Lanes
from tests.lanes.gitrepo import git

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


async def test_a_branch_without_a_directory_of_its_own_is_refused(lanes: Lanes) -> None:
    repo = lanes.repo
    top = repo.worktree("wt-top", "top")
    assert await lanes.refused("t1", top, "top", ["src"]) == "invalid_argument"

    shared = repo.worktree("wt-s", "team/one")
    git(repo.root, "branch", "team/two", repo.base)
    assert await lanes.refused("t2", shared, "team/one", ["src"]) == "git_precondition"
    # Packed, the other ref refuses the lane all the same.
    git(repo.root, "pack-refs", "--all")
    assert not (repo.common_dir / "refs" / "heads" / "team").exists()
    assert await lanes.refused("t3", shared, "team/one", ["src"]) == "git_precondition"
    assert (await lanes.tools.call("writer_list"))["leases"] == []

    # Alone in its packed-away directory, a lane starts; the directory is made for it.
    own = repo.worktree("wt-own", "own/work")
    git(repo.root, "pack-refs", "--all")
    lease = await lanes.start("t4", own, "own/work", ["src"])
    assert lease["state"] == "active"
    assert (repo.common_dir / "refs" / "heads" / "own").is_dir()
    assert (repo.common_dir / "worktrees" / "wt-own" / "panewarden-objects").is_dir()
