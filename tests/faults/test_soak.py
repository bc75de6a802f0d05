"""Soak: concurrent HTTP clients, random worker SIGKILLs and one supervisor restart.

One ``panewarden serve --http`` service runs the demo agent (every pane program,
grandchild and worker carries a ``Marks`` marker). Six clients, each its own SDK session,
take random steps: start a pane under a name from a pool of seven, sometimes two or three
times at once (so starts collide: one wins, the others get ``pane_exists``; ``max_panes``
6 adds ``pane_limit``), type prompts (plain; ``dialog`` for a permission dialog; ``dialog
slow`` for one reported ``blocked`` 0.5 s before it is drawn; ``spawn`` for a detached
grandchild; ``exit``), wait with the cursor ``send_input``/``answer_dialog`` returned,
answer dialogs, read the screen, list and remove. A client types into, answers and removes
only the panes it started (with two drivers, which turn a prompt opens is not defined); it
reads, waits on and lists every pane. Meanwhile a chaos task SIGKILLs random workers
(through a pidfd, so a reused pid is never hit) and once SIGKILLs the service mid-traffic
and starts a new one on the same state dir; the surviving workers are re-adopted and the
clients reconnect. Faults come one at a time: after a worker's SIGKILL the chaos task
waits (bounded) until the service has killed what that worker left, since a service killed
before it could is a double fault that no successor can clean up (it never learns what the
dead worker's tree was).

Checked (see ``soak_ledger``): every error is ``{code, message}`` with an allowed code;
every wait after a cursor returns, before its deadline, the settled status of the turn
that input opened (or the pane's terminal lifecycle); ``seq`` and ``turn`` never go back
for one pane instance, across the restart; ``lost``/``worker_lost`` only for a worker the
test killed; no name is ever held by two live workers (ledger, ``list_panes`` and a
``/proc`` sampler); prompts show up only in their own pane; and, after the clients removed
their panes and the service stopped, no marked program, grandchild or worker is left.

Random steps come from ``PANEWARDEN_TEST_SEED`` (printed); thread scheduling does not, so
a seed replays the same choices, not the same interleaving.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections import defaultdict
from contextlib import suppress
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.faults import (
    Marks,
    ProcKey,
    alive,
    describe,
    key_of,
    ppid,
    seeded_rng,
    sigkill_all,
    with_arg,
)
from tests.faults.soak_client import (
    CLIENTS,
    MAX_PANES,
    POOL,
    STEPS_PER_CLIENT,
    TRANSPORT_ERRORS,
    Soak,
    SoakClient,
)
from tests.faults.soak_ledger import Ledger
from tests.polling import apoll
from tests.service.conftest import ServiceFactory, call, connect

pytestmark = pytest.mark.anyio

WORKER_KILLS = 4
CHAOS_STEP_WITHIN_S = 120.0
RUN_WITHIN_S = 240.0
# Workers give up on a silent service 15 s (silence) + this grace after its kill: long
# enough for the new one to start on a loaded machine and re-adopt them, short enough for
# an orphan it cannot re-adopt (a start the killed one never recorded) to be gone by the
# end of the run.
ORPHAN_GRACE_S = "10"
ALL_GONE_WITHIN_S = 30.0
# The service and the worker template kill what a dead worker left at once (and the
# service sweeps re-parented leftovers every few seconds); the bound only catches a service
# that never does.
SWEEP_WITHIN_S = 5.0
SAMPLE_EVERY_S = 0.2
FAULT_DELAY_MAX_S = 0.3


# ---------------------------------------------------------------- faults


def sigkill_worker(pid: int, marks: Marks, ledger: Ledger) -> ProcKey | None:
    """SIGKILL ``pid`` through a pidfd if it is one of this run's workers; its key if sent."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return None
    try:
        # The pidfd pins the process: what it names now is what the signal reaches.
        key = key_of(pid)
        if key is None or key not in marks.workers():
            return None
        ledger.killed.add(key)
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        except ProcessLookupError:
            return None
        return key
    finally:
        os.close(fd)


def awaiting_sweep(soak: Soak) -> set[ProcKey]:
    """Pane processes the service (or its worker template) adopted from a dead worker and
    has not killed yet."""
    assert soak.service.proc is not None
    reapers = {soak.service.proc.pid} | {pid for pid, _ in soak.marks.templates()}
    prefix = f"--pw-mark={soak.marks.run}-".encode()
    return {key for key in with_arg(lambda a: a.startswith(prefix)) if ppid(key[0]) in reapers}


