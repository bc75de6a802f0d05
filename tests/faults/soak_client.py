"""The soak test's clients: one SDK session each, taking random steps against the service.

``Soak`` is one run's shared state: the service (replaced once by the restart), the
``Ledger`` of invariants, and the clients' progress (which the chaos task schedules its
faults on). ``SoakClient`` is one client: it starts panes under names from a small pool
(sometimes several starts of one name at once), drives the panes it started (prompts,
waits after their cursors, dialog answers, reads, removal) and looks at any pane (reads,
waits without a cursor, lists). Only a pane's starter types into it, answers it or removes
it: with two drivers, which turn a prompt opens is not defined, so no wait could be checked.

When the service dies under a session, the client forgets what the calls in flight may
have changed, reconnects to the new service, claims the starts that happened after all,
and learns its panes' status again with a wait without a cursor.
"""

from __future__ import annotations

import random
import re
import time
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.shared.exceptions import MCPError

from protocol.status import ENDED_LIFECYCLES
from tests.faults import Marks, key_of, survivors
from tests.faults.soak_ledger import Instance, Ledger, is_settled
from tests.service.conftest import CALL_TIMEOUT_S, Service, ServiceFactory, call, connect, token_of

POOL = tuple(f"soak-{i}" for i in range(7))
MAX_PANES = 6
CLIENTS = 6
STEPS_PER_CLIENT = 30
# Demo turns settle in well under a second; these bounds only catch hangs on a loaded box.
WAIT_TIMEOUT_S = 20.0
PEEK_TIMEOUT_S = 10.0
# Above call()'s own read timeout, so that a hung call is reported by that timeout.
CALL_DEADLINE_S = CALL_TIMEOUT_S + 15.0
RECONNECT_WITHIN_S = 60.0
# Prompt tokens (client, number): each pane's screen may only show its own.
TOKEN = re.compile(r"c\d+n\d+")
# What calls on, and leaving, the session of a service that died raise.
TRANSPORT_ERRORS = (
    MCPError,
    httpx2.HTTPError,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
)


@dataclass(frozen=True)
class Flight:
    """A call whose answer a dying service may swallow."""

    tool: str
    name: str
    inst: Instance | None
    sent_at: float


class Soak:
    """One run: the service (replaced once), the ledger, and the clients' progress."""

    def __init__(self, services: ServiceFactory, service: Service, marks: Marks) -> None:
        self.services = services
        self.service = service
        self.url = service.url
        self.token = token_of(service)
        self.marks = marks
        self.ledger = Ledger()
        self.generation = 0
        self.restarting = False
        self.restarted = anyio.Event()
        self.restart_s: float | None = None
        self.workers_before_restart: set[int] = set()
        self.steps_done = 0
        self._milestones: list[tuple[int, anyio.Event]] = []
        # (marker, worker pids) whenever the sampler saw one name under two live workers.
        self.doubles: list[tuple[bytes, frozenset[int]]] = []
        self.began = time.monotonic()
        # What the chaos task did and when, for the failure message.
        self.faults: list[str] = []
        # Names whose re-adopted worker the chaos task SIGKILLed.
        self.killed_adopted: set[str] = set()

    def fault(self, what: str) -> None:
        self.faults.append(f"{time.monotonic() - self.began:6.2f}s {what}")

    def milestone(self, steps: int) -> anyio.Event:
        """An event set once the clients together have taken ``steps`` steps."""
        event = anyio.Event()
        self._milestones.append((steps, event))
        self.step_taken(0)
        return event

    def step_taken(self, count: int = 1) -> None:
        self.steps_done += count
        for steps, event in self._milestones:
            if self.steps_done >= steps:
                event.set()

    async def service_after(self, generation: int) -> bool:
        """Wait (bounded) for a service newer than ``generation``; False if none comes."""
        with anyio.move_on_after(RECONNECT_WITHIN_S):
            while self.generation <= generation:
                await self.restarted.wait()
        return self.generation > generation


