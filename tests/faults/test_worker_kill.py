"""SIGKILL of a pane worker: the pane is `lost` within 1 s, its whole tree dies within 3 s
(a grandchild that detached moments before included), and the supervisor keeps serving.

Every process a test starts carries a marker (see ``tests.faults``); whatever survives an
assertion is SIGKILLed in a ``finally``, but the assertions are that the product killed it.
Seed the fault loop with ``PANEWARDEN_TEST_SEED``; its size with
``PANEWARDEN_FAULT_ITERATIONS`` (default 10).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client

from tests.conftest import Tools, stdio_params
from tests.faults import (
    TEMPLATE_NAME,
    Marks,
    ProcKey,
    children,
    comm,
    describe,
    key_of,
    seeded_rng,
    sigkill_all,
    supervisor_of,
    survivors,
    zombie_children,
)
from tests.polling import apoll

pytestmark = pytest.mark.anyio

LOST_WITHIN_S = 1.0
TREE_GONE_WITHIN_S = 3.0
CLK_TCK = os.sysconf("SC_CLK_TCK")


def _age_s(key: ProcKey) -> float:
    """How long ago the process started (clock-tick resolution)."""
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return uptime - key[1] / CLK_TCK


async def _assert_supervisor_clean(supervisor: int, workers: set[int], why: str) -> None:
    """Neither the supervisor nor its worker template has a zombie child, or a child other
    than a live worker (or the template), within 2 s."""

    def parents() -> list[int]:
        return [supervisor, *(c for c in children(supervisor) if comm(c) == TEMPLATE_NAME)]

    def clean() -> bool:
        found = parents()
        allowed = workers | set(found[1:])
        return all(not zombie_children(p) and set(children(p)) <= allowed for p in found)

    assert await apoll(clean, 2.0), (
        f"{why}: children of supervisor {supervisor} and template: "
        f"{describe(k for p in parents() for c in children(p) if (k := key_of(c)) is not None)}; "
        f"zombies {[zombie_children(p) for p in parents()]}; live workers {sorted(workers)}"
    )


async def _turn(tools: Tools, name: str, text: str) -> None:
    before = await tools.call("get_status", name=name)
    await tools.call("send_input", name=name, text=text)
    done = await tools.wait(name, after=before["seq"], until=["done"])
    assert done["lifecycle"] == "running"
    assert f"reply: {text}" in (await tools.call("read_output", name=name))["text"]


async def test_worker_sigkill_right_after_a_detached_spawn(state_dir: Path, tmp_path: Path) -> None:
    marks = Marks(tmp_path)
    recorded: set[ProcKey] = set()
    try:
        async with Client(stdio_params(state_dir, **marks.env())) as client:
            tools = Tools(client)
            victim = (
                await tools.call(
                    "start_pane", name="victim", profile="demo", extra_args=[marks.arg(0)]
                )
            )["pane"]
            other = (
                await tools.call(
                    "start_pane", name="other", profile="demo", extra_args=[marks.arg(1)]
                )
            )["pane"]
            supervisor = supervisor_of(victim["worker_pid"])
            assert supervisor is not None and supervisor == supervisor_of(other["worker_pid"])
            idle = await tools.wait("victim", until=["idle"])
            await tools.wait("other", until=["idle"])
            program = key_of(victim["pid"])
            worker = key_of(victim["worker_pid"])
            assert program is not None and worker is not None
            recorded |= {program, worker}
            # The markers find the pane's processes, so "none left" below means something.
            assert marks.pane_procs(0) == {program}

            await tools.call("send_input", name="victim", text="spawn a helper")
            working = await tools.wait("victim", after=idle["seq"], until=["working"])
            match = await tools.call(
                "wait_output", name="victim", pattern=r"spawned \d+", regex=True, timeout_s=20
            )
            # The instant the grandchild is reported: no awaits until the kill.
            grandchild = key_of(int(match["line"].split()[1]))
            os.kill(victim["worker_pid"], signal.SIGKILL)
            killed_at = time.monotonic()
            assert grandchild is not None, f"spawned pid already gone: {match}"
            recorded.add(grandchild)
            age = _age_s(grandchild)
            print(f"grandchild {grandchild[0]} was ~{age:.3f}s old at the worker's SIGKILL")

            lost = await tools.wait("victim", after=working["seq"], until=["lost"], timeout_s=5)
            lost_after = time.monotonic() - killed_at
            assert lost["lifecycle"] == "lost", lost
            assert lost_after < LOST_WITHIN_S, f"lost only after {lost_after:.3f}s"
            assert (await tools.call("get_status", name="victim"))["lifecycle"] == "lost"

            def tree_gone() -> bool:
                return not survivors(recorded) and not marks.pane_procs(0)

            gone = await apoll(tree_gone, TREE_GONE_WITHIN_S - (time.monotonic() - killed_at))
            assert gone, (
                f"alive {time.monotonic() - killed_at:.2f}s after the worker's SIGKILL: "
                f"{describe(set(survivors(recorded)) | marks.pane_procs(0))}"
            )

            # The supervisor keeps serving: the other pane completes a turn.
            await _turn(tools, "other", "still here after the crash")
            assert (await tools.error("read_output", name="victim"))["code"] == "worker_lost"
            assert (await tools.error("send_input", name="victim", text="x"))["code"] == (
                "worker_lost"
            )
            await _assert_supervisor_clean(supervisor, {other["worker_pid"]}, "after the kill")
            await tools.call("remove_pane", name="victim")
            await tools.call("remove_pane", name="other")
            assert (await tools.call("list_panes"))["panes"] == []
    finally:
        sigkill_all(recorded | marks.everything())


@pytest.mark.slow
async def test_worker_sigkill_at_random_moments(state_dir: Path, tmp_path: Path) -> None:
    rng, seed = seeded_rng("test_worker_sigkill_at_random_moments")
    iterations = int(os.environ.get("PANEWARDEN_FAULT_ITERATIONS", "10"))
    marks = Marks(tmp_path, count=iterations + 1)
    recorded: set[ProcKey] = set()
    try:
        async with Client(stdio_params(state_dir, **marks.env())) as client:
            tools = Tools(client)
            keeper = (
                await tools.call(
                    "start_pane", name="keeper", profile="demo", extra_args=[marks.arg(0)]
                )
            )["pane"]
            supervisor = supervisor_of(keeper["worker_pid"])
            assert supervisor is not None
            await tools.wait("keeper", until=["idle"])
            for i in range(1, iterations + 1):
                name = f"f{i}"
                text = rng.choice([f"spawn {i}", f"spawn {i}", f"plain {i}", f"dialog spawn {i}"])
                delay = rng.uniform(0.0, 0.4)
                where = f"seed {seed}, iteration {i}, {text!r}, kill after {delay * 1000:.0f} ms"
                pane = (
                    await tools.call(
                        "start_pane", name=name, profile="demo", extra_args=[marks.arg(i)]
                    )
                )["pane"]
                assert supervisor_of(pane["worker_pid"]) == supervisor
                idle = await tools.wait(name, until=["idle"])
                program, worker = key_of(pane["pid"]), key_of(pane["worker_pid"])
                assert program is not None and worker is not None, where
                recorded |= {program, worker}
                seen: set[ProcKey] = set()
                stop = anyio.Event()

                async def sample(
                    i: int = i, seen: set[ProcKey] = seen, stop: anyio.Event = stop
                ) -> None:
                    # Records the pane's processes (spawned grandchildren too) as they appear.
                    while not stop.is_set():
                        seen.update(marks.pane_procs(i))
                        await anyio.sleep(0.01)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(sample)
                    await tools.call("send_input", name=name, text=text)
                    await anyio.sleep(delay)  # the fault's random moment, not a synchronisation
                    os.kill(pane["worker_pid"], signal.SIGKILL)
                    killed_at = time.monotonic()
                    seen.update(marks.pane_procs(i))
                    stop.set()
                recorded |= seen

                lost = await tools.wait(name, after=idle["seq"], until=["lost"], timeout_s=5)
                lost_after = time.monotonic() - killed_at
                assert lost["lifecycle"] == "lost", (where, lost)
                assert lost_after < LOST_WITHIN_S, f"{where}: lost after {lost_after:.3f}s"
                victims = seen | {program, worker}

                def tree_gone(i: int = i, victims: set[ProcKey] = victims) -> bool:
                    return not survivors(victims) and not marks.pane_procs(i)

                gone = await apoll(tree_gone, TREE_GONE_WITHIN_S - (time.monotonic() - killed_at))
                assert gone, (
                    f"{where}: alive {time.monotonic() - killed_at:.2f}s after the kill: "
                    f"{describe(set(survivors(victims)) | marks.pane_procs(i))}"
                )
                await _assert_supervisor_clean(supervisor, {keeper["worker_pid"]}, where)
                await tools.call("remove_pane", name=name)
            await _turn(tools, "keeper", "the keeper still works")
            await tools.call("remove_pane", name="keeper")
    finally:
        sigkill_all(recorded | marks.everything())
