"""The supervisor SIGKILLed in the middle of coordination calls, and restarted on the
same state dir: no duplicate lease, no lost receipt, and a closing pane either closed
with its capture recorded or still running and leased (and closable).

One ``serve --http`` service; each round issues ``controller_acquire``,
``controller_resume``, ``handoff`` or ``reviewer_close`` and SIGKILLs the service at a
random moment within the call's usual duration (measured first), then restarts it and
checks the durable state and the service's view of it, and that the controller can go
on. Seed the order and the moments with ``PANEWARDEN_TEST_SEED``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import anyio
import msgspec
import psutil
import pytest

from supervisor.store.statedir import atomic_write
from tests.conftest import Tools
from tests.control.conftest import HttpCoord, HttpCoords
from tests.control.support import (
    AUTHORITY_SHA,
    CHECKPOINT_SHA,
    Controller,
    acquire,
    controller_records,
    creds_of,
    pane_info,
    pane_lease_records,
    receipt_records,
    send_signal,
)
from tests.faults import ProcKey, alive, key_of, seeded_rng
from tests.polling import apoll

pytestmark = pytest.mark.anyio

OPS = ("acquire", "resume", "handoff", "close")
ROUNDS_PER_OP = 2
SETTLE_S = 30.0


class Killed(Exception):
    """The call did not answer: the service died under it."""


async def call_or_die(tools: Tools, tool: str, args: dict[str, Any]) -> dict[str, Any] | None:
    """The call's structured result (None for an error result), or raise Killed."""
    try:
        result = await tools.client.call_tool(tool, args, read_timeout_seconds=60)
    except Exception as exc:  # whatever the SDK raises for a dead server
        raise Killed(repr(exc)) from None
    return None if result.is_error else dict(result.structured_content or {})


@contextlib.asynccontextmanager
async def client_of(running: HttpCoord, *, doomed: bool = False) -> Any:
    """The alice client. When its server is killed under it (``doomed``), what the SDK
    raises on the way out is expected; a failed assertion is not."""
    try:
        async with running.client("alice") as tools:
            yield tools
    except* AssertionError:
        raise
    except* Exception:
        if not doomed:
            raise


def restart(running: HttpCoord) -> None:
    """SIGKILL the service (if it still runs) and start it again on its state dir."""
    proc = running.service.proc
    assert proc is not None
    running.service.remember_children()
    proc.kill()
    proc.wait(timeout=30)
    running.service.url_file.unlink(missing_ok=True)  # the dead service's URL
    running.service.start()


