"""Fault soak across coordination state: concurrent controllers, random SIGKILLs.

One ``panewarden serve --http`` service with named clients runs the demo agent (every
program and worker marked, see ``tests.faults.Marks``) on a real Git repository with
linked worktrees. ``CLIENTS`` clients, each its own identity and controller driven by
``SESSIONS`` concurrent SDK sessions with the same credentials (so one controller's
collect races its own abandon), take random steps for ``SOAK_S`` seconds
(``PANEWARDEN_SOAK_S`` runs longer): acquire (or resume) their controller lease, start and
close reviewers, start and release writers on shared worktrees with overlapping scopes
(so writers collide), relay, batch_handoff, collect_handoffs, receipt_abandon, and list
their receipts and leases. Meanwhile a chaos task, every few seconds, SIGKILLs a random
worker, the supervisor, or a worker and the supervisor at once, and starts a new
supervisor on the same state dir; clients reconnect.

After each restart (while no client calls) and at the end, the invariants of
``tests.faults.coord_ledger`` are checked against the records on disk and the client log,
and through the tools (``controller_list`` one entry per controller, ``lease_inventory`` no
name twice). Processes, from ``/proc``: every live marked worker is a pane ``list_panes``
shows and every marked program runs under such a worker, within a bound (a worker the
killed service never recorded waits for its orphan grace); after the service stops,
nothing marked is left.

Random choices come from ``PANEWARDEN_TEST_SEED`` (printed, and in the failure message);
thread and process scheduling do not, so a seed replays the choices, not the interleaving.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from mcp import Client
from mcp.types import TextContent

from tests.control.conftest import ALL_SCOPES, coordination_env
from tests.control.support import AUTHORITY_SHA, CHECKPOINT_SHA
from tests.faults import Marks, ProcKey, alive, describe, key_of, ppid, seeded_rng, sigkill_all
from tests.faults.coord_ledger import Ledger, Records, check_records, read_records
from tests.lanes.gitrepo import head, make_repo, status_sha256
from tests.polling import apoll
from tests.service.conftest import Service, ServiceFactory, connect, digest, new_token

pytestmark = pytest.mark.anyio

SOAK_S = float(os.environ.get("PANEWARDEN_SOAK_S", "60"))
CLIENTS = 3
SESSIONS = 2
WORKTREES = 4
SCOPES = ["src", "src/a.py", "src/ab.py", "docs", "tests"]
FAULT_EVERY_S = (4.0, 9.0)
FAULTS = ("worker", "supervisor", "both")
CALL_TIMEOUT_S = 20.0
COLLECT_TIMEOUT_S = 3.0
# A worker that lost its service gives up 15 s (three missed heartbeats) + this grace later.
ORPHAN_GRACE_S = 3.0
STRAYS_GONE_WITHIN_S = 15.0 + ORPHAN_GRACE_S + 15.0
ALL_GONE_WITHIN_S = 30.0
RUN_WITHIN_S = SOAK_S + 150.0


class Died(Exception):
    """The service did not answer the call: its outcome is unknown."""


# ---------------------------------------------------------------- the run's shared state


@dataclass
class Soak:
    factory: ServiceFactory
    service: Service
    marks: Marks
    tokens: dict[str, str]
    worktrees: list[Path]
    ledger: Ledger = field(default_factory=Ledger)
    up: anyio.Event = field(default_factory=anyio.Event)
    generation: int = 0
    over: bool = False
    faults: list[str] = field(default_factory=list)
    watchers: anyio.abc.TaskGroup | None = None

    @property
    def state(self) -> Path:
        return self.service.state_dir

    def fault(self, text: str) -> None:
        self.faults.append(f"{self.ledger.now():7.2f} {text}")


async def call(soak: Soak, who: str, client: Client, tool: str, args: dict[str, Any]) -> Any:
    """One logged call: its structured result, ``{"error": {...}}``, or raise Died."""
    try:
        with anyio.fail_after(CALL_TIMEOUT_S + 5):
            result = await client.call_tool(tool, args, read_timeout_seconds=CALL_TIMEOUT_S)
    except Exception as exc:  # whatever the SDK raises for a dead server
        soak.ledger.log_call(who, tool, args, f"unknown ({type(exc).__name__})")
        raise Died(repr(exc)) from None
    except BaseException:  # cancelled: the session's transport broke under the call
        soak.ledger.log_call(who, tool, args, "unknown (cancelled)")
        raise
    if result.is_error:
        text = next((c.text for c in result.content if isinstance(c, TextContent)), "")
        try:
            body = json.loads(text)
            code = str(body["code"])
        except (ValueError, KeyError, TypeError):
            soak.ledger.fail(f"{who} {tool}: untyped error {text[:200]!r}")
            body, code = {"code": "untyped", "message": text}, "untyped"
        soak.ledger.log_call(who, tool, args, f"error {code}")
        return {"error": body}
    soak.ledger.log_call(who, tool, args, "ok")
    return dict(result.structured_content or {})


# ---------------------------------------------------------------- one client


@dataclass
class View:
    """A client's own records, as its last lists showed them."""

    reviewers: dict[str, str] = field(default_factory=dict)  # lease_id -> pane name
    writers: dict[str, tuple[str, str]] = field(default_factory=dict)  # lease_id -> (name, wt)
    outstanding: dict[str, str] = field(default_factory=dict)  # receipt -> pane name


