"""Sixteen panes driven at once through one client: no crosstalk, honest wait_any cursors,
and nothing left behind. Seed with ``PANEWARDEN_TEST_SEED``."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.conftest import Tools, stdio_params
from tests.faults import Marks, ProcKey, describe, key_of, seeded_rng, sigkill_all, survivors
from tests.polling import apoll

pytestmark = pytest.mark.anyio

PANES = 16


async def test_sixteen_panes_driven_concurrently(state_dir: Path, tmp_path: Path) -> None:
    rng, seed = seeded_rng("test_sixteen_panes_driven_concurrently")
    marks = Marks(tmp_path, count=PANES)
    names = [f"p{i:02d}" for i in range(PANES)]
    prompts = {name: f"prompt {name} {secrets.token_hex(6)}" for name in names}
    known: set[ProcKey] = set()
    try:
        async with Client(stdio_params(state_dir, **marks.env())) as client:
            tools = Tools(client)
            infos: dict[str, dict[str, Any]] = {}
            done: dict[str, dict[str, Any]] = {}
            texts: dict[str, str] = {}

            async def drive(i: int, name: str) -> None:
                pane = (
                    await tools.call(
                        "start_pane", name=name, profile="demo", extra_args=[marks.arg(i)]
                    )
                )["pane"]
                infos[name] = pane
                known.update(k for p in (pane["pid"], pane["worker_pid"]) if (k := key_of(p)))
                idle = await tools.wait(name, until=["idle"], timeout_s=60)
                await tools.call("send_input", name=name, text=prompts[name])
                done[name] = await tools.wait(name, after=idle["seq"], timeout_s=60)
                texts[name] = (await tools.call("read_output", name=name))["text"]

            async with anyio.create_task_group() as tg:
                for i, name in enumerate(names):
                    tg.start_soon(drive, i, name)

            assert len({p["worker_pid"] for p in infos.values()}) == PANES
            assert len({p["pid"] for p in infos.values()}) == PANES
            for name in names:
                assert (done[name]["state"], done[name]["turn"]) == ("done", 1), done[name]
                assert f"reply: {prompts[name]}" in texts[name], (name, texts[name])
                others = [p for n, p in prompts.items() if n != name and p in texts[name]]
                assert not others, f"{name} shows other panes' prompts: {others}"

            # wait_any with a cursor per pane: only panes that settle after their cursor count.
            cursors = {n: (await tools.call("get_status", name=n))["seq"] for n in names}
            chosen = rng.sample(names, 3)
            panes_arg = [{"name": n, "after_seq": cursors[n]} for n in names]

            async def prompt_again(name: str) -> None:
                await tools.call("send_input", name=name, text=f"again {name}")

            async with anyio.create_task_group() as tg:
                for name in chosen:
                    tg.start_soon(prompt_again, name)
            first = await tools.call("wait_any", panes=panes_arg, timeout_s=30)
            where = f"seed {seed}, prompted {chosen}, cursors {cursors}"
            assert not first["timed_out"], (where, first)
            assert first["name"] in chosen, (where, first)
            status = first["status"]
            assert status["name"] == first["name"]
            assert status["seq"] > cursors[first["name"]], (where, first)
            assert status["state"] in ("done", "idle", "blocked", "error", "cancelled"), first
            assert status["turn"] == 2, (where, first)

            # A cursor at the latest seq of a pane that does nothing more never matches.
            quiet = next(n for n in names if n not in chosen)
            now = (await tools.call("get_status", name=quiet))["seq"]
            idle_only = await tools.call(
                "wait_any", panes=[{"name": quiet, "after_seq": now}], timeout_s=0.3
            )
            assert idle_only["timed_out"] and idle_only["name"] is None, idle_only

            async def remove(name: str) -> None:
                await tools.call("remove_pane", name=name)

            async with anyio.create_task_group() as tg:
                for name in names:
                    tg.start_soon(remove, name)
            assert (await tools.call("list_panes"))["panes"] == []
            gone = await apoll(lambda: not survivors(known) and not marks.panes(), 5)
            assert gone, describe(set(survivors(known)) | marks.panes())
    finally:
        sigkill_all(known | marks.everything())