class World:
    """What the test knows, and what the durable state must still show after a crash."""

    def __init__(self, running: HttpCoord) -> None:
        self.running = running
        self.creds: dict[str, str] | None = None
        self.receipts: set[str] = set()
        self.panes = 0
        # Each reviewer pane's program and worker, to see them gone once it is closed.
        self.procs: dict[str, list[ProcKey]] = {}

    @property
    def state(self) -> Path:
        return self.running.state

    def controller(self, tools: Tools) -> Controller:
        assert self.creds is not None
        return Controller(tools, self.creds)

    async def regain(self, tools: Tools) -> Controller:
        """The controller's credentials after a crash: resume a lease we hold but whose
        token a killed call never returned, acquire after a release."""
        listed = [
            x
            for x in (await tools.call("controller_list"))["leases"]
            if x["controller_id"] == "boss"
        ]
        if listed and listed[0]["state"] in ("active", "expired"):
            granted = await tools.call(
                "controller_resume",
                controller_id="boss",
                authority_ref="regain",
                authority_sha256=AUTHORITY_SHA,
            )
            self.creds = creds_of(granted)
        elif not listed or listed[0]["state"] == "released":
            self.creds = (await acquire(tools, "boss")).creds
        return self.controller(tools)

    async def new_reviewer(self, ctl: Controller) -> str:
        self.panes += 1
        name = f"rev{self.panes}"
        await ctl.reviewer(name)
        pane = await pane_info(ctl.tools, name)
        keys = [key_of(pane["pid"]), key_of(pane["worker_pid"])]
        self.procs[name] = [k for k in keys if k is not None]
        return name

    async def check(self, tools: Tools, where: str) -> None:
        """The invariants after a restart."""
        # One current lease per controller, and at most one whose credentials work.
        records = [r for r in controller_records(self.state).values() if r.controller_id == "boss"]
        assert records, f"{where}: the controller's lease is gone"
        generations = sorted(r.generation for r in records)
        assert len(set(generations)) == len(generations), (
            f"{where}: duplicate generation {generations}"
        )
        listed = [
            x
            for x in (await tools.call("controller_list"))["leases"]
            if x["controller_id"] == "boss"
        ]
        assert len(listed) == 1 and listed[0]["generation"] == generations[-1], f"{where}: {listed}"
        if self.creds is not None and self.creds["lease_id"] != listed[0]["lease_id"]:
            stale = await self.controller(tools).error("controller_renew")
            assert stale["code"] == "fence_invalid", f"{where}: superseded credentials accepted"

        # No receipt lost; each is in a state the controller can finish.
        receipts = receipt_records(self.state)
        assert self.receipts <= set(receipts), f"{where}: lost {self.receipts - set(receipts)}"
        self.receipts |= set(receipts)

        # Every reviewer lease: closed with its capture and its pane gone, or retained
        # with its pane running and tagged.
        panes = {p["name"]: p for p in (await tools.call("list_panes"))["panes"]}
        for lease in pane_lease_records(self.state).values():
            if lease.state == "closed":
                assert lease.capture_sha256 is not None and lease.closed_seq is not None, (
                    f"{where}: {lease}"
                )
                assert lease.name not in panes, f"{where}: closed lease's pane {lease.name} runs"
                left = [k for k in self.procs.get(lease.name, []) if alive(k)]
                assert left == [], f"{where}: {lease.name}'s processes outlived its close"
            else:
                # `closing`: the close was asked for and did not happen (yet): the next
                # close finishes it.
                assert lease.state in ("active", "closing"), f"{where}: {lease.name}: {lease.state}"
                pane = panes.get(lease.name)
                assert pane is not None and pane["lifecycle"] == "running", (
                    f"{where}: {lease.name} gone"
                )
                assert pane["lease"] is not None and pane["lease"]["lease_id"] == lease.lease_id, (
                    f"{where}: untagged"
                )
                refused = await tools.error("send_input", name=lease.name, text="plain")
                assert refused["code"] == "pane_leased", f"{where}: {refused}"

    async def finish(self, ctl: Controller, where: str) -> None:
        """Finish interrupted closes; collect what is pending and abandon what is
        reserved (its pane settled)."""
        for lease in pane_lease_records(self.state).values():
            if lease.state == "closing":
                seq = (await ctl.tools.call("get_status", name=lease.name))["seq"]
                closed = await ctl.call("reviewer_close", lease_id=lease.lease_id, expected_seq=seq)
                assert closed["state"] == "closed" and closed["capture_sha256"], (
                    f"{where}: {closed}"
                )
        for receipt in receipt_records(self.state).values():
            if receipt.state == "pending":
                got = await ctl.call(
                    "collect_handoffs", receipts=[receipt.receipt_id], timeout_s=SETTLE_S
                )
                assert [c["status"]["state"] for c in got["completed"]] == ["done"], (
                    f"{where}: {got}"
                )
            elif receipt.state == "reserved":
                await ctl.tools.wait(receipt.name, until=["idle", "done"])
                done = await ctl.call("receipt_abandon", receipt=receipt.receipt_id)
                assert done["state"] == "abandoned", f"{where}: {done}"