async def kill_a_worker(soak: Soak, rng: random.Random) -> None:
    """SIGKILL the worker of a random running pane that ``list_panes`` shows."""
    listed: dict[str, Any] = {}
    try:
        async with connect(soak.url, soak.token) as client:
            listed = await call(client, "list_panes")
    except* TRANSPORT_ERRORS as group:
        soak.ledger.fail(f"chaos: list_panes failed: {group!r}")
    running = [p for p in listed.get("panes", []) if p["lifecycle"] == "running"]
    if not running:
        soak.ledger.outcomes["chaos:no pane to kill"] += 1
        return
    pane = rng.choice(running)
    killed = sigkill_worker(pane["worker_pid"], soak.marks, soak.ledger)
    soak.ledger.outcomes["chaos:worker SIGKILLed" if killed else "chaos:worker already gone"] += 1
    adopted = pane["worker_pid"] in soak.workers_before_restart and soak.generation > 0
    if adopted and killed:
        soak.killed_adopted.add(pane["name"])
    soak.fault(
        f"SIGKILL worker {pane['worker_pid']} of {pane['name']} ({pane['state']}, turn "
        f"{pane['turn']}{', re-adopted' if adopted else ''}): {'sent' if killed else 'gone'}"
    )
    if killed is None:
        return
    # One fault at a time: the dead worker's tree, re-parented to the service (its
    # subreaper), is killed by the service before the next fault can kill the service.
    dead = await apoll(lambda: not alive(killed), SWEEP_WITHIN_S)
    swept = dead and await apoll(lambda: not awaiting_sweep(soak), SWEEP_WITHIN_S)
    if not swept:
        soak.ledger.fail(
            f"{pane['name']}: {SWEEP_WITHIN_S}s after its worker's SIGKILL: "
            f"{describe({killed} if not dead else awaiting_sweep(soak))}"
        )


async def restart_service(soak: Soak) -> None:
    """SIGKILL the service mid-traffic and start a new one on the same state dir."""
    old = soak.service
    assert old.proc is not None
    old.remember_children()
    soak.restarting = True
    soak.workers_before_restart = {pid for pid, _ in soak.marks.workers()}
    soak.fault(f"SIGKILL the service; workers alive: {sorted(soak.workers_before_restart)}")
    old.proc.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    await anyio.to_thread.run_sync(old.proc.wait, 10)
    new = soak.services.successor(old)
    await anyio.to_thread.run_sync(new.start)
    soak.restart_s = time.monotonic() - killed_at
    soak.service, soak.url = new, new.url
    soak.generation += 1
    soak.restarting = False
    soak.restarted.set()
    soak.ledger.outcomes["chaos:service restarted"] += 1
    soak.fault(f"the new service answers at {new.url}")


async def chaos(soak: Soak, rng: random.Random) -> None:
    """Worker SIGKILLs at random points of the run, and one restart in its middle."""
    total = CLIENTS * STEPS_PER_CLIENT
    plan = [(int(total * rng.uniform(0.1, 0.9)), "kill") for _ in range(WORKER_KILLS)]
    plan.append((int(total * rng.uniform(0.4, 0.6)), "restart"))
    for at, action in sorted(plan):
        with anyio.move_on_after(CHAOS_STEP_WITHIN_S) as scope:
            await soak.milestone(at).wait()
        if scope.cancelled_caught:
            soak.ledger.fail(f"chaos: the clients never took {at} steps")
            return
        # The fault's random moment within the traffic, not a synchronisation.
        await anyio.sleep(rng.uniform(0.0, FAULT_DELAY_MAX_S))
        if action == "kill":
            await kill_a_worker(soak, rng)
        else:
            await restart_service(soak)


def live_workers_by_name(marks: Marks) -> dict[bytes, set[int]]:
    """For each pane marker, the live workers whose program carries it."""
    prefix = f"--pw-mark={marks.run}-".encode()
    found: dict[bytes, set[int]] = defaultdict(set)
    for (pid, _), arg in with_arg(lambda a: a.startswith(prefix)).items():
        parent = ppid(pid)
        if parent is None:
            continue
        with suppress(OSError):
            if b"paneworker" in Path(f"/proc/{parent}/cmdline").read_bytes():
                found[arg].add(parent)
    return found


async def sample_workers(soak: Soak, stop: anyio.Event) -> None:
    """Record every moment the process table shows one name under two live workers."""
    while not stop.is_set():
        found = await anyio.to_thread.run_sync(live_workers_by_name, soak.marks)
        soak.doubles.extend((arg, frozenset(w)) for arg, w in found.items() if len(w) > 1)
        # The sampling period, not a synchronisation: the loop ends as soon as stop is set.
        with anyio.move_on_after(SAMPLE_EVERY_S):
            await stop.wait()


