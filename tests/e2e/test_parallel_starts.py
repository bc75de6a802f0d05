"""Many panes started at once, each program reporting its state the instant it starts.

A worker forked from the template may say hello, and report ``idle``, before the
template's answer naming its pid reaches the supervisor: those first frames must wait
for it, in order, and reach the pane, or the pane would stay ``starting`` for ever.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from mcp import Client

from tests.conftest import Tools, stdio_params
from tests.faults import Marks, describe, sigkill_all
from tests.polling import apoll

pytestmark = pytest.mark.anyio

PANES = 48
# Reports idle at once, then waits in a read (keeping the marker in its argv): its first
# frames follow the hello closely.
QUICK = "printf '\\033]7501;state=idle:app=t\\007'; while read -r _; do :; done"


async def test_panes_started_at_once_all_report_their_first_status(
    state_dir: Path, tmp_path: Path
) -> None:
    marks = Marks(tmp_path, count=1)
    profiles = tmp_path / "quick.json"
    profiles.write_text(
        json.dumps(
            {
                "max_panes": PANES,
                "profiles": [
                    {
                        "name": "quick",
                        "agent": "generic",
                        "argv": ["/bin/sh", "-c", QUICK, "sh", marks.arg(0)],
                        "cwds": ["/"],
                    }
                ],
            }
        )
    )
    statuses: dict[str, dict[str, object]] = {}
    try:
        async with Client(stdio_params(state_dir, **marks.env(profiles))) as client:
            tools = Tools(client)

            async def start(i: int) -> None:
                await tools.call("start_pane", name=f"q{i}", profile="quick")
                statuses[f"q{i}"] = await tools.wait(f"q{i}", until=["idle"], timeout_s=30)

            async with anyio.create_task_group() as tg:
                for i in range(PANES):
                    tg.start_soon(start, i)
            assert len(statuses) == PANES
            assert all(s["lifecycle"] == "running" for s in statuses.values()), statuses
            listed = (await tools.call("list_panes"))["panes"]
            assert len({p["worker_pid"] for p in listed}) == PANES

            async def remove(name: str) -> None:
                await tools.call("remove_pane", name=name)

            async with anyio.create_task_group() as tg:
                for name in statuses:
                    tg.start_soon(remove, name)
        gone = await apoll(lambda: not marks.everything(), 10)
        assert gone, describe(marks.everything())
    finally:
        sigkill_all(marks.everything())