@dataclass
class Shared:
    """What a controller's sessions share: its credentials and its pane names."""

    creds: dict[str, str] | None = None
    counter: int = 0
    lock: anyio.Lock = field(default_factory=anyio.Lock)


class SoakClient:
    """One session of identity ``http:client<N>`` driving its controller ``ctl-<N>``
    (``SESSIONS`` of them per controller, concurrently, with the same credentials)."""

    def __init__(
        self, soak: Soak, cid: int, session: int, rng: random.Random, shared: Shared
    ) -> None:
        self.soak = soak
        self.name = f"client{cid}"
        self.who = f"client{cid}.{session}"
        self.controller_id = f"ctl-{cid}"
        self.rng = rng
        self.shared = shared
        self.began = 0.0
        self.view = View()

    @property
    def creds(self) -> dict[str, str] | None:
        return self.shared.creds

    async def run(self) -> None:
        while not self.soak.over:
            await self.soak.up.wait()
            generation, url = self.soak.generation, self.soak.service.url
            try:
                async with AsyncExitStack() as stack:
                    client = await stack.enter_async_context(
                        connect(url, self.soak.tokens[self.name])
                    )
                    while not self.soak.over and self.soak.generation == generation:
                        await self.step(client)
            except* Died as group:
                if self.soak.generation == generation and not self.soak.over:
                    self.soak.ledger.fail(f"{self.who}: a live service did not answer: {group!r}")
            except* AssertionError:
                raise
            except* Exception as group:  # the SDK's teardown of a dead server's session
                if self.soak.generation == generation and not self.soak.over:
                    self.soak.ledger.fail(f"{self.who}: {group!r}")

    async def call(self, client: Client, tool: str, **args: Any) -> Any:
        creds, self.began = self.shared.creds, self.soak.ledger.now()
        result = await call(self.soak, self.who, client, tool, args)
        error = result.get("error") or {}
        if error.get("code") == "fence_invalid" and self.shared.creds is creds:
            self.shared.creds = None  # resumed by the other session, or by a call that died
        return result

    def observe(self, kind: str, key: str, state: str, source: str) -> None:
        """An observation made by this session's last call."""
        self.soak.ledger.observe(kind, key, state, f"{self.who} {source}", self.began)

    async def step(self, client: Client) -> None:
        if self.creds is None:
            await self.regain(client)
            return
        await self.refresh(client)
        actions: list[tuple[int, Callable[[Client], Awaitable[None]]]] = [
            (3 if len(self.view.reviewers) < 2 else 0, self.reviewer_start),
            (2 if not self.view.writers else 0, self.writer_start),
            (4, self.relay),
            (2, self.batch),
            (4 if self.view.outstanding else 0, self.collect),
            (2 if self.view.outstanding else 0, self.abandon),
            (1 if self.view.reviewers else 0, self.reviewer_close),
            (1 if self.view.writers else 0, self.writer_release),
            (1, self.resume),
        ]
        weights = [w for w, _ in actions]
        (action,) = self.rng.choices([a for _, a in actions], weights=weights)
        await action(client)

    # ------------------------------------------------------------ observation

    def granted(self, result: dict[str, Any]) -> None:
        self.shared.creds = {k: result[k] for k in ("controller_id", "lease_id", "fence_token")}
        self.soak.ledger.controller_granted(
            self.controller_id, int(result["generation"]), result["lease_id"]
        )
        self.observe("controller", result["lease_id"], "active", "granted")

    async def regain(self, client: Client) -> None:
        """Acquire, or resume a lease a call that died may have granted."""
        async with self.shared.lock:
            if self.shared.creds is None:
                await self._regain(client)

    async def _regain(self, client: Client) -> None:
        listed = await self.call(client, "controller_list")
        mine = [x for x in listed.get("leases", []) if x["controller_id"] == self.controller_id]
        args = {
            "controller_id": self.controller_id,
            "authority_ref": "soak",
            "authority_sha256": AUTHORITY_SHA,
        }
        live = any(x["state"] in ("active", "expired") for x in mine)
        result = await self.call(
            client, "controller_resume" if live else "controller_acquire", **args
        )
        if "error" not in result:
            self.granted(result)

    async def resume(self, client: Client) -> None:
        creds = self.creds
        result = await self.call(
            client,
            "controller_resume",
            controller_id=self.controller_id,
            authority_ref="soak resume",
            authority_sha256=AUTHORITY_SHA,
        )
        if "error" not in result:
            if creds is not None:
                self.observe("controller", creds["lease_id"], "superseded", "resume")
            self.granted(result)

    async def refresh(self, client: Client) -> None:
        """Read this controller's leases and receipts (and record what they show)."""
        ledger = self.soak.ledger
        self.view = View()
        for tool, kind in (("reviewer_list", "reviewer"), ("writer_list", "writer")):
            for lease in (await self.call(client, tool)).get("leases", []):
                if lease["controller_id"] != self.controller_id:
                    continue
                self.observe("pane_lease", lease["lease_id"], lease["state"], tool)
                ledger.granted("pane_lease", lease["lease_id"])
                if lease["state"] == "active" and kind == "reviewer":
                    self.view.reviewers[lease["lease_id"]] = lease["name"]
                elif lease["state"] in ("active", "release_failed") and kind == "writer":
                    self.view.writers[lease["lease_id"]] = (lease["name"], lease["worktree"])
        listed = await self.call(client, "receipt_list", controller_id=self.controller_id)
        for receipt in listed.get("receipts", []):
            self.observe("receipt", receipt["receipt"], receipt["state"], "receipt_list")
            ledger.granted("receipt", receipt["receipt"])
            if receipt["state"] in ("reserved", "pending"):
                self.view.outstanding[receipt["receipt"]] = receipt["name"]
        controllers = await self.call(client, "controller_list")
        for lease in controllers.get("leases", []):
            if lease["controller_id"] == self.controller_id:
                state = "active" if lease["state"] == "expired" else lease["state"]
                self.observe("controller", lease["lease_id"], state, "controller_list")

    def outcome(self, result: dict[str, Any], source: str) -> None:
        """Record the receipt states a handoff or collect result shows."""
        observe = self.observe
        for item in result.get("completed", []):
            if item["status"]["state"] != "blocked":
                observe("receipt", item["receipt"], "completed", source)
        for rid in result.get("pending", []):
            self.soak.ledger.granted("receipt", rid)
        for item in result.get("failed", []):
            # A collect reports a reserved receipt as delivery_ambiguous, an abandoned one
            # by its state; a deliver failure may leave the receipt reserved.
            if item["code"] == "abandoned":
                observe("receipt", item["receipt"], "abandoned", source)
            elif source == "collect" and item["code"] != "delivery_ambiguous":
                observe("receipt", item["receipt"], "failed", source)

    # ------------------------------------------------------------ actions

    def idle_panes(self) -> list[str]:
        busy = set(self.view.outstanding.values())
        names = [*self.view.reviewers.values(), *(n for n, _ in self.view.writers.values())]
        return [n for n in names if n not in busy]

    def next_name(self, prefix: str) -> str:
        self.shared.counter += 1
        return f"{prefix}{self.name[-1]}-{self.shared.counter}"

    async def reviewer_start(self, client: Client) -> None:
        result = await self.call(
            client,
            "reviewer_start",
            creds=self.creds,
            name=self.next_name("r"),
            profile="demo",
            cwd="/",
            purpose="soak",
        )
        self.lease_result(result, "reviewer_start")

    def lease_result(self, result: dict[str, Any], source: str) -> None:
        if "error" not in result:
            self.soak.ledger.granted("pane_lease", result["lease_id"])
            self.observe("pane_lease", result["lease_id"], result["state"], source)

    async def writer_start(self, client: Client) -> None:
        worktree = self.rng.choice(self.soak.worktrees)
        owned = self.rng.sample(SCOPES, self.rng.randint(1, 2))
        rest = [s for s in SCOPES if s not in owned]
        locked = self.rng.sample(rest, self.rng.randint(0, 1))
        evidence = await anyio.to_thread.run_sync(lambda: (head(worktree), status_sha256(worktree)))
        result = await self.call(
            client,
            "writer_start",
            creds=self.creds,
            name=self.next_name("w"),
            profile="demo",
            purpose="soak",
            ticket_ref="soak",
            authority_ref="soak",
            authority_sha256=AUTHORITY_SHA,
            worktree=str(worktree),
            branch=f"{worktree.name}/work",
            base_commit=evidence[0],
            expected_head=evidence[0],
            expected_status_sha256=evidence[1],
            owned_scopes=owned,
            locked_scopes=locked,
            protected_branches=["main"],
        )
        self.lease_result(result, "writer_start")

    async def relay(self, client: Client) -> None:
        idle = self.idle_panes()
        if not idle:
            return
        result = await self.call(
            client, "relay", creds=self.creds, name=self.rng.choice(idle), text="soak relay"
        )
        if "error" not in result:
            self.soak.ledger.granted("receipt", result["receipt"])
            self.observe("receipt", result["receipt"], "pending", "relay")

    async def batch(self, client: Client) -> None:
        idle = self.idle_panes()
        if not idle:
            return
        names = self.rng.sample(idle, min(len(idle), self.rng.randint(1, 2)))
        result = await self.call(
            client,
            "batch_handoff",
            creds=self.creds,
            requests=[{"name": n, "text": "soak batch"} for n in names],
            mode=self.rng.choice(["all", "first"]),
            timeout_s=COLLECT_TIMEOUT_S,
        )
        self.outcome(result, "batch_handoff")

    async def collect(self, client: Client) -> None:
        receipts = self.rng.sample(
            sorted(self.view.outstanding), min(3, len(self.view.outstanding))
        )
        result = await self.call(
            client,
            "collect_handoffs",
            creds=self.creds,
            receipts=receipts,
            mode=self.rng.choice(["all", "first"]),
            timeout_s=COLLECT_TIMEOUT_S,
        )
        self.outcome(result, "collect")

    async def abandon(self, client: Client) -> None:
        receipt = self.rng.choice(sorted(self.view.outstanding))
        result = await self.call(client, "receipt_abandon", creds=self.creds, receipt=receipt)
        if "error" not in result:
            self.observe("receipt", receipt, result["state"], "receipt_abandon")

    async def seq_of(self, client: Client, name: str) -> int | None:
        status = await self.call(client, "get_status", name=name)
        return None if "error" in status else int(status["seq"])

    async def reviewer_close(self, client: Client) -> None:
        lease_id, name = self.rng.choice(sorted(self.view.reviewers.items()))
        seq = await self.seq_of(client, name)
        if seq is None:
            return
        result = await self.call(
            client, "reviewer_close", creds=self.creds, lease_id=lease_id, expected_seq=seq
        )
        self.lease_result(result, "reviewer_close")

    async def writer_release(self, client: Client) -> None:
        lease_id, (name, worktree) = self.rng.choice(sorted(self.view.writers.items()))
        seq = await self.seq_of(client, name)
        if seq is None:
            return
        wt = Path(worktree)
        evidence = await anyio.to_thread.run_sync(lambda: (head(wt), status_sha256(wt)))
        result = await self.call(
            client,
            "writer_release",
            creds=self.creds,
            lease_id=lease_id,
            expected_seq=seq,
            expected_head=evidence[0],
            expected_status_sha256=evidence[1],
            checkpoint_ref="soak",
            checkpoint_sha256=CHECKPOINT_SHA,
        )
        self.lease_result(result, "writer_release")


