"""verify runs only recipes of the base commit's recipes file, in Bubblewrap: no network,
the worktree read-only but for declared outputs, a private HOME; the worktree digest is
checked before and after; every run leaves a content-free record."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from mcp import Client

from tests.conftest import Tools, stdio_params
from tests.lanes.conftest import Lanes, acquire, profiles_file
from tests.lanes.gitrepo import REFUSED_EXIT, Repo, git, make_repo
from tests.polling import apoll

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]

RECORD_KEYS = {
    "verification_id",
    "lease_id",
    "controller_id",
    "recipe",
    "state",
    "base_commit",
    "head",
    "worktree_sha256",
    "started_at",
    "duration_s",
    "exit_code",
    "stdout_sha256",
    "stderr_sha256",
    "reason",
}


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP port on the host's loopback: reachable from the host, not from the sandbox."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock


@pytest.fixture
def repo(tmp_path: Path, listener: socket.socket) -> Repo:
    return make_repo(tmp_path, port=listener.getsockname()[1])


async def _lane(
    lanes: Lanes, name: str = "alpha", wt_name: str = "wt-a"
) -> tuple[dict[str, Any], Path]:
    wt = lanes.repo.worktree(wt_name, f"lane-{name}/work")
    lease = await lanes.start(name, wt, f"lane-{name}/work", [f"src/{name}.py"])
    await lanes.tools.wait(name, until=["idle"])
    return lease, wt


async def _verify(lanes: Lanes, lease: dict[str, Any], recipe: str, **extra: Any) -> dict[str, Any]:
    if "expected_worktree_sha256" not in extra:
        snap = await lanes.tools.call("verification_snapshot", lease_id=lease["lease_id"])
        extra["expected_worktree_sha256"] = snap["worktree_sha256"]
    return await lanes.tools.call(
        "verify", creds=lanes.creds, lease_id=lease["lease_id"], recipe=recipe, **extra
    )


async def test_recipes_run_sandboxed_and_leave_content_free_records(
    lanes: Lanes, listener: socket.socket
) -> None:
    tools = lanes.tools
    lease, wt = await _lane(lanes)
    snap = await tools.call("verification_snapshot", lease_id=lease["lease_id"])
    assert snap["head"] == lanes.repo.base and snap["branch"] == "lane-alpha/work"
    assert snap["pane_state"] == "idle" and snap["untracked_files"] == 0

    passed = await _verify(lanes, lease, "tests")
    assert passed["state"] == "passed" and passed["exit_code"] == 0, passed
    assert passed["worktree_sha256"] == snap["worktree_sha256"]
    assert passed["head"] == lanes.repo.base and passed["base_commit"] == lanes.repo.base

    # The host reaches the port; the sandbox has its own, empty loopback.
    socket.create_connection(listener.getsockname(), timeout=5).close()
    network = await _verify(lanes, lease, "network")
    assert network["state"] == "failed" and network["exit_code"] == REFUSED_EXIT, network

    outside = await _verify(lanes, lease, "write-outside")
    assert outside["state"] == "failed" and outside["exit_code"] == REFUSED_EXIT, outside
    assert not (wt / "stray.txt").exists()

    # The host is read-only in there: a HOME that takes writes is a private one.
    home = await _verify(lanes, lease, "write-home")
    assert home["state"] == "passed", home

    report = await _verify(lanes, lease, "write-report")
    assert report["state"] == "passed", report
    assert (wt / "out" / "report.txt").read_text() == "ok"  # declared, and ignored by git

    wrong = await _verify(lanes, lease, "tests", expected_worktree_sha256="0" * 64)
    assert wrong["state"] == "preflight_failed" and wrong["exit_code"] is None
    assert "digest" in wrong["reason"]

    # Bubblewrap is a child of the supervisor, a subreaper that kills unknown children:
    # a run longer than its sweep period must survive it, exit status and all.
    long_run = await _verify(lanes, lease, "slow-pass")
    assert long_run["state"] == "passed" and long_run["duration_s"] >= 2.5, long_run

    slow = await _verify(lanes, lease, "sleep", timeout_s=1)
    assert slow["state"] == "timed_out" and slow["exit_code"] is None, slow

    # A declared output reached through a link would lead out of the worktree.
    (wt / "linked").symlink_to(wt.parent)
    linked = await _verify(lanes, lease, "write-linked")
    assert linked["state"] == "preflight_failed" and "symbolic link" in linked["reason"]

    records = (await tools.call("verification_list"))["verifications"]
    assert [(r["recipe"], r["state"]) for r in records] == [
        ("tests", "passed"),
        ("network", "failed"),
        ("write-outside", "failed"),
        ("write-home", "passed"),
        ("write-report", "passed"),
        ("tests", "preflight_failed"),
        ("slow-pass", "passed"),
        ("sleep", "timed_out"),
        ("write-linked", "preflight_failed"),
    ]
    for record in records:
        assert set(record) == RECORD_KEYS
        assert record["lease_id"] == lease["lease_id"]
    assert records[0]["stdout_sha256"] and records[0]["stderr_sha256"]


async def test_only_recipes_of_the_base_commit_can_run(lanes: Lanes) -> None:
    tools = lanes.tools
    lease, wt = await _lane(lanes)
    snap = await tools.call("verification_snapshot", lease_id=lease["lease_id"])
    base = {"creds": lanes.creds, "lease_id": lease["lease_id"]}
    base["expected_worktree_sha256"] = snap["worktree_sha256"]

    unknown = await tools.error("verify", recipe="deploy", **base)
    assert unknown["code"] == "not_found" and "tests" in unknown["message"]
    for recipe in ("rm -rf /", "../tests", "Tests", ""):
        assert (await tools.error("verify", recipe=recipe, **base))["code"] == "invalid_argument"
    argv = await tools.error("verify", recipe="tests", argv=["sh", "-c", "true"], **base)
    assert argv["code"] == "invalid_argument"

    # The lane adds a recipe and commits it: the base commit's file still rules.
    recipes = wt / ".panewarden" / "recipes.toml"
    recipes.write_text(recipes.read_text() + '\n[recipes.mine]\nargv = ["true"]\n')
    git(wt, "commit", "-q", "-am", "my own recipe")
    mine = await tools.error("verify", recipe="mine", **base)
    assert mine["code"] == "not_found"
    assert (await tools.call("verification_list"))["verifications"] == []


async def test_a_worktree_changed_during_the_run_is_invalidated(lanes: Lanes) -> None:
    lease, wt = await _lane(lanes)
    async with anyio.create_task_group() as tg:
        outcome: dict[str, Any] = {}

        async def run() -> None:
            outcome.update(await _verify(lanes, lease, "wait-for-change"))

        tg.start_soon(run)
        # The recipe waits for trigger.txt: once its sandbox runs, change the worktree.
        assert await apoll(lambda: _sandbox_running(wt), 60)
        (wt / "trigger.txt").write_text("changed under the recipe\n")
    assert outcome["state"] == "invalidated", outcome
    assert outcome["exit_code"] == 0  # it passed, but not on the worktree it was given
    assert "changed" in outcome["reason"]


def _sandbox_running(wt: Path) -> bool:
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        # A recipe's sandbox (its own session, run in wt), not the writer pane's (also
        # bwrap, in wt) nor one of the service's own Git commands (its own session, in /).
        if proc.info["name"] != "bwrap" or "--new-session" not in cmdline:
            continue
        if "--chdir" in cmdline and cmdline[cmdline.index("--chdir") + 1] == str(wt):
            return True
    return False


@pytest.fixture
async def lanes_without_bwrap(tmp_path: Path, state_dir: Path, repo: Repo) -> AsyncIterator[Lanes]:
    """A supervisor whose PATH has git but no bwrap (its writers allowed unconfined)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("git",):
        real = next(
            Path(d) / tool
            for d in os.environ["PATH"].split(os.pathsep)
            if (Path(d) / tool).is_file()
        )
        (bin_dir / tool).symlink_to(real)
    params = stdio_params(
        state_dir,
        PANEWARDEN_PROFILES=str(profiles_file(tmp_path, allow_unconfined_writers=True)),
        PATH=str(bin_dir),
    )
    params.command = sys.executable
    async with Client(params) as client:
        tools = Tools(client)
        yield Lanes(tools, await acquire(tools), repo)


