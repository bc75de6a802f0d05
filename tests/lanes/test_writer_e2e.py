"""End to end, as a coordinator runs it: two writer lanes in two linked worktrees of one
repository, on disjoint scopes, each a demo agent that edits files on request; the work
verified in the sandbox at its base, fixed once, verified again, and both lanes released
with their worktrees intact. writer_list and verification_list agree at every step. The
same on ACP panes (the fake ACP agent edits the files; a turn's output is its text)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.lanes.conftest import Lanes
from tests.lanes.gitrepo import git, head, status_sha256, tree_fingerprint

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]


async def _view(lanes: Lanes) -> tuple[list[tuple[str, str]], list[tuple[str, str, str]]]:
    """The coordinator's view: (lane, state) and (lane, recipe, state) in order."""
    writers = (await lanes.tools.call("writer_list"))["leases"]
    names = {lease["lease_id"]: lease["name"] for lease in writers}
    runs = (await lanes.tools.call("verification_list"))["verifications"]
    return (
        [(lease["name"], lease["state"]) for lease in writers],
        [(names[r["lease_id"]], r["recipe"], r["state"]) for r in runs],
    )


async def _verify(lanes: Lanes, lease: dict[str, Any]) -> dict[str, Any]:
    snap = await lanes.tools.call("verification_snapshot", lease_id=lease["lease_id"])
    return await lanes.tools.call(
        "verify",
        creds=lanes.creds,
        lease_id=lease["lease_id"],
        recipe="tests",
        expected_worktree_sha256=snap["worktree_sha256"],
    )


async def _ask(lanes: Lanes, requests: list[dict[str, str]]) -> None:
    out = await lanes.tools.call(
        "batch_handoff", creds=lanes.creds, requests=requests, mode="all", timeout_s=60
    )
    assert out["failed"] == [] and out["pending"] == []
    for item in out["completed"]:
        assert item["status"]["state"] == "done"
        assert "wrote " in item["output"], item["output"]


@pytest.mark.parametrize("profile", ["editor", "editor-acp"])
async def test_two_writer_lanes_edit_verify_and_release(lanes: Lanes, profile: str) -> None:
    # On terminal panes (the demo agent) and on ACP panes (the fake ACP agent).
    tools, repo = lanes.tools, lanes.repo
    wt_a = repo.worktree("wt-a", "lane-a/work")
    wt_b = repo.worktree("wt-b", "lane-b/work")
    alpha = await lanes.start(
        "alpha", wt_a, "lane-a/work", ["src/a.py"], locked=["tests"], profile=profile
    )
    beta = await lanes.start(
        "beta", wt_b, "lane-b/work", ["docs", "src/b.py"], locked=["tests"], profile=profile
    )
    for name in ("alpha", "beta"):
        await tools.wait(name, until=["idle"])
    assert await _view(lanes) == ([("alpha", "active"), ("beta", "active")], [])

    # Each agent edits its own files in its own worktree; alpha's edit breaks the tests.
    await _ask(
        lanes,
        [
            {"name": "alpha", "text": "write src/a.py def answer() -> int: return 41"},
            {"name": "beta", "text": "write docs/guide.md # Guide (revised)"},
        ],
    )
    await _ask(lanes, [{"name": "beta", "text": "write src/b.py B = 2"}])
    assert (wt_a / "src" / "a.py").read_text() == "def answer() -> int: return 41\n"
    assert (wt_b / "docs" / "guide.md").read_text() == "# Guide (revised)\n"
    assert (wt_b / "src" / "b.py").read_text() == "B = 2\n"
    assert (repo.root / "src" / "a.py").read_text().endswith("return 42\n")  # main untouched

    failed = await _verify(lanes, alpha)
    assert failed["state"] == "failed" and failed["exit_code"] == 1, failed
    passed_b = await _verify(lanes, beta)
    assert passed_b["state"] == "passed", passed_b
    assert await _view(lanes) == (
        [("alpha", "active"), ("beta", "active")],
        [("alpha", "tests", "failed"), ("beta", "tests", "passed")],
    )

    await _ask(lanes, [{"name": "alpha", "text": "write src/a.py def answer() -> int: return 42"}])
    passed_a = await _verify(lanes, alpha)
    assert passed_a["state"] == "passed", passed_a
    assert passed_a["worktree_sha256"] != failed["worktree_sha256"]
    assert await _view(lanes) == (
        [("alpha", "active"), ("beta", "active")],
        [("alpha", "tests", "failed"), ("beta", "tests", "passed"), ("alpha", "tests", "passed")],
    )

    # Release both: the checkpoint is the worktrees as they are, edits included.
    prints: dict[str, tuple[dict[str, tuple[int, str]], str, str]] = {}
    for lease, wt in ((alpha, wt_a), (beta, wt_b)):
        prints[lease["name"]] = (tree_fingerprint(wt), head(wt), status_sha256(wt))
    for lease, wt in ((alpha, wt_a), (beta, wt_b)):
        seq = (await tools.call("get_status", name=lease["name"]))["seq"]
        released = await lanes.release(lease, seq, wt)
        assert released["state"] == "released"
        assert released["release_status_sha256"] == prints[lease["name"]][2]
        assert released["release_status_sha256"] != lease["status_sha256"]  # the lane worked
    assert (await tools.call("list_panes"))["panes"] == []
    for lease, wt in ((alpha, wt_a), (beta, wt_b)):
        assert (tree_fingerprint(wt), head(wt), status_sha256(wt)) == prints[lease["name"]]
    assert git(wt_a, "branch", "--show-current") == "lane-a/work"
    assert git(wt_b, "branch", "--show-current") == "lane-b/work"
    assert await _view(lanes) == (
        [("alpha", "released"), ("beta", "released")],
        [("alpha", "tests", "failed"), ("beta", "tests", "passed"), ("alpha", "tests", "passed")],
    )
    # A released lane can still be verified (its worktree is still there).
    assert (await _verify(lanes, beta))["state"] == "passed"
