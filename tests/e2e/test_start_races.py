"""Concurrent starts: one pane per name, the pane limit holds, and a refused start leaves
no process behind (the name and the limit are reserved before the first await)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.conftest import Tools, stdio_params
from tests.faults import Marks, describe, sigkill_all
from tests.polling import apoll

pytestmark = pytest.mark.anyio


async def _start_all(tools: Tools, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Call start_pane for every request at once; each outcome is a result or an error."""
    outcomes: list[dict[str, Any]] = [{} for _ in requests]

    async def one(i: int) -> None:
        result = await tools.client.call_tool("start_pane", requests[i], read_timeout_seconds=120)
        if result.is_error:
            outcomes[i] = {"error": json.loads(result.content[0].text)["code"]}  # type: ignore[union-attr]
        else:
            assert result.structured_content is not None
            outcomes[i] = {"pane": result.structured_content["pane"]}

    async with anyio.create_task_group() as tg:
        for i in range(len(requests)):
            tg.start_soon(one, i)
    return outcomes


async def test_sixteen_concurrent_starts_of_one_name_make_one_pane(
    state_dir: Path, tmp_path: Path
) -> None:
    marks = Marks(tmp_path, count=16)
    try:
        async with Client(stdio_params(state_dir, **marks.env())) as client:
            tools = Tools(client)
            requests = [
                {"name": "same", "profile": "demo", "extra_args": [marks.arg(i)]} for i in range(16)
            ]
            outcomes = await _start_all(tools, requests)
            started = [o["pane"] for o in outcomes if "pane" in o]
            errors = sorted(o["error"] for o in outcomes if "error" in o)
            assert len(started) == 1, outcomes
            assert errors == ["pane_exists"] * 15, outcomes
            listed = (await tools.call("list_panes"))["panes"]
            assert [p["worker_pid"] for p in listed] == [started[0]["worker_pid"]]
            # Only the winner's program and worker exist: refused starts spawned nothing.
            assert len(marks.all_pane_procs()) == 1, describe(marks.all_pane_procs())
            assert len(marks.workers()) == 1, describe(marks.workers())
            await tools.call("remove_pane", name="same")
            assert await apoll(lambda: not marks.panes(), 5), describe(marks.panes())
    finally:
        sigkill_all(marks.everything())


async def test_the_pane_limit_holds_under_concurrent_starts(
    state_dir: Path, tmp_path: Path
) -> None:
    marks = Marks(tmp_path, count=24)
    profiles = tmp_path / "limited.json"
    entry = marks.profiles_file()
    data = json.loads(entry.read_text())
    data["max_panes"] = 2
    profiles.write_text(json.dumps(data))
    try:
        async with Client(stdio_params(state_dir, **marks.env(profiles))) as client:
            tools = Tools(client)
            requests = [
                {"name": f"p{i}", "profile": "demo", "extra_args": [marks.arg(i)]} for i in range(8)
            ]
            outcomes = await _start_all(tools, requests)
            started = [o for o in outcomes if "pane" in o]
            assert len(started) == 2, outcomes
            assert sorted(o["error"] for o in outcomes if "error" in o) == ["pane_limit"] * 6, (
                outcomes
            )
            assert len((await tools.call("list_panes"))["panes"]) == 2
            assert len(marks.workers()) == 2, describe(marks.workers())
        # A graceful stop closes what was started; nothing of any start survives.
        assert await apoll(lambda: not marks.everything(), 5), describe(marks.everything())
    finally:
        sigkill_all(marks.everything())
