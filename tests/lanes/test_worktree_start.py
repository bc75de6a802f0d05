"""One pane per writer worktree, whichever start comes first: a plain ``start_pane``
into a retained writer's worktree is refused, and a ``start_pane`` and a
``writer_start`` into one worktree at the same moment never both get in."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.lanes.conftest import Lanes
from tests.polling import apoll

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]
ROUNDS = 6
# Tries at catching a writer's lease while it is provisioning (see the test).
STARTING_ROUNDS = 5


async def _outcome(lanes: Lanes, tool: str, **args: Any) -> str:
    """``ok``, or the error code."""
    result = await lanes.tools.client.call_tool(tool, args, read_timeout_seconds=120)
    if not result.is_error:
        return "ok"
    return str(json.loads(result.content[0].text)["code"])  # type: ignore[union-attr]


async def _panes_in(lanes: Lanes, worktree: Path) -> list[str]:
    listed = (await lanes.tools.call("list_panes"))["panes"]
    top = str(worktree)
    return sorted(p["name"] for p in listed if p["cwd"] == top or p["cwd"].startswith(top + "/"))


async def test_a_plain_start_into_a_writers_worktree_is_refused(lanes: Lanes) -> None:
    repo = lanes.repo
    wt = repo.worktree("wt-a", "lane-a/work")
    lease = await lanes.start("writer", wt, "lane-a/work", ["src"])
    assert lease["state"] == "active"
    for cwd in (wt, wt / "src"):
        code = await _outcome(lanes, "start_pane", name="squatter", profile="demo", cwd=str(cwd))
        assert code == "scope_conflict", cwd
    assert await _panes_in(lanes, wt) == ["writer"]
    # Beside it (the primary checkout) a plain pane starts as ever.
    await lanes.tools.call("start_pane", name="beside", profile="demo", cwd=str(repo.root))

    seen = await lanes.tools.wait("writer", until=["idle"])
    await lanes.release(lease, seen["seq"], wt)
    # Released: the worktree is nobody's any more.
    await lanes.tools.call("start_pane", name="after", profile="demo", cwd=str(wt))


async def test_a_plain_start_while_a_writer_is_starting_is_refused(lanes: Lanes) -> None:
    """The writer's admission check and its start are one: a plain start that comes
    while the writer's pane is still starting (its lease ``provisioning``) is refused.

    The window is a pane's start, so on a loaded machine the writer may be ``active``
    before a poll sees it ``provisioning``: such a round proves nothing and another is
    run, in a new worktree, up to ``STARTING_ROUNDS``; at least one must catch it."""
    caught = 0
    for i in range(STARTING_ROUNDS):
        wt = lanes.repo.worktree(f"wt-s{i}", f"lane-s{i}/work")
        args = lanes.writer_args(f"writer-s{i}", wt, f"lane-s{i}/work", [f"scope-s{i}"])
        outcomes: dict[str, str] = {}

        async def writer(into: dict[str, str] = outcomes, writer_args: Any = args) -> None:
            into["writer"] = await _outcome(lanes, "writer_start", **writer_args)

        async def provisioning(into: dict[str, str] = outcomes) -> str:
            """``seen`` (the lease reads provisioning), ``missed`` (the writer's start
            answered first), or "" (keep polling)."""
            listed = (await lanes.tools.call("writer_list"))["leases"]
            if any(lease["state"] == "provisioning" for lease in listed):
                return "seen"
            return "missed" if "writer" in into else ""

        async with anyio.create_task_group() as group:
            group.start_soon(writer)
            seen = await apoll(provisioning, 60, what="the writer's start or its lease")
            if seen == "seen":
                plain = {"name": f"plain-s{i}", "profile": "demo", "cwd": str(wt / "src")}
                outcomes["plain"] = await _outcome(lanes, "start_pane", **plain)
        if seen == "seen":
            caught += 1
            assert outcomes == {"writer": "ok", "plain": "scope_conflict"}
            assert await _panes_in(lanes, wt) == [f"writer-s{i}"]
            break
        assert outcomes == {"writer": "ok"}
    assert caught, f"no writer start was seen provisioning in {STARTING_ROUNDS} rounds"


async def test_a_plain_start_and_a_writer_start_at_once_never_both_get_in(lanes: Lanes) -> None:
    for i in range(ROUNDS):
        wt = lanes.repo.worktree(f"wt-{i}", f"lane-{i}/work")
        args = lanes.writer_args(f"writer-{i}", wt, f"lane-{i}/work", [f"scope-{i}"])
        outcomes: dict[str, str] = {}

        async def run(
            key: str, tool: str, tool_args: dict[str, Any], into: dict[str, str] = outcomes
        ) -> None:
            into[key] = await _outcome(lanes, tool, **tool_args)

        plain = {"name": f"plain-{i}", "profile": "demo", "cwd": str(wt / "src")}
        async with anyio.create_task_group() as group:
            # Alternate which call is sent first.
            calls = [("writer", "writer_start", args), ("plain", "start_pane", plain)]
            for key, tool, tool_args in calls if i % 2 else reversed(calls):
                group.start_soon(run, key, tool, tool_args)
        assert sorted(outcomes.values()) == ["ok", "scope_conflict"], (i, outcomes)
        assert len(await _panes_in(lanes, wt)) == 1, (i, outcomes)
