"""remove_pane kills a grandchild that double-forked and called setsid: 50 tries, none survive.

Five panes at a time, ten rounds: each pane's demo agent starts a detached helper
(fork, setsid, fork again; it sleeps for minutes in its own session), and
remove_pane must take it down with the rest of the pane.
"""

from __future__ import annotations

import os
import re

import anyio
import pytest

from tests.conftest import Tools
from tests.faults import alive, key_of, sigkill_all

pytestmark = pytest.mark.anyio

ROUNDS = 10
PANES_PER_ROUND = 5


async def _one_try(tools: Tools, name: str, escapees: list[tuple[int, int]]) -> None:
    pane = (await tools.call("start_pane", name=name, profile="demo"))["pane"]
    await tools.wait(name, until=["idle"])
    await tools.call("send_input", name=name, text="spawn")
    match = await tools.call("wait_output", name=name, pattern=r"spawned \d+", regex=True)
    pid = int(re.findall(r"\d+", match["line"])[-1])
    key = key_of(pid)
    assert key is not None, "the helper died on its own; the test proves nothing"
    assert os.getsid(pid) != pane["pid"], "the helper did not leave the pane's session"
    escapees.append(key)
    await tools.call("remove_pane", name=name)
    # remove_pane answers only after the kill: the helper is already gone, no grace.
    assert not alive(key), f"escapee {key} survived remove_pane of {name}"


async def test_fifty_setsid_escapees_all_die_on_remove_pane(tools: Tools) -> None:
    escapees: list[tuple[int, int]] = []
    try:
        for round_no in range(ROUNDS):
            async with anyio.create_task_group() as tg:
                for i in range(PANES_PER_ROUND):
                    tg.start_soon(_one_try, tools, f"r{round_no}p{i}", escapees)
        assert len(escapees) == ROUNDS * PANES_PER_ROUND
        assert not [k for k in escapees if alive(k)]
    finally:
        sigkill_all(escapees)
