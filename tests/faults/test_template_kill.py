"""Faults of the worker template: SIGKILLed at random moments, together with the
supervisor, of another build after a restart, or unable to start at all.

The template forks every pane's worker and is the subreaper below which a dead worker's
leftovers land. Whatever happens to it, the panes it forked keep running (they re-parent
to the supervisor, a subreaper too), the next start works (from a new template, or cold
while none is ready), and nothing of any pane, and no template, outlives the service.
Seed the random kill moments with ``PANEWARDEN_TEST_SEED``.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from protocol.timing import HEARTBEAT_S, ORPHAN_AFTER_S
from tests.conftest import Tools, stdio_params
from tests.faults import (
    CLIENT_GONE,
    TEMPLATE_NAME,
    Marks,
    ProcKey,
    children,
    comm,
    describe,
    key_of,
    ppid,
    seeded_rng,
    sigkill_all,
    supervisor_of,
    survivors,
    zombie_children,
)
from tests.polling import apoll

pytestmark = pytest.mark.anyio

ROUNDS = int(os.environ.get("PANEWARDEN_FAULT_ITERATIONS", "4"))
# A start takes ~20-300 ms, a turn of the demo agent ~0.1 s: kill before, during, after.
MAX_DELAY_S = 0.4
GONE_WITHIN_S = 5.0
ORPHAN_GRACE_S = "2"


async def _start(tools: Tools, marks: Marks, name: str, i: int) -> dict[str, Any]:
    pane = await tools.call("start_pane", name=name, profile="demo", extra_args=[marks.arg(i)])
    return dict(pane["pane"])


def _keys(pane: dict[str, Any]) -> set[ProcKey]:
    return {k for p in (pane["pid"], pane["worker_pid"]) if (k := key_of(p))}


async def _spawn(tools: Tools, name: str) -> ProcKey:
    """Have the pane's program start a detached grandchild; its key."""
    before = await tools.call("get_status", name=name)
    await tools.call("send_input", name=name, text=f"spawn from {name}")
    match = await tools.call(
        "wait_output", name=name, pattern=r"spawned \d+", regex=True, timeout_s=20
    )
    await tools.wait(name, after=before["seq"], until=["done"])
    key = key_of(int(match["line"].split()[1]))
    assert key is not None
    return key


async def _turn(tools: Tools, name: str, text: str) -> None:
    before = await tools.call("get_status", name=name)
    await tools.call("send_input", name=name, text=text)
    done = await tools.wait(name, after=before["seq"], until=["done"])
    assert done["lifecycle"] == "running", done


def _service_clean(supervisor: int, workers: set[int]) -> bool:
    """Neither the supervisor nor its template has a zombie child, or a child other than
    a live worker (or the template)."""
    parents = [supervisor, *(c for c in children(supervisor) if comm(c) == TEMPLATE_NAME)]
    allowed = workers | set(parents[1:])
    return all(not zombie_children(p) and set(children(p)) <= allowed for p in parents)