# ---------------------------------------------------------------- checks


async def check_service(soak: Soak, where: str) -> None:
    """The invariants on disk and through the tools, and the process check (deferred)."""
    ledger = soak.ledger
    check_records(read_records(soak.state, where, ledger), where, ledger)
    async with connect(soak.service.url, soak.tokens["client0"]) as client:
        controllers = await call(soak, "checker", client, "controller_list", {})
        ids = [x["controller_id"] for x in controllers.get("leases", [])]
        for cid in sorted({i for i in ids if ids.count(i) > 1}):
            ledger.fail(f"{where}: duplicated: controller_list shows {cid} {ids.count(cid)} times")
        inventory = await call(soak, "checker", client, "lease_inventory", {})
        names = [p["name"] for p in inventory.get("panes", [])]
        for name in sorted({n for n in names if names.count(n) > 1}):
            ledger.fail(f"{where}: duplicated: lease_inventory shows {name} twice: {inventory}")
        panes = (await call(soak, "checker", client, "list_panes", {})).get("panes", [])
    if where.startswith("after restart"):
        check_reconciled(read_records(soak.state, where, ledger), panes, where, ledger)
    listed = {p["worker_pid"] for p in panes if p.get("worker_pid")}
    stray = {k for k in soak.marks.workers() if k[0] not in listed}
    # A pane's processes descend from its worker: a confined program is two bwraps down.
    stray |= {k for k in soak.marks.all_pane_procs() if not _descends(k[0], listed)}
    if stray:
        assert soak.watchers is not None
        soak.watchers.start_soon(watch_strays, soak, where, stray)