class SoakClient:
    """One SDK client taking random steps; see the module docstring."""

    def __init__(self, soak: Soak, cid: int, rng: random.Random) -> None:
        self.soak = soak
        self.ledger = soak.ledger
        self.cid = cid
        self.rng = rng
        self.owned: list[Instance] = []
        self.prompts = 0
        self.client: Client | None = None
        self.generation = 0
        self.in_flight: list[Flight] = []
        self.cut = False

    # ------------------------------------------------------------ sessions

    async def run(self) -> None:
        steps = 0
        while True:
            generation = self.soak.generation
            try:
                async with connect(self.soak.url, self.soak.token) as client:
                    self.client, self.generation = client, generation
                    if self.cut:
                        await self.resolve_after_cut()
                    while steps < STEPS_PER_CLIENT:
                        await self.step()
                        steps += 1
                        self.soak.step_taken()
                    await self.remove_all()
                return
            except* TRANSPORT_ERRORS as group:
                self.cut_off(generation, group)
            if not await self.soak.service_after(generation):
                self.ledger.fail(f"client {self.cid}: no service to reconnect to")
                return

    def cut_off(self, generation: int, group: BaseExceptionGroup[Exception]) -> None:
        """The session died under a call: forget what that call may have changed."""
        self.cut = True
        if not self.soak.restarting and generation == self.soak.generation:
            self.ledger.fail(f"client {self.cid}: session failed outside the restart: {group!r}")
        flights, self.in_flight = self.in_flight, []
        for flight in flights:
            tool, name, inst = flight.tool, flight.name, flight.inst
            if time.monotonic() - flight.sent_at >= CALL_TIMEOUT_S - 1:
                self.ledger.fail(f"client {self.cid}: {tool} on {name} hung: {group!r}")
            self.ledger.outcomes[f"{tool}:cut by the restart"] += 1
            if tool == "start_pane":
                self.ledger.uncertain_starts.setdefault(name, set()).add(self.cid)
            elif inst is not None:
                inst.synced = False
                inst.pending = None
                if tool == "remove_pane":
                    inst.remove_uncertain = True
                if tool == "send_input":
                    inst.line_dirty = True

    async def resolve_after_cut(self) -> None:
        """On the new service: claim starts that were cut but happened, drop what is gone."""
        listed = await self.list_panes()
        self.cut = False
        if listed is None:
            return
        by_name = {p["name"]: p for p in listed}
        for name, clients in list(self.ledger.uncertain_starts.items()):
            if self.cid not in clients:
                continue
            clients.discard(self.cid)
            pane = by_name.get(name)
            if pane is not None and name not in self.ledger.claims:
                inst = Instance(name, pane["worker_pid"], key_of(pane["worker_pid"]), self.cid)
                self.ledger.claim(inst, "a start cut by the restart")
                self.owned.append(inst)
                self.ledger.outcomes["start_pane:cut, then found"] += 1
        for inst in list(self.owned):
            pane = by_name.get(inst.name)
            if pane is not None and pane["worker_pid"] == inst.worker_pid:
                continue
            survived = inst.worker is not None and bool(survivors([inst.worker]))
            if survived and not inst.remove_uncertain and inst.worker not in self.ledger.killed:
                self.ledger.fail(
                    f"{inst.name}: worker {inst.worker_pid} survived the restart "
                    "but its pane was not re-adopted"
                )
            self.drop(inst)

    def drop(self, inst: Instance) -> None:
        self.ledger.release(inst)
        if inst in self.owned:
            self.owned.remove(inst)

    # ------------------------------------------------------------ calls

    async def call(
        self, tool: str, args: dict[str, Any], inst: Instance | None = None
    ) -> tuple[dict[str, Any], float]:
        """Call ``tool``; returns (result or ``{"error": …}``, when it was sent)."""
        assert self.client is not None
        flight = Flight(tool, str(args.get("name", "")), inst, time.monotonic())
        self.in_flight.append(flight)
        try:
            with anyio.fail_after(CALL_DEADLINE_S):
                result = await call(self.client, tool, args)
        except TimeoutError as exc:
            raise AssertionError(
                f"client {self.cid}: {tool} {args} hung for {CALL_DEADLINE_S}s; "
                f"found so far:\n{self.ledger.report()}"
            ) from exc
        self.in_flight.remove(flight)
        if "error" in result:
            self.ledger.check_error(tool, result["error"])
        else:
            self.ledger.outcomes[f"{tool}:ok"] += 1
        return result, flight.sent_at

    def owner_error(self, inst: Instance, tool: str, code: str) -> None:
        """What an error on an owned pane says about it."""
        if code == "worker_lost":
            self.ledger.check_lost(inst, f"{tool} answered worker_lost")
            inst.synced, inst.lifecycle, inst.pending = True, "lost", None
        elif code == "pane_not_running":
            inst.synced, inst.lifecycle, inst.pending = True, "exited", None
        elif code == "not_found":
            if inst.worker not in self.ledger.killed:
                self.ledger.fail(f"{inst.name}: {tool} on an owned pane answered not_found")
            self.drop(inst)
        else:
            inst.synced, inst.pending = False, None

    # ------------------------------------------------------------ steps

    async def step(self) -> None:
        mine = [i for i in self.owned if not i.removing]
        roll = self.rng.random()
        if not mine or roll < 0.2:
            await self.start(self.rng.choice(POOL))
        elif roll < 0.35:
            await self.peek(self.rng.choice(POOL))
        else:
            await self.drive(self.rng.choice(mine))

    async def start(self, name: str) -> None:
        """Start ``name``, sometimes two or three times at once: at most one start wins."""
        args = {
            "name": name,
            "profile": "demo",
            "extra_args": [self.soak.marks.arg(POOL.index(name))],
        }
        answers: list[tuple[dict[str, Any], float]] = []

        async def one() -> None:
            answers.append(await self.call("start_pane", args))

        async with anyio.create_task_group() as starts:
            for _ in range(1 if self.rng.random() < 0.7 else self.rng.randint(2, 3)):
                starts.start_soon(one)
        won = [(result, sent_at) for result, sent_at in answers if "error" not in result]
        lost = [result["error"]["code"] for result, _ in answers if "error" in result]
        # A start that ran before a slot freed up may also have met the pane limit.
        if len(won) > 1 or (won and set(lost) - {"pane_exists", "pane_limit"}):
            self.ledger.fail(f"{name}: concurrent starts answered {answers}")
        if not won:
            return
        result, sent_at = won[0]
        pane = result["pane"]
        inst = Instance(name, pane["worker_pid"], key_of(pane["worker_pid"]), self.cid)
        inst.lifecycle = pane["lifecycle"]
        self.ledger.claim(inst, "start_pane")
        self.ledger.observe(inst, sent_at, pane["seq"], pane["turn"], "start_pane", self.generation)
        self.owned.append(inst)

    async def drive(self, inst: Instance) -> None:
        """One step on an owned pane, chosen by what the client knows of it."""
        roll = self.rng.random()
        if inst.remove_uncertain or inst.lifecycle in ENDED_LIFECYCLES:
            await self.remove(inst)
        elif not inst.synced:
            await self.resync(inst)
        elif inst.pending is not None:
            await self.wait_turn(inst)
        elif inst.state == "blocked":
            if roll < 0.8:
                await self.answer(inst)
            elif roll < 0.9:
                await self.send(inst)
            else:
                await self.read(inst)
        elif roll < 0.6:
            await self.send(inst)
        elif roll < 0.72:
            await self.remove(inst)
        elif roll < 0.86:
            await self.read(inst)
        elif roll < 0.93:
            await self.answer(inst)
        else:
            await self.status(inst)

    async def resync(self, inst: Instance) -> None:
        """Learn an owned pane's status again: wait (no cursor) for it to settle."""
        args = {"name": inst.name, "timeout_s": WAIT_TIMEOUT_S}
        result, sent_at = await self.call("wait_status", args, inst)
        if "error" in result:
            self.owner_error(inst, "wait_status", result["error"]["code"])
            return
        status = result["status"]
        self.ledger.observe(
            inst, sent_at, status["seq"], status["turn"], "wait_status", self.generation
        )
        if result["timed_out"] or not is_settled(status):
            self.ledger.fail(f"{inst.name}: no settled status within {WAIT_TIMEOUT_S}s: {result}")
            return
        if status["lifecycle"] == "lost":
            self.ledger.check_lost(inst, "wait_status read lost")
        inst.learn(status)

    async def send(self, inst: Instance) -> None:
        self.prompts += 1
        token = f"c{self.cid}n{self.prompts}"
        kind = self.rng.choices(
            ("plain", "dialog", "slow", "spawn", "exit"), weights=(35, 25, 15, 15, 5)
        )[0]
        text = {
            "plain": f"{token} hello",
            "dialog": f"{token} dialog touch f{self.prompts}",
            "slow": f"{token} dialog slow ls",
            "spawn": f"{token} spawn a helper",
            "exit": "exit",
        }[kind]
        args: dict[str, Any] = {"name": inst.name, "text": text}
        if self.rng.random() < 0.5:
            args["expect_turn"] = inst.turn
        was_blocked = inst.state == "blocked"
        inst.tokens.add(token)
        result, sent_at = await self.call("send_input", args, inst)
        if "error" in result:
            code = result["error"]["code"]
            if was_blocked and code == "pane_blocked":
                return
            if code in ("pane_blocked", "cursor_mismatch"):
                # This client is the pane's only driver and saw it settled at this turn.
                self.ledger.fail(f"{inst.name}: send_input at {inst.state}/{inst.turn}: {result}")
            if code == "delivery_ambiguous":
                inst.line_dirty = True
            self.owner_error(inst, "send_input", code)
            return
        if was_blocked:
            self.ledger.fail(f"{inst.name}: send_input accepted while blocked: {result}")
        cursor, turn = result["seq"], result["turn"]
        self.ledger.observe(inst, sent_at, cursor, turn, "send_input", self.generation)
        opens = inst.turn + 1
        if text != "exit" and turn not in (inst.turn, opens):
            self.ledger.fail(f"{inst.name}: send_input at turn {inst.turn} answered {result}")
        expect = {"done", "blocked"}
        if text == "exit":
            # After a half-typed prompt, "exit" may have joined it: then it is a turn.
            expect = {"exited", *expect} if inst.line_dirty else {"exited"}
        inst.pending = (cursor, opens, text, frozenset(expect))
        inst.prompt = text
        inst.state = "working"
        if self.rng.random() < 0.7:
            await self.wait_turn(inst)

    async def answer(self, inst: Instance) -> None:
        answer = self.rng.choice(("allow_once", "deny_once"))
        args: dict[str, Any] = {"name": inst.name, "answer": answer}
        if self.rng.random() < 0.5:
            args["expect_turn"] = inst.turn
        was_blocked = inst.state == "blocked"
        result, sent_at = await self.call("answer_dialog", args, inst)
        if "error" in result:
            code = result["error"]["code"]
            if not was_blocked and code == "no_dialog":
                return
            if was_blocked and code in ("no_dialog", "cursor_mismatch"):
                self.ledger.fail(f"{inst.name}: answer_dialog at blocked/{inst.turn}: {result}")
            self.owner_error(inst, "answer_dialog", code)
            return
        if not was_blocked:
            self.ledger.fail(f"{inst.name}: answer_dialog accepted at {inst.state}: {result}")
        cursor, turn = result["seq"], result["turn"]
        self.ledger.observe(inst, sent_at, cursor, turn, "answer_dialog", self.generation)
        if turn != inst.turn:
            self.ledger.fail(f"{inst.name}: answer_dialog at turn {inst.turn} answered {result}")
        expect = {"done"} if answer == "allow_once" else {"cancelled"}
        inst.pending = (cursor, inst.turn, answer, frozenset(expect))
        inst.state = "working"
        await self.wait_turn(inst)

    async def wait_turn(self, inst: Instance) -> None:
        """Wait after the pending cursor: the settled status of the turn its input opened."""
        assert inst.pending is not None
        cursor, turn, what, expect = inst.pending
        args = {"name": inst.name, "after_seq": cursor, "timeout_s": WAIT_TIMEOUT_S}
        result, sent_at = await self.call("wait_status", args, inst)
        inst.pending = None
        if "error" in result:
            self.owner_error(inst, "wait_status", result["error"]["code"])
            return
        status = result["status"]
        # The first match after the cursor may be older than what the pane shows now.
        self.ledger.observe(
            inst,
            sent_at,
            status["seq"],
            status["turn"],
            "wait_status",
            self.generation,
            replay=True,
        )
        where = f"{inst.name}: wait after {what!r} (cursor {cursor}, turn {turn})"
        if result["timed_out"]:
            self.ledger.fail(f"{where} timed out after {WAIT_TIMEOUT_S}s: {status}")
            inst.synced = False
            return
        if status["seq"] <= cursor:
            self.ledger.fail(f"{where} answered a status at or before the cursor: {status}")
        if status["lifecycle"] == "lost":
            self.ledger.check_lost(inst, "wait_status read lost")
        elif status["lifecycle"] == "exited":
            if "exited" not in expect:
                self.ledger.fail(f"{where}: the program exited: {status}")
        elif status["state"] not in expect or status["turn"] != turn:
            self.ledger.fail(f"{where}: expected {sorted(expect)} of turn {turn}, got {status}")
        inst.learn(status)
        if status["state"] == "done" and not inst.line_dirty:
            inst.last_reply = inst.prompt
        inst.line_dirty = False

    async def read(self, inst: Instance) -> None:
        args = {"name": inst.name, "scrollback": True}
        result, sent_at = await self.call("read_output", args, inst)
        if "error" in result:
            self.owner_error(inst, "read_output", result["error"]["code"])
            return
        self.ledger.observe(
            inst, sent_at, result["seq"], result["turn"], "read_output", self.generation
        )
        text = result["text"]
        foreign = set(TOKEN.findall(text)) - inst.tokens
        if foreign:
            self.ledger.fail(f"{inst.name}: prompts of other panes on its screen: {foreign}")
        if inst.synced and inst.pending is None and inst.lifecycle == "running":
            if result["turn"] != inst.turn:
                self.ledger.fail(f"{inst.name}: read_output at turn {inst.turn}: {result}")
            reply = f"reply: {inst.last_reply}"
            if inst.state == "done" and inst.last_reply and reply not in text:
                self.ledger.fail(f"{inst.name}: {reply!r} is not on the screen: {text[-500:]!r}")

    async def status(self, inst: Instance) -> None:
        result, sent_at = await self.call("get_status", {"name": inst.name}, inst)
        if "error" in result:
            self.owner_error(inst, "get_status", result["error"]["code"])
            return
        self.ledger.observe(
            inst, sent_at, result["seq"], result["turn"], "get_status", self.generation
        )
        if result["lifecycle"] == "lost":
            self.ledger.check_lost(inst, "get_status read lost")
        elif inst.lifecycle == "running" and (result["state"], result["turn"]) != (
            inst.state,
            inst.turn,
        ):
            self.ledger.fail(f"{inst.name}: settled at {inst.state}/{inst.turn}, read {result}")

    async def remove(self, inst: Instance) -> None:
        inst.removing = True
        result, _ = await self.call("remove_pane", {"name": inst.name}, inst)
        if "error" in result:
            self.owner_error(inst, "remove_pane", result["error"]["code"])
            return
        if inst.worker is not None and survivors([inst.worker]):
            self.ledger.fail(f"{inst.name}: remove_pane answered, worker {inst.worker} runs on")
        self.drop(inst)

    async def remove_all(self) -> None:
        while self.owned:
            await self.remove(self.owned[0])

    # ------------------------------------------------------------ looking at any pane

    async def peek(self, name: str) -> None:
        """Read, get, wait on (no cursor) or list panes this client may not own."""
        what = self.rng.choice(("read_output", "get_status", "wait_status", "list_panes"))
        if what == "list_panes":
            await self.list_panes()
            return
        args: dict[str, Any] = {"name": name}
        if what == "wait_status":
            args["timeout_s"] = PEEK_TIMEOUT_S
        before = self.ledger.stable_claim(name)
        result, sent_at = await self.call(what, args)
        # The answer is about the instance that held the name all along, if one did.
        inst = before if self.ledger.stable_claim(name) is before else None
        if "error" in result:
            if result["error"]["code"] == "worker_lost" and inst is not None:
                self.ledger.check_lost(inst, f"{what} answered worker_lost")
            return
        status = result.get("status", result)
        if inst is not None:
            self.ledger.observe(inst, sent_at, status["seq"], status["turn"], what, self.generation)
            if status.get("lifecycle") == "lost":
                self.ledger.check_lost(inst, f"{what} read lost")
        if what == "wait_status" and (result["timed_out"] or not is_settled(status)):
            self.ledger.fail(f"{name}: wait_status without a cursor answered {result}")

    async def list_panes(self) -> list[dict[str, Any]] | None:
        before = dict(self.ledger.claims)
        result, sent_at = await self.call("list_panes", {})
        if "error" in result:
            return None
        panes: list[dict[str, Any]] = result["panes"]
        names = [p["name"] for p in panes]
        if len(set(names)) != len(names) or len(names) > MAX_PANES:
            self.ledger.fail(f"list_panes listed {names} (at most {MAX_PANES}, each once)")
        for pane in panes:
            if self.generation > 0:
                self.ledger.seen_after_restart.add(pane["worker_pid"])
            inst = before.get(pane["name"])
            if (
                inst is None
                or inst.removing
                or self.ledger.claims.get(pane["name"]) is not inst
                or inst.worker_pid != pane["worker_pid"]
            ):
                continue
            self.ledger.observe(
                inst, sent_at, pane["seq"], pane["turn"], "list_panes", self.generation
            )
            if pane["lifecycle"] == "lost":
                self.ledger.check_lost(inst, "list_panes read lost")
        return panes