def check_doubles(soak: Soak) -> None:
    """Two live workers for one name are a failure, unless one of them is an orphan of the
    killed service (a start it never recorded, so never re-adopted) on its way out."""
    for arg, workers in sorted(set(soak.doubles)):
        orphans = {
            w
            for w in workers
            if w in soak.workers_before_restart and w not in soak.ledger.seen_after_restart
        }
        if not orphans:
            soak.ledger.fail(f"{arg.decode()}: live workers {sorted(workers)} at once")


def leftovers(soak: Soak) -> str:
    """What still runs, each with its pane's name and a hint at the known leak."""
    found = with_arg(lambda a: a.startswith(f"--pw-mark={soak.marks.run}-".encode()))
    lines = [describe(soak.marks.workers())] if soak.marks.workers() else []
    for key, arg in sorted(found.items()):
        name = POOL[int(arg.rsplit(b"-", 1)[1])]
        known = (
            " (a re-adopted worker of this name was SIGKILLed: the leak that "
            "test_readopted_leftovers.py reproduces)"
            if name in soak.killed_adopted
            else ""
        )
        lines.append(f"{name}: {describe([key])}{known}")
    return "; ".join(lines)


# ---------------------------------------------------------------- the test


def profiles_file(marks: Marks, tmp: Path) -> Path:
    """The marked demo profile, with ``max_panes`` below the pool's size."""
    data = json.loads(marks.profiles_file().read_text())
    data["max_panes"] = MAX_PANES
    path = tmp / "soak-profiles.json"
    path.write_text(json.dumps(data))
    return path


async def sweep_and_stop(soak: Soak) -> None:
    """Remove what the clients left (starts nobody could claim), then stop gracefully."""
    async with connect(soak.url, soak.token) as client:
        for pane in (await call(client, "list_panes"))["panes"]:
            soak.ledger.outcomes["final sweep: unclaimed pane removed"] += 1
            await call(client, "remove_pane", {"name": pane["name"]})
        left = (await call(client, "list_panes"))["panes"]
        if left:
            soak.ledger.fail(f"panes left after every removal: {left}")
    code = await anyio.to_thread.run_sync(lambda: soak.service.stop(signal.SIGTERM, reap=False))
    if code != 0:
        soak.ledger.fail(f"the service's graceful stop exited {code}")


@pytest.mark.slow
@pytest.mark.timeout(RUN_WITHIN_S + 60)
async def test_soak_clients_worker_kills_and_a_restart(
    services: ServiceFactory, tmp_path: Path
) -> None:
    rng, seed = seeded_rng("test_soak_clients_worker_kills_and_a_restart")
    marks = Marks(tmp_path, count=len(POOL))
    env = marks.env(profiles_file(marks, tmp_path), PANEWARDEN_ORPHAN_GRACE_S=ORPHAN_GRACE_S)
    began = time.monotonic()
    soak = Soak(services, services.start(extra_env=env), marks)
    clients = [SoakClient(soak, cid, random.Random(rng.getrandbits(64))) for cid in range(CLIENTS)]
    chaos_rng = random.Random(rng.getrandbits(64))
    stop_sampling = anyio.Event()
    try:
        with anyio.fail_after(RUN_WITHIN_S):
            async with anyio.create_task_group() as sampling:
                sampling.start_soon(sample_workers, soak, stop_sampling)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(chaos, soak, chaos_rng)
                    for client in clients:
                        tg.start_soon(client.run)
                stop_sampling.set()
            await sweep_and_stop(soak)
        gone = await apoll(lambda: not marks.everything(), ALL_GONE_WITHIN_S)
        if not gone:
            soak.ledger.fail(f"left running after the stop: {leftovers(soak)}")
        check_doubles(soak)
    finally:
        sigkill_all(marks.everything())
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(soak.ledger.outcomes.items()))
    restart = f"{soak.restart_s:.1f}s" if soak.restart_s is not None else "none"
    print(
        f"soak seed {seed}: {soak.steps_done} steps in {time.monotonic() - began:.1f}s, "
        f"restart took {restart}; {outcomes}"
    )
    failures = soak.ledger.failures
    assert not failures, (
        f"seed {seed}: {len(failures)} failures:\n{soak.ledger.report()}\n"
        f"faults:\n" + "\n".join(soak.faults) + f"\nservice logs: {services.tmp_path}/svc*"
    )
