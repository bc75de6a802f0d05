"""writer_release: refused (and the pane left running) on a stale seq or moved Git
evidence; a correct release closes only the pane and leaves the worktree, its index, the
branch and the repository byte-identical."""

from __future__ import annotations

import hashlib

import pytest

from tests.control.scripted_agent import LAST_LINE
from tests.lanes.conftest import CHECKPOINT_SHA, Lanes
from tests.lanes.gitrepo import git, head, status_sha256, tree_fingerprint
from tests.polling import apoll

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]


async def test_release_checks_seq_and_git_then_leaves_every_byte_in_place(lanes: Lanes) -> None:
    tools, repo = lanes.tools, lanes.repo
    wt = repo.worktree("wt-a", "lane-a/work")
    lease = await lanes.start("alpha", wt, "lane-a/work", ["src"])
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
    assert git(wt, "branch", "--show-current") == "lane-a/work"
    assert git(repo.root, "rev-parse", "lane-a/work") == expected_head
    assert status_sha256(wt) == expected_status
    again = await tools.error("writer_release", expected_seq=now["seq"], **release)
    assert again["code"] == "lease_state"


async def test_a_release_at_the_settle_captures_the_reply_drawn_after_it(lanes: Lanes) -> None:
    # The capture rule (quiet before the capture) holds for a writer's release as for a
    # reviewer's close: the reply the agent draws after reporting `done` is in it.
    tools, repo = lanes.tools, lanes.repo
    prompt = "late-draw please"
    # The same turn on an unleased pane left to finish drawing: what the capture must be.
    await tools.call("start_pane", name="witness", profile="scripted", cwd="/")
    await tools.wait("witness", until=["idle"])
    sent = await tools.call("send_input", name="witness", text=prompt)
    await tools.wait("witness", after=sent["seq"], until=["done"])

    async def drawn() -> str | None:
        text = str(
            (await tools.call("read_output", name="witness", lines=10_000, scrollback=True))["text"]
        )
        lines = text.splitlines()
        at = lines.index(LAST_LINE) if LAST_LINE in lines else -1
        return text if 0 <= at < len(lines) - 1 and lines[at + 1].startswith(">") else None

    final = await apoll(drawn, 30, interval_s=0.05)
    assert final is not None, "the witness never drew its reply"
    expected = hashlib.sha256(final.encode()).hexdigest()

    wt = repo.worktree("wt-late", "lane-late/work")
    lease = await lanes.start("late", wt, "lane-late/work", ["src"], profile="scripted")
    await tools.wait("late", until=["idle"])
    receipt_id = (await tools.call("relay", creds=lanes.creds, name="late", text=prompt))["receipt"]
    (listed,) = [
        r for r in (await tools.call("receipt_list"))["receipts"] if r["receipt"] == receipt_id
    ]
    settled = await tools.wait("late", after=listed["cursor"], until=["done"])
    released = await lanes.release(lease, settled["seq"], wt)
    assert released["state"] == "released" and released["closed_seq"] == settled["seq"]
    assert released["capture_sha256"] == expected, "the capture missed the late-drawn reply"
    await tools.call("remove_pane", name="witness")
