"""writer_release: refused (and the pane left running) on a stale seq or moved Git
evidence; a correct release closes only the pane and leaves the worktree, its index, the
branch and the repository byte-identical."""

from __future__ import annotations

import hashlib

import pytest

from tests.lanes.conftest import CHECKPOINT_SHA, Lanes
from tests.lanes.gitrepo import git, head, status_sha256, tree_fingerprint

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]


async def test_release_checks_seq_and_git_then_leaves_every_byte_in_place(lanes: Lanes) -> None:
    tools, repo = lanes.tools, lanes.repo
    wt = repo.worktree("wt-a", "lane-a")
    lease = await lanes.start("alpha", wt, "lane-a", ["src"])
    seen = await tools.wait("alpha", until=["idle"])
    # The lane's work: a commit, an unstaged edit, a staged file and an untracked one.
    (wt / "src" / "a.py").write_text("def answer() -> int:\n    return 41 + 1\n")
    git(wt, "commit", "-q", "-am", "lane work")
    (wt / "src" / "ab.py").write_text("B = 3\n")
    (wt / "src" / "new.py").write_text("N = 1\n")
    git(wt, "add", "src/new.py")
    (wt / "notes.txt").write_text("untracked notes\n")
    expected_head, expected_status = head(wt), status_sha256(wt)

    out = await tools.call(
        "handoff", creds=lanes.creds, name="alpha", text="one more turn", timeout_s=30
    )
    assert out["completed"][0]["status"]["state"] == "done"
    now = await tools.call("get_status", name="alpha")
    assert now["seq"] > seen["seq"]

    release = {
        "creds": lanes.creds,
        "lease_id": lease["lease_id"],
        "expected_head": expected_head,
        "expected_status_sha256": expected_status,
        "checkpoint_ref": "issue 10 checkpoint",
        "checkpoint_sha256": CHECKPOINT_SHA,
    }
    stale = await tools.error("writer_release", expected_seq=seen["seq"], **release)
    assert stale["code"] == "cursor_mismatch"
    moved = await tools.error(
        "writer_release",
        **{**release, "expected_head": repo.base, "expected_seq": now["seq"]},
    )
    assert moved["code"] == "git_precondition"
    dirty = hashlib.sha256(b" M src/ab.py\n").hexdigest()
    changed = await tools.error(
        "writer_release",
        **{**release, "expected_status_sha256": dirty, "expected_seq": now["seq"]},
    )
    assert changed["code"] == "git_precondition"
    # Each refusal left the pane running at the same seq, and the lease active.
    assert await tools.call("get_status", name="alpha") == now
    (listed,) = (await tools.call("writer_list"))["leases"]
    assert listed["state"] == "active"

    snapshot_before = await tools.call("verification_snapshot", lease_id=lease["lease_id"])
    before = tree_fingerprint(wt, repo.common_dir)
    released = await tools.call("writer_release", expected_seq=now["seq"], **release)
    after = tree_fingerprint(wt, repo.common_dir)
    snapshot_after = await tools.call("verification_snapshot", lease_id=lease["lease_id"])

    assert released["state"] == "released"
    assert released["release_head"] == expected_head
    assert released["release_status_sha256"] == expected_status
    assert released["checkpoint_sha256"] == CHECKPOINT_SHA
    assert released["closed_seq"] == now["seq"] and released["capture_sha256"]
    assert (await tools.call("list_panes"))["panes"] == []
    # Nothing under the worktree or the repository changed, not even the index.
    assert after == before
    assert snapshot_after["worktree_sha256"] == snapshot_before["worktree_sha256"]
    assert git(wt, "branch", "--show-current") == "lane-a"
    assert git(repo.root, "rev-parse", "lane-a") == expected_head
    assert status_sha256(wt) == expected_status
    again = await tools.error("writer_release", expected_seq=now["seq"], **release)
    assert again["code"] == "lease_state"
