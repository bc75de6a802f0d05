"""No pane and no writer worktree is admitted below what a running confined pane writes
(issue 27, item 9): the pane's sandbox was built before they existed, so it could
write them. Both are refused with ``scope_conflict``; a pane in the very same directory,
or beside it, still starts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from mcp import Client

from tests.confine.probing import probe, probe_profile
from tests.conftest import Tools, stdio_params
from tests.lanes.conftest import Lanes, acquire
from tests.lanes.gitrepo import make_repo

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


def _profiles(tmp_path: Path) -> dict[str, str]:
    path = tmp_path / "profiles.json"
    demo = [sys.executable, "-m", "supervisor.demo.agent"]
    profiles = [
        probe_profile("probe", [str(tmp_path)]),
        {"name": "demo", "agent": "demo", "argv": demo, "cwds": ["/"]},
    ]
    path.write_text(json.dumps({"profiles": profiles}))
    return {"PANEWARDEN_PROFILES": str(path)}


async def test_a_pane_is_not_started_below_a_confined_panes_writable_cwd(
    tmp_path: Path, state_dir: Path
) -> None:
    outer, beside = tmp_path / "outer", tmp_path / "beside"
    inner = outer / "inner"
    for path in (inner, beside):
        path.mkdir(parents=True)
    (inner / "checks.json").write_text("{}")
    async with Client(stdio_params(state_dir, **_profiles(tmp_path))) as client:
        tools = Tools(client)
        seen = await probe(tools, "outer", "probe", outer, {"inner": ["write", str(inner / "x")]})
        assert seen["inner"] == "ok:5", seen  # the outer pane writes its whole cwd
        refused = await tools.error("start_pane", name="inner", profile="probe", cwd=str(inner))
        assert refused["code"] == "scope_conflict", refused
        assert "'outer'" in refused["message"], refused
        assert "inner" not in [p["name"] for p in (await tools.call("list_panes"))["panes"]]
        await probe(tools, "same", "probe", outer, {})
        await probe(tools, "beside", "probe", beside, {})
        await tools.call("remove_pane", name="outer")
        await tools.call("remove_pane", name="same")
        # Once no confined pane writes there, the start is admitted.
        await probe(tools, "inner", "probe", inner, {})


async def test_a_writer_worktree_is_not_admitted_below_a_confined_panes_writable_cwd(
    tmp_path: Path, state_dir: Path
) -> None:
    repo = make_repo(tmp_path)
    wt = repo.worktree("wt-a", "alpha/work")
    async with Client(stdio_params(state_dir, **_profiles(tmp_path))) as client:
        tools = Tools(client)
        await probe(tools, "outer", "probe", tmp_path, {})
        lanes = Lanes(tools, await acquire(tools), repo)
        assert await lanes.refused("alpha", wt, "alpha/work", ["src/a.py"]) == "scope_conflict"
        await tools.call("remove_pane", name="outer")
        lease = await lanes.start("alpha", wt, "alpha/work", ["src/a.py"])
        assert lease["confined"] is True