# Lease states that claim a live pane: after a restart each must have its pane back.
CLAIMS_A_PANE = frozenset({"provisioning", "active", "closing", "releasing"})


def check_reconciled(
    records: Records, panes: list[dict[str, Any]], where: str, ledger: Ledger
) -> None:
    """After a restart no retained lease claims a pane the service did not re-adopt.

    The start-up reconciliation runs before the first call is answered, so by the time
    ``list_panes`` answered, a lease whose pane is gone reads ``orphaned`` (or its
    close finished), never ``active``.
    """
    names = {p["name"] for p in panes}
    for lease in records.pane_leases.values():
        if lease.state in CLAIMS_A_PANE and lease.name not in names:
            ledger.fail(
                f"{where}: reconciliation: lease {lease.lease_id} of gone pane "
                f"{lease.name} still reads {lease.state}"
            )


def _descends(pid: int, ancestors: set[int]) -> bool:
    """Whether one of ``ancestors`` is ``pid``'s parent, grandparent, …"""
    seen: set[int] = set()
    parent = ppid(pid)
    while parent is not None and parent > 1 and parent not in seen:
        if parent in ancestors:
            return True
        seen.add(parent)
        parent = ppid(parent)
    return False


async def watch_strays(soak: Soak, where: str, stray: set[ProcKey]) -> None:
    """A checkpoint's strays (processes of no listed pane) are gone within the bound."""
    if not await apoll(lambda: not any(alive(k) for k in stray), STRAYS_GONE_WITHIN_S):
        left = [k for k in stray if alive(k)]
        soak.ledger.fail(
            f"{where}: processes: {describe(left)} of no listed pane outlived "
            f"{STRAYS_GONE_WITHIN_S:.0f}s"
        )