@pytest.mark.slow
async def test_template_sigkill_at_random_moments(state_dir: Path, tmp_path: Path) -> None:
    rng, seed = seeded_rng("test_template_sigkill_at_random_moments")
    marks = Marks(tmp_path, count=2 * ROUNDS + 2)
    known: set[ProcKey] = set()
    try:
        async with Client(stdio_params(state_dir, **marks.env())) as client:
            tools = Tools(client)
            keeper = await _start(tools, marks, "keeper", 0)
            known |= _keys(keeper)
            supervisor = supervisor_of(keeper["worker_pid"])
            assert supervisor is not None
            await tools.wait("keeper", until=["idle"])
            live: dict[str, dict[str, Any]] = {"keeper": keeper}
            for r in range(1, ROUNDS + 1):
                # Half the kills land in the first milliseconds of the start: in the fork.
                delay = rng.uniform(0.0, rng.choice([0.03, MAX_DELAY_S]))
                where = f"seed {seed}, round {r}, kill {delay * 1000:.0f} ms into a start"
                # Each kill lands soon after the template's start: the service may be
                # backing off before the next one (a crash loop), or starting it, and
                # then no template runs yet; the start in flight must succeed either way.
                templates = marks.templates()
                started: dict[str, Any] = {}

                async def start(r: int = r, started: dict[str, Any] = started) -> None:
                    started.update(await _start(tools, marks, f"s{r}", 2 * r - 1))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(start)
                    tg.start_soon(_turn, tools, "keeper", f"turn {r}")
                    await anyio.sleep(delay)  # the fault's random moment, not a synchronisation
                    sigkill_all(templates)
                # The start in flight succeeded (forked, or cold once the template died).
                assert started, where
                known |= _keys(started) | templates
                live[started["name"]] = started
                # The template's workers live on, below the supervisor now.
                for pane in live.values():
                    status = await tools.call("get_status", name=pane["name"])
                    assert status["lifecycle"] == "running", (where, status)
                await _turn(tools, started["name"], f"first turn {r}")
                # A former template worker SIGKILLed right after a detached spawn: its
                # leftovers re-parent to a subreaper of the service and are killed.
                victim = live.pop(rng.choice(sorted(live)))
                grandchild = await _spawn(tools, victim["name"])
                known.add(grandchild)
                os.kill(victim["worker_pid"], signal.SIGKILL)
                await tools.wait(victim["name"], until=["lost"], timeout_s=10)
                victims = _keys(victim) | {grandchild}

                def victims_gone(v: set[ProcKey] = victims) -> bool:
                    return not survivors(v)

                assert await apoll(victims_gone, GONE_WITHIN_S), (
                    f"{where}: {describe(survivors(victims))}"
                )
                await tools.call("remove_pane", name=victim["name"])
                if victim["name"] == "keeper":
                    live["keeper"] = keeper = await _start(tools, marks, "keeper", 2 * r)
                    known |= _keys(keeper)
                    await tools.wait("keeper", until=["idle"])
                # A (new) template comes back by itself, after the back-off.
                assert await apoll(lambda: bool(marks.templates()), 20), where
                workers = {p["worker_pid"] for p in live.values()}

                def service_clean(w: set[int] = workers) -> bool:
                    return _service_clean(supervisor, w)

                assert await apoll(service_clean, 5), (
                    f"{where}: {describe(k for c in children(supervisor) if (k := key_of(c)))}"
                )
            fresh = await _start(tools, marks, "fresh", 2 * ROUNDS + 1)
            known |= _keys(fresh)
            assert comm(ppid(fresh["worker_pid"]) or 0) == TEMPLATE_NAME
            await tools.wait("fresh", until=["idle"])
            await _turn(tools, "fresh", "from a new template")
            for name in [*live, "fresh"]:
                await tools.call("remove_pane", name=name)
        gone = await apoll(lambda: not survivors(known) and not marks.everything(), 10)
        assert gone, describe(set(survivors(known)) | marks.everything())
    finally:
        sigkill_all(known | marks.everything())


@pytest.mark.slow
async def test_template_and_supervisor_sigkilled_together(state_dir: Path, tmp_path: Path) -> None:
    """Workers outlive both; with no subreaper of the service left they end by themselves
    after the orphan grace, and kill their trees."""
    marks = Marks(tmp_path, count=2)
    known: set[ProcKey] = set()
    killed_at = 0.0
    env = marks.env(PANEWARDEN_ORPHAN_GRACE_S=ORPHAN_GRACE_S)
    try:
        try:
            async with Client(stdio_params(state_dir, **env)) as client:
                tools = Tools(client)
                for i, name in enumerate(("idle", "spawner")):
                    pane = await _start(tools, marks, name, i)
                    known |= _keys(pane)
                    await tools.wait(name, until=["idle"])
                known.add(await _spawn(tools, "spawner"))
                supervisor = supervisor_of(pane["worker_pid"])
                templates = marks.templates()
                assert supervisor is not None and templates
                known |= templates
                assert known <= marks.everything(), describe(known - marks.everything())
                sigkill_all(templates | {k for k in [key_of(supervisor)] if k})
                killed_at = time.monotonic()
        except* CLIENT_GONE:
            pass  # leaving the client of a dead server
        # Nobody re-adopts them: the workers notice the silence, wait the grace, clean up.
        within = ORPHAN_AFTER_S + float(ORPHAN_GRACE_S) + 8.0
        gone = await apoll(lambda: not survivors(known) and not marks.everything(), within)
        gone_after = time.monotonic() - killed_at
        assert gone, f"alive {gone_after:.1f}s after the kill: {describe(marks.everything())}"
        assert gone_after >= ORPHAN_AFTER_S - HEARTBEAT_S, f"all gone after only {gone_after:.1f}s"
    finally:
        sigkill_all(known | marks.everything())


