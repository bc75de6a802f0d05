"""A supervisor SIGKILLed in the middle of writer_start leaves the provisioning lease on
disk: a restarted service finds its pane gone and records it ``orphaned`` (still
retained), refuses every conflicting writer, and admits one only after lease_reconcile
ended it. Never two writers on one scope."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.conftest import Tools, stdio_params
from tests.faults import CLIENT_GONE, ProcKey, key_of, sigkill_all, survivors
from tests.lanes.conftest import AUTHORITY_SHA, Lanes, profiles_file
from tests.lanes.gitrepo import Repo
from tests.polling import apoll

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]


def _writer_records(state_dir: Path) -> list[dict[str, Any]]:
    found = []
    for path in (state_dir / "leases" / "writer").glob("*.json"):
        with contextlib.suppress(OSError, ValueError):
            found.append(json.loads(path.read_bytes()))
    return found


def _spawned(state_dir: Path) -> bool:
    return any(record.get("instance") for record in _writer_records(state_dir))


def _children(pid: int) -> set[ProcKey]:
    """The (stopped) supervisor's children: the worker it was starting."""
    keys: set[ProcKey] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            key = key_of(int(child))
            if key is not None:
                keys.add(key)
    return keys


def _retained(leases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kept = {"provisioning", "active", "closing", "releasing", "release_failed", "orphaned"}
    return [lease for lease in leases if lease["state"] in kept]


async def test_a_kill_mid_start_leaves_a_blocking_lease_until_reconciled(
    tmp_path: Path, state_dir: Path, repo: Repo
) -> None:
    wt_a = repo.worktree("wt-a", "lane-a/work")
    wt_b = repo.worktree("wt-b", "lane-b/work")
    env = {
        "PANEWARDEN_PROFILES": str(profiles_file(tmp_path)),
        "PANEWARDEN_ORPHAN_GRACE_S": "0.5",
    }
    left_behind: set[ProcKey] = set()
    try:
        try:
            async with Client(stdio_params(state_dir, **env)) as client:
                tools = Tools(client)
                granted = await tools.call(
                    "controller_acquire",
                    controller_id="coordinator",
                    authority_ref="issue 10",
                    authority_sha256=AUTHORITY_SHA,
                )
                creds = {
                    "controller_id": "coordinator",
                    "lease_id": granted["lease_id"],
                    "fence_token": granted["fence_token"],
                }
                lanes = Lanes(tools, creds, repo)
                supervisor = int((state_dir / "supervisor.lock").read_text())
                args = lanes.writer_args("alpha", wt_a, "lane-a/work", ["src"])

                async def doomed() -> None:
                    with contextlib.suppress(*CLIENT_GONE):
                        await client.call_tool("writer_start", args, read_timeout_seconds=60)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(doomed)
                    # The lease is written before the pane's worker exists, names the
                    # worker once it is spawned, and turns active only once the worker
                    # said hello: freeze the service in between.
                    assert await apoll(lambda: _spawned(state_dir), 30, interval_s=0.001)
                    os.kill(supervisor, signal.SIGSTOP)
                    ((record,),) = (_writer_records(state_dir),)
                    assert record["state"] == "provisioning", record
                    left_behind = _children(supervisor)
                    os.kill(supervisor, signal.SIGKILL)
                    tg.cancel_scope.cancel()
        except* CLIENT_GONE:
            pass

        async with Client(stdio_params(state_dir, **env)) as client:
            tools = Tools(client)
            resumed = await tools.call(
                "controller_resume",
                controller_id="coordinator",
                authority_ref="issue 10",
                authority_sha256=AUTHORITY_SHA,
            )
            creds = {
                "controller_id": "coordinator",
                "lease_id": resumed["lease_id"],
                "fence_token": resumed["fence_token"],
            }
            lanes = Lanes(tools, creds, repo)
            (held,) = (await tools.call("writer_list"))["leases"]
            assert held["state"] == "orphaned" and held["owned_scopes"] == ["src"], held
            assert held["failure"].startswith("at the restart: "), held
            assert (await tools.call("list_panes"))["panes"] == []

            # Retained: the same worktree, an overlapping scope, a locked one, all refused.
            assert await lanes.refused("again", wt_a, "lane-a/work", ["docs"]) == "scope_conflict"
            assert (
                await lanes.refused("beta", wt_b, "lane-b/work", ["src/a.py"]) == "scope_conflict"
            )
            assert (
                await lanes.refused("beta", wt_b, "lane-b/work", ["tests"], locked=["src"])
                == "scope_conflict"
            )
            assert len(_retained((await tools.call("writer_list"))["leases"])) == 1

            inventory = (await tools.call("lease_inventory"))["panes"]
            assert [(e["name"], e["status"]) for e in inventory] == [("alpha", "missing")]
            reconcile = {"creds": creds, "lease_type": "writer", "lease_id": held["lease_id"]}
            dry = await tools.call("lease_reconcile", **reconcile)
            assert dry["action"] == "would_terminalise"
            assert (
                await lanes.refused("beta", wt_b, "lane-b/work", ["src/a.py"]) == "scope_conflict"
            )
            done = await tools.call("lease_reconcile", dry_run=False, **reconcile)
            assert done == {
                "lease_id": held["lease_id"],
                "action": "terminalised",
                "state": "failed_closed",
            }

            beta = await lanes.start("beta", wt_b, "lane-b/work", ["src/a.py"])
            assert beta["state"] == "active"
            leases = (await tools.call("writer_list"))["leases"]
            assert [(x["name"], x["state"]) for x in leases] == [
                ("alpha", "failed_closed"),
                ("beta", "active"),
            ]
            assert len(_retained(leases)) == 1
        # The frozen start's worker gave up without a supervisor and took its tree along.
        assert left_behind, "no worker: the service was frozen before it spawned one"
        assert await apoll(lambda: not survivors(left_behind), 30)
    finally:
        sigkill_all(left_behind)