# ---------------------------------------------------------------- chaos


def sigkill_marked_worker(soak: Soak, pid: int) -> bool:
    """SIGKILL ``pid`` through a pidfd if it is one of this run's workers."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        key = key_of(pid)
        if key is None or key not in soak.marks.workers():
            return False
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False
    finally:
        os.close(fd)


async def kill_a_worker(soak: Soak, rng: random.Random) -> None:
    listed: dict[str, Any] = {}
    try:
        async with connect(soak.service.url, soak.tokens["client0"]) as client:
            listed = await call(soak, "chaos", client, "list_panes", {})
    except* Died as group:
        soak.ledger.fail(f"chaos: a live service did not answer list_panes: {group!r}")
    running = [p for p in listed.get("panes", []) if p["lifecycle"] == "running"]
    if not running:
        soak.fault("no running pane to kill")
        return
    pane = rng.choice(running)
    sent = sigkill_marked_worker(soak, pane["worker_pid"])
    soak.fault(f"SIGKILL worker {pane['worker_pid']} of {pane['name']}: {sent}")


async def restart(soak: Soak) -> None:
    """SIGKILL the service, start a successor on its state dir, check, let clients in."""
    old = soak.service
    assert old.proc is not None
    old.remember_children()
    soak.up = anyio.Event()
    soak.generation += 1
    old.proc.send_signal(signal.SIGKILL)
    soak.fault("SIGKILL the supervisor")
    await anyio.to_thread.run_sync(old.proc.wait, 10)
    new = soak.factory.successor(old)
    await anyio.to_thread.run_sync(new.start)
    soak.service = new
    soak.fault(f"restarted at {new.url}")
    await check_service(soak, f"after restart {soak.generation}")
    soak.up.set()


async def chaos(soak: Soak, rng: random.Random, until: float) -> None:
    while time.monotonic() < until:
        # The faults' random moments within the traffic, not a synchronisation.
        await anyio.sleep(rng.uniform(*FAULT_EVERY_S))
        if time.monotonic() >= until:
            break
        fault = rng.choice(FAULTS)
        if fault in ("worker", "both"):
            await kill_a_worker(soak, rng)
        if fault in ("supervisor", "both"):
            await restart(soak)


# ---------------------------------------------------------------- the test


def start_service(factory: ServiceFactory, marks: Marks, tokens: dict[str, str]) -> Service:
    clients = [
        {"name": n, "token_sha256": digest(t), "scopes": ALL_SCOPES} for n, t in tokens.items()
    ]
    env = coordination_env(marks, PANEWARDEN_ORPHAN_GRACE_S=str(ORPHAN_GRACE_S))
    return factory.start(token=None, clients=clients, audit=True, extra_env=env)


@pytest.mark.slow
@pytest.mark.timeout(RUN_WITHIN_S + 60)
async def test_coordination_state_survives_concurrent_clients_and_sigkills(
    services: ServiceFactory, tmp_path: Path
) -> None:
    rng, seed = seeded_rng("test_coordination_state_survives_concurrent_clients_and_sigkills")
    marks = Marks(tmp_path)
    repo = make_repo(tmp_path)
    worktrees = [repo.worktree(f"wt{i}", f"wt{i}/work") for i in range(WORKTREES)]
    tokens = {f"client{i}": new_token() for i in range(CLIENTS)}
    soak = Soak(services, start_service(services, marks, tokens), marks, tokens, worktrees)
    soak.up.set()
    shared = [Shared() for _ in range(CLIENTS)]
    clients = [
        SoakClient(soak, i, session, random.Random(rng.getrandbits(64)), shared[i])
        for i in range(CLIENTS)
        for session in range(SESSIONS)
    ]
    chaos_rng = random.Random(rng.getrandbits(64))
    began = time.monotonic()
    try:
        with anyio.fail_after(RUN_WITHIN_S):
            async with anyio.create_task_group() as watchers:
                soak.watchers = watchers
                async with anyio.create_task_group() as tg:
                    for client in clients:
                        tg.start_soon(client.run)
                    await chaos(soak, chaos_rng, began + SOAK_S)
                    soak.over = True
                await check_service(soak, "at the end")
            code = await anyio.to_thread.run_sync(
                lambda: soak.service.stop(signal.SIGTERM, reap=False)
            )
            if code != 0:
                soak.ledger.fail(f"the service's graceful stop exited {code}")
            if not await apoll(lambda: not marks.everything(), ALL_GONE_WITHIN_S):
                soak.ledger.fail(f"processes: left after the stop: {describe(marks.everything())}")
    finally:
        sigkill_all(marks.everything())
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(soak.ledger.outcomes.items()))
    print(f"coordination soak seed {seed}: {time.monotonic() - began:.1f}s; {outcomes}")
    print("faults:\n" + "\n".join(soak.faults))
    failures = soak.ledger.failures
    assert not failures, (
        f"PANEWARDEN_TEST_SEED={seed}: {len(failures)} failures\n{soak.ledger.report()}\n"
        "faults:\n" + "\n".join(soak.faults) + f"\nservice logs: {services.tmp_path}/svc*"
    )