async def test_a_template_of_another_build_is_retired_after_a_restart(
    state_dir: Path, tmp_path: Path
) -> None:
    """A new supervisor whose workers would differ (here: another log level) does not fork
    from the old template: it retires it, which exits once the panes it forked are gone."""
    marks = Marks(tmp_path, count=2)
    known: set[ProcKey] = set()
    try:
        try:
            async with Client(stdio_params(state_dir, **marks.env())) as client:
                tools = Tools(client)
                old = await _start(tools, marks, "old", 0)
                known |= _keys(old)
                await tools.wait("old", until=["idle"])
                old_template = key_of(ppid(old["worker_pid"]) or 0)
                supervisor = supervisor_of(old["worker_pid"])
                assert old_template is not None and supervisor is not None
                known.add(old_template)
                os.kill(supervisor, signal.SIGKILL)
        except* CLIENT_GONE:
            pass
        env = marks.env(PANEWARDEN_LOG_LEVEL="ERROR")
        async with Client(stdio_params(state_dir, **env)) as client:
            tools = Tools(client)
            new = await _start(tools, marks, "new", 1)
            known |= _keys(new)
            new_template = ppid(new["worker_pid"])
            assert comm(new_template or 0) == TEMPLATE_NAME
            assert old_template is not None  # as asserted above; mypy loses it across except*
            assert new_template != old_template[0]
            # The old template's pane was re-adopted and still works; the old template
            # stays its subreaper until that pane is gone, then exits.
            await tools.wait("old", until=["idle", "done"])
            await _turn(tools, "old", "after the upgrade")
            assert old_template in marks.templates()
            await tools.call("remove_pane", name="old")
            assert await apoll(lambda: not survivors({old_template}), GONE_WITHIN_S)
            await _turn(tools, "new", "still served")
            await tools.call("remove_pane", name="new")
        gone = await apoll(lambda: not survivors(known) and not marks.everything(), 10)
        assert gone, describe(set(survivors(known)) | marks.everything())
    finally:
        sigkill_all(known | marks.everything())


async def test_while_no_template_can_start_panes_start_cold_and_one_comes_back_by_itself(
    state_dir: Path, tmp_path: Path
) -> None:
    """Every template dies at its start while a file exists (injected at interpreter
    start): a pane started meanwhile starts cold, at once, and works. Once templates can
    start again, the service starts one after its back-off without any pane start
    asking, and the next pane is forked from it."""
    marks = Marks(tmp_path, count=2)
    inject = tmp_path / "inject"
    inject.mkdir()
    blocked = tmp_path / "templates-die"
    blocked.touch()
    deaths = tmp_path / "deaths"
    deaths.touch()
    (inject / "sitecustomize.py").write_text(
        "import os, sys\n"
        f"if 'paneworker.template' in sys.orig_argv and os.path.exists({str(blocked)!r}):\n"
        f"    with open({str(deaths)!r}, 'a') as f:\n"
        "        f.write('x')\n"
        "    os._exit(3)\n"
    )
    env = marks.env()
    env["PYTHONPATH"] = os.pathsep.join([str(inject), env["PYTHONPATH"]])
    known: set[ProcKey] = set()
    try:
        async with Client(stdio_params(state_dir, **env)) as client:
            tools = Tools(client)
            cold = await _start(tools, marks, "cold", 0)
            known |= _keys(cold)
            assert comm(ppid(cold["worker_pid"]) or 0) != TEMPLATE_NAME
            await tools.wait("cold", until=["idle"])
            await _turn(tools, "cold", "while no template can start")
            # A start asks for a template: wait until one more has died since, so that
            # no start is left in flight or scheduled by that request.
            seen = len(deaths.read_text())
            assert await apoll(lambda: len(deaths.read_text()) > seen, 40)
            blocked.unlink()
            # Nothing asks for a template now: it must come back on its own.
            assert await apoll(lambda: bool(marks.templates()), 40)
            known |= marks.templates()
            forked = await _start(tools, marks, "forked", 1)
            known |= _keys(forked)
            assert comm(ppid(forked["worker_pid"]) or 0) == TEMPLATE_NAME
            await tools.wait("forked", until=["idle"])
            for name in ("cold", "forked"):
                await tools.call("remove_pane", name=name)
        gone = await apoll(lambda: not survivors(known) and not marks.everything(), 10)
        assert gone, describe(set(survivors(known)) | marks.everything())
    finally:
        sigkill_all(known | marks.everything())


async def test_a_template_that_cannot_start_leaves_the_panes_cold(
    state_dir: Path, tmp_path: Path
) -> None:
    """The template dies at every start (injected at interpreter start): panes start cold,
    as the supervisor's children, and work."""
    marks = Marks(tmp_path, count=2)
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(
        "import os, sys\nif 'paneworker.template' in sys.orig_argv:\n    os._exit(3)\n"
    )
    env = marks.env()
    env["PYTHONPATH"] = os.pathsep.join([str(inject), env["PYTHONPATH"]])
    known: set[ProcKey] = set()
    try:
        async with Client(stdio_params(state_dir, **env)) as client:
            tools = Tools(client)
            for i, name in enumerate(("a", "b")):
                pane = await _start(tools, marks, name, i)
                known |= _keys(pane)
                assert comm(ppid(pane["worker_pid"]) or 0) != TEMPLATE_NAME
                await tools.wait(name, until=["idle"])
                await _turn(tools, name, f"cold {name}")
            assert not marks.templates()
            for name in ("a", "b"):
                await tools.call("remove_pane", name=name)
        gone = await apoll(lambda: not survivors(known) and not marks.everything(), 10)
        assert gone, describe(set(survivors(known)) | marks.everything())
    finally:
        sigkill_all(known | marks.everything())