async def run_op(op: str, tools: Tools, world: World, delay: float | None) -> float:
    """Issue ``op``; SIGKILL the service ``delay`` s into it (None: let it finish).
    Returns how long the call took (when it finished)."""
    ctl = world.controller(tools)
    name = next(iter(sorted(p for p in await live_reviewers(tools))), None)
    args: dict[str, Any]
    if op == "acquire":
        await ctl.call(
            "controller_release", checkpoint_ref="crash-test", checkpoint_sha256=CHECKPOINT_SHA
        )
        tool, args = (
            "controller_acquire",
            {"controller_id": "boss", "authority_ref": "a", "authority_sha256": AUTHORITY_SHA},
        )
    elif op == "resume":
        tool, args = (
            "controller_resume",
            {"controller_id": "boss", "authority_ref": "r", "authority_sha256": AUTHORITY_SHA},
        )
    elif op == "handoff":
        assert name is not None
        tool, args = (
            "handoff",
            {
                "creds": ctl.creds,
                "name": name,
                "text": f"prompt at {time.time():.3f}",
                "timeout_s": SETTLE_S,
            },
        )
    else:
        assert name is not None
        lease = next(
            x
            for x in (await tools.call("reviewer_list"))["leases"]
            if x["name"] == name and x["state"] == "active"
        )
        seq = (await tools.call("get_status", name=name))["seq"]
        tool, args = (
            "reviewer_close",
            {"creds": ctl.creds, "lease_id": lease["lease_id"], "expected_seq": seq},
        )
    outcome: dict[str, Any] = {}

    async def issue() -> None:
        started = time.monotonic()
        try:
            outcome["result"] = await call_or_die(tools, tool, args)
            outcome["took"] = time.monotonic() - started
        except Killed as exc:
            outcome["killed"] = str(exc)

    async with anyio.create_task_group() as group:
        group.start_soon(issue)
        if delay is not None:
            await anyio.sleep(delay)  # the fault's random moment, not a synchronisation
            restart_proc = world.running.service.proc
            assert restart_proc is not None
            restart_proc.kill()
    if delay is None:
        result = outcome["result"]
        assert result is not None, f"{op} failed without a crash"
        if op in ("acquire", "resume"):
            world.creds = creds_of(result)
        return float(outcome["took"])
    if "result" in outcome and outcome["result"] is not None and op in ("acquire", "resume"):
        world.creds = creds_of(outcome["result"])
    return delay


async def live_reviewers(tools: Tools) -> list[str]:
    return [
        x["name"] for x in (await tools.call("reviewer_list"))["leases"] if x["state"] == "active"
    ]


@pytest.mark.slow
@pytest.mark.timeout(420)
async def test_supervisor_sigkilled_during_coordination_calls(http_coords: HttpCoords) -> None:
    rng, seed = seeded_rng("test_supervisor_sigkilled_during_coordination_calls")
    running = http_coords.start(["alice"])
    world = World(running)
    took: dict[str, float] = {}
    async with client_of(running) as tools:
        world.creds = (await acquire(tools, "boss")).creds
        for _ in range(2):
            await world.new_reviewer(world.controller(tools))
        # How long each call takes here and now, so the kills land inside it.
        for op in OPS:
            took[op] = await run_op(op, tools, world, None)
            if op == "close":
                await world.new_reviewer(world.controller(tools))
        await world.finish(world.controller(tools), "warm-up")
    rounds = [op for op in OPS for _ in range(ROUNDS_PER_OP)]
    random.Random(seed).shuffle(rounds)
    for number, op in enumerate(rounds):
        delay = rng.uniform(0.0, 1.2 * took[op])
        where = f"seed {seed}, round {number}: {op} killed {delay * 1000:.0f} ms in"
        print(where)
        async with client_of(running, doomed=True) as tools:
            if len(await live_reviewers(tools)) < 2:
                await world.new_reviewer(await world.regain(tools))
            world.receipts |= set(receipt_records(world.state))
            await run_op(op, tools, world, delay)
        restart(running)
        async with client_of(running) as tools:
            await world.check(tools, where)
            ctl = await world.regain(tools)
            await world.finish(ctl, where)
            # The controller goes on: a handoff to a live reviewer completes.
            name = sorted(await live_reviewers(tools))[0]
            done = await ctl.call("handoff", name=name, text="after the crash", timeout_s=SETTLE_S)
            assert [c["status"]["state"] for c in done["completed"]] == ["done"], f"{where}: {done}"
            world.receipts |= set(receipt_records(world.state))


