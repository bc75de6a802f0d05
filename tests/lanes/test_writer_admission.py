"""writer_start admits one writer per linked worktree on exact Git evidence and scopes
nobody else holds; every refusal has its code and leaves no pane and no lease behind."""

from __future__ import annotations

import hashlib

import pytest

from tests.lanes.conftest import Lanes
from tests.lanes.gitrepo import git

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]


async def _panes(lanes: Lanes) -> list[str]:
    return sorted(p["name"] for p in (await lanes.tools.call("list_panes"))["panes"])


async def _leases(lanes: Lanes) -> list[tuple[str, str]]:
    listed = (await lanes.tools.call("writer_list"))["leases"]
    return [(lease["name"], lease["state"]) for lease in listed]


async def test_conflicting_writers_are_refused_with_their_code_and_start_nothing(
    lanes: Lanes,
) -> None:
    repo = lanes.repo
    wt_a = repo.worktree("wt-a", "lane-a/work")
    wt_b = repo.worktree("wt-b", "lane-b/work")
    wt_c = repo.worktree("wt-c", "lane-c/work")
    (wt_c / "src" / "c.py").write_text("C = 3\n")
    git(wt_c, "add", "src/c.py")
    git(wt_c, "commit", "-q", "-m", "c moves on")

    first = await lanes.start("alpha", wt_a, "lane-a/work", ["src/a.py"], locked=["docs"])
    assert first["state"] == "active"
    assert first["owned_scopes"] == ["src/a.py"] and first["locked_scopes"] == ["docs"]
    assert first["repository"] == str(repo.common_dir)
    assert first["worktree"] == str(wt_a) and first["head"] == repo.base
    baseline = (await _panes(lanes), await _leases(lanes))
    assert baseline == (["alpha"], [("alpha", "active")])

    refusals = {
        # `src` contains the first writer's owned `src/a.py`.
        "owned overlaps owned": await lanes.refused("b1", wt_b, "lane-b/work", ["src"]),
        # `docs/guide.md` lies in the first writer's locked `docs`.
        "owns a locked scope": await lanes.refused("b2", wt_b, "lane-b/work", ["docs/guide.md"]),
        # Locking what the first writer owns.
        "locks an owned scope": await lanes.refused(
            "b3", wt_b, "lane-b/work", ["tests"], locked=["src/a.py/"]
        ),
        "protected branch": await lanes.refused(
            "b4", wt_b, "lane-b/work", ["tests"], protected=["main", "lane-b/work"]
        ),
        "primary checkout": await lanes.refused(
            "b5", repo.root, "main", ["tests"], protected=["x"]
        ),
        "stale HEAD": await lanes.refused(
            "b6", wt_c, "lane-c/work", ["tests"], expected_head=repo.base
        ),
        "wrong status digest": await lanes.refused(
            "b7",
            wt_b,
            "lane-b/work",
            ["tests"],
            expected_status_sha256=hashlib.sha256(b"?? stray\n").hexdigest(),
        ),
        "same worktree": await lanes.refused("b8", wt_a, "lane-a/work", ["tests"]),
        "wrong branch": await lanes.refused("b9", wt_b, "lane-a/work", ["tests"]),
        "base not an ancestor": await lanes.refused(
            "b10", wt_b, "lane-b/work", ["tests"], base_commit=git(wt_c, "rev-parse", "HEAD")
        ),
        "a glob": await lanes.refused("b11", wt_b, "lane-b/work", ["src/*.py"]),
        "a parent step": await lanes.refused("b12", wt_b, "lane-b/work", ["src/../docs"]),
        "absolute scope": await lanes.refused("b13", wt_b, "lane-b/work", ["/src"]),
        "a backslash": await lanes.refused("b14", wt_b, "lane-b/work", ["src\\a.py"]),
        "not the worktree's top": await lanes.refused(
            "b15", wt_b / "src", "lane-b/work", ["tests"]
        ),
    }
    assert refusals == {
        "owned overlaps owned": "scope_conflict",
        "owns a locked scope": "scope_conflict",
        "locks an owned scope": "scope_conflict",
        "protected branch": "git_precondition",
        "primary checkout": "git_precondition",
        "stale HEAD": "git_precondition",
        "wrong status digest": "git_precondition",
        "same worktree": "scope_conflict",
        "wrong branch": "git_precondition",
        "base not an ancestor": "git_precondition",
        "a glob": "invalid_argument",
        "a parent step": "invalid_argument",
        "absolute scope": "invalid_argument",
        "a backslash": "invalid_argument",
        "not the worktree's top": "git_precondition",
    }
    # Not one pane and not one lease came of them.
    assert (await _panes(lanes), await _leases(lanes)) == baseline

    # A sibling scope does not overlap: `src/ab.py` beside `src/a.py` is admitted.
    second = await lanes.start("beta", wt_b, "lane-b/work", ["src/ab.py"], locked=["tests"])
    assert second["state"] == "active"
    assert await _leases(lanes) == [("alpha", "active"), ("beta", "active")]


async def test_an_independent_clone_and_a_worktree_with_a_pane_are_refused(lanes: Lanes) -> None:
    repo = lanes.repo
    clone = repo.root.parent / "clone"
    git(repo.root.parent, "clone", "-q", str(repo.root), str(clone))
    git(clone, "checkout", "-q", "-b", "lane-x/work")
    assert await lanes.refused("x1", clone, "lane-x/work", ["src"]) == "git_precondition"

    wt = repo.worktree("wt-p", "lane-p/work")
    pane = await lanes.tools.call(
        "start_pane", name="squatter", profile="demo", cwd=str(wt / "src")
    )
    assert pane["pane"]["cwd"] == str(wt / "src")
    assert await lanes.refused("x2", wt, "lane-p/work", ["src"]) == "scope_conflict"
    assert await _panes(lanes) == ["squatter"] and await _leases(lanes) == []


async def test_a_protected_branch_or_a_branch_named_by_its_full_ref_is_resolved(
    lanes: Lanes,
) -> None:
    """``refs/heads/pb/work`` and ``heads/pb/work`` name branch ``pb/work``: as protected
    branches they protect it, as ``branch`` they select it; both sides are compared as
    full refs."""
    repo = lanes.repo
    wt = repo.worktree("wt-pb", "pb/work")
    for protected in (
        ["pb/work"],
        ["refs/heads/pb/work"],
        ["heads/pb/work"],
        ["main", "refs/heads/pb/work"],
    ):
        assert await lanes.refused("p1", wt, "pb/work", ["src"], protected=protected) == (
            "git_precondition"
        ), protected
    for alias in ("refs/heads/pb/work", "heads/pb/work"):
        assert await lanes.refused("p2", wt, alias, ["src"], protected=["pb/work"]) == (
            "git_precondition"
        ), alias
    # A branch that only looks like the checked-out one is not it.
    assert await lanes.refused("p3", wt, "refs/heads/heads/pb/work", ["src"]) == "git_precondition"
    assert await _panes(lanes) == [] and await _leases(lanes) == []

    lease = await lanes.start("p4", wt, "refs/heads/pb/work", ["src"], protected=["heads/main"])
    assert lease["state"] == "active" and lease["branch"] == "pb/work"