async def test_verify_without_bubblewrap_is_sandbox_unavailable(
    lanes_without_bwrap: Lanes,
) -> None:
    lanes = lanes_without_bwrap
    lease, _wt = await _lane(lanes)
    snap = await lanes.tools.call("verification_snapshot", lease_id=lease["lease_id"])
    body = await lanes.tools.error(
        "verify",
        creds=lanes.creds,
        lease_id=lease["lease_id"],
        recipe="tests",
        expected_worktree_sha256=snap["worktree_sha256"],
    )
    assert body["code"] == "sandbox_unavailable", body
    assert (await lanes.tools.call("verification_list"))["verifications"] == []


async def test_a_run_ends_with_the_controller_lease(
    tmp_path: Path, state_dir: Path, repo: Repo
) -> None:
    params = stdio_params(
        state_dir,
        PANEWARDEN_PROFILES=str(profiles_file(tmp_path)),
        PANEWARDEN_LEASE_TTL_MIN_S="1",
    )
    async with Client(params) as client:
        tools = Tools(client)
        granted = await tools.call(
            "controller_acquire",
            controller_id="brief",
            authority_ref="issue 10",
            authority_sha256="0" * 64,
            ttl_s=6,
        )
        creds = {
            "controller_id": "brief",
            "lease_id": granted["lease_id"],
            "fence_token": granted["fence_token"],
        }
        lanes = Lanes(tools, creds, repo)
        lease, _wt = await _lane(lanes)
        # The recipe sleeps 120 s and allows 600: the 6 s lease is what stops it.
        run = await _verify(lanes, lease, "sleep")
        assert run["state"] == "timed_out", run
        assert run["duration_s"] < 6, run
        # It ended when the lease did: the same credentials are refused now.
        late = await tools.error(
            "verify",
            creds=creds,
            lease_id=lease["lease_id"],
            recipe="tests",
            expected_worktree_sha256="0" * 64,
        )
        assert late["code"] == "fence_invalid"