# ---------------------------------------------------------------- closes cut short


def _stopped(pid: int) -> bool:
    """Whether ``pid`` is alive and stopped (a SIGCONT or its death ends that)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_STOPPED
    except psutil.NoSuchProcess:
        return False


async def test_a_close_cut_short_after_the_worker_closed_keeps_its_capture(
    http_coords: HttpCoords,
) -> None:
    # The program is stopped, so the close's capture is its last screen. The supervisor
    # records the capture, then sends the worker its Close: it is SIGKILLed once the worker
    # acted on it (the worker's SIGCONT set the program going), with the lease `closing`
    # and the capture digest on it; the restarted service records the lease `closed`.
    # (Killed before the Close went out, the lease would stay `closing` with its pane
    # alive, for the next close to finish: not this test's case.)
    running = http_coords.start(["alice"])
    async with client_of(running, doomed=True) as tools:
        ctl = await acquire(tools, "boss")
        lease = await ctl.reviewer("rev")
        idle = await tools.wait("rev", until=["idle"])
        screen = await tools.call("read_output", name="rev", lines=10_000, scrollback=True)
        pane = await pane_info(tools, "rev")
        worker = key_of(pane["worker_pid"])
        assert worker is not None
        send_signal(pane["pid"], signal.SIGSTOP)
        args = {"creds": ctl.creds, "lease_id": lease["lease_id"], "expected_seq": idle["seq"]}
        async with anyio.create_task_group() as group:
            group.start_soon(call_or_die_quietly, tools, "reviewer_close", args)
            captured = await apoll(
                lambda: pane_lease_records(running.state)[lease["lease_id"]].capture_sha256, 20
            )
            assert captured, "the closing lease never recorded its capture"
            record = pane_lease_records(running.state)[lease["lease_id"]]
            assert record.state == "closing"
            # On a loaded machine the capture can be on disk before the Close is sent.
            assert await apoll(lambda: not _stopped(pane["pid"]), 20), "no Close reached it"
            running.service.remember_children()
            assert running.service.proc is not None
            running.service.proc.kill()
    assert record.capture_sha256 == hashlib.sha256(screen["text"].encode()).hexdigest()
    assert record.closed_seq == idle["seq"]
    # The orphaned worker finishes the close (SIGKILL after the grace) and exits.
    assert await apoll(lambda: not alive(worker), 30), "the worker never finished"
    restart(running)
    async with client_of(running) as tools:
        (closed,) = (await tools.call("reviewer_list"))["leases"]
        assert (closed["state"], closed["capture_sha256"]) == ("closed", record.capture_sha256)
        assert (await tools.call("list_panes"))["panes"] == []


async def test_a_close_cut_short_before_the_worker_closed_leaves_the_pane_leased(
    http_coords: HttpCoords,
) -> None:
    # The crash came after the lease was written `closing` and before the worker was
    # asked: the pane runs on, leased; the next close finishes the job.
    running = http_coords.start(["alice"])
    async with client_of(running, doomed=True) as tools:
        ctl = await acquire(tools, "boss")
        lease = await ctl.reviewer("rev")
        idle = await tools.wait("rev", until=["idle"])
        running.service.remember_children()
        assert running.service.proc is not None
        running.service.proc.kill()
        running.service.proc.wait(timeout=30)
    record = pane_lease_records(running.state)[lease["lease_id"]]
    interrupted = msgspec.structs.replace(
        record, state="closing", closed_seq=idle["seq"], capture_sha256="0" * 64
    )
    path = running.state / "leases" / "reviewer" / f"{lease['lease_id']}.json"
    atomic_write(path, msgspec.json.encode(interrupted))
    restart(running)
    async with client_of(running) as tools:
        ctl = Controller(tools, ctl.creds)
        pane = await pane_info(tools, "rev")
        assert pane["lifecycle"] == "running" and pane["lease"]["lease_id"] == lease["lease_id"]
        assert (await tools.error("send_input", name="rev", text="x"))["code"] == "pane_leased"
        assert (await ctl.error("relay", name="rev", text="x"))["code"] == "lease_state"
        seq = (await tools.call("get_status", name="rev"))["seq"]
        screen = await tools.call("read_output", name="rev", lines=10_000, scrollback=True)
        closed = await ctl.call("reviewer_close", lease_id=lease["lease_id"], expected_seq=seq)
        assert closed["state"] == "closed"
        assert closed["capture_sha256"] == hashlib.sha256(screen["text"].encode()).hexdigest()
        assert (await tools.call("list_panes"))["panes"] == []


async def call_or_die_quietly(tools: Tools, tool: str, args: dict[str, Any]) -> None:
    with contextlib.suppress(Killed):
        await call_or_die(tools, tool, args)


# ---------------------------------------------------------------- start-up reconciliation


async def test_a_lease_whose_pane_died_with_the_supervisor_is_orphaned_at_the_restart(
    http_coords: HttpCoords,
) -> None:
    # A pane's worker and the supervisor SIGKILLed at the same moment: the restarted
    # service re-adopts only the other pane, and before its first answer it has moved
    # the dead pane's reviewer lease to `orphaned`, with the reason, and says so in the
    # log and in service_status. The survivor's lease is kept and its pane tagged.
    running = http_coords.start(["alice"])
    async with client_of(running, doomed=True) as tools:
        ctl = await acquire(tools, "boss")
        doomed = await ctl.reviewer("doomed")
        kept = await ctl.reviewer("kept")
        worker = (await pane_info(tools, "doomed"))["worker_pid"]
        proc = running.service.proc
        assert proc is not None
        running.service.remember_children()
        os.kill(proc.pid, signal.SIGKILL)
        gone = send_signal(worker, signal.SIGKILL)
    proc.wait(timeout=30)
    assert await apoll(lambda: not alive(gone), 30), "the worker outlived its SIGKILL"
    running.service.url_file.unlink(missing_ok=True)
    running.service.start()
    async with client_of(running) as tools:
        assert [p["name"] for p in (await tools.call("list_panes"))["panes"]] == ["kept"]
        leases = {x["lease_id"]: x for x in (await tools.call("reviewer_list"))["leases"]}
        orphaned = leases[doomed["lease_id"]]
        assert orphaned["state"] == "orphaned", orphaned
        assert "did not survive the restart" in (orphaned["failure"] or ""), orphaned
        assert leases[kept["lease_id"]]["state"] == "active"
        assert (await pane_info(tools, "kept"))["lease"]["lease_id"] == kept["lease_id"]

        startup = (await tools.call("service_status"))["startup"]
        assert (startup["panes"], startup["matched"], startup["kept"]) == (1, 1, []), startup
        (change,) = startup["changed"]
        assert (change["lease_id"], change["previous"], change["state"]) == (
            doomed["lease_id"],
            "active",
            "orphaned",
        ), change
        assert change["reason"] in orphaned["failure"]
        assert f"{doomed['lease_id']} active->orphaned" in running.service.stderr()

        # Still retained until the controller ends it; then the name is free again.
        ctl = await World(running).regain(tools)
        done = await ctl.call(
            "lease_reconcile", lease_type="reviewer", lease_id=doomed["lease_id"], dry_run=False
        )
        assert done["action"] == "terminalised", done
        closed = await ctl.call(
            "reviewer_close",
            lease_id=kept["lease_id"],
            expected_seq=(await tools.call("get_status", name="kept"))["seq"],
        )
        assert closed["state"] == "closed"
