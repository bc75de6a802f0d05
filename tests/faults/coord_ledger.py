"""What the coordination soak saw, and the invariants it checks against it.

The ledger keeps a client-side log of every call (tool, arguments without credentials,
outcome: ``ok``, an error code, or ``unknown`` when the service died under the call) and,
per record, the states it was observed in. A record is observed only by its controller's
own sessions and by the quiescent checkpoints after each restart; a controller's two
sessions call concurrently, so an observation's history is only what ended before its
call began. The invariants (each failure names the record and the observations):

- **parses**: every record file under ``$STATE/leases`` and ``$STATE/receipts`` decodes
  strictly as its type; no file was set aside as ``*.json.corrupt``.
- **not lost**: every receipt and pane lease a call returned is on disk at every later
  checkpoint; so is the newest controller lease a client was granted (older generations
  are pruned by design: a controller keeps its current lease and its predecessor).
- **not duplicated**: per controller, no generation twice and one entry in
  ``controller_list``; per pane name, at most one retained pane lease and at most one
  outstanding receipt.
- **scopes**: no two retained writer leases of one repository share a worktree or a
  branch, or own overlapping scopes, or one owns what the other locks.
- **history**: every state a record is seen in is reachable from the state it was seen
  in before, in the state machines of docs/operations.md ("Receipts", "Pane leases",
  "Controller leases"): terminal states never change, so a receipt abandoned (or
  collected ``completed``) never reads ``pending`` again. A record's content fits its
  state (a ``completed`` receipt has its result, a ``failed`` one its failure code).

A call with an unknown outcome adds no observation: either outcome is allowed, and the
records it may have written are still checked by every invariant above.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from supervisor.control.records import (
    OUTSTANDING_RECEIPTS,
    RETAINED_STATES,
    ControllerLease,
    PaneLease,
    Receipt,
)

# The next states of each state (docs/operations.md); reachability is checked on these.
RECEIPT_NEXT: Mapping[str, frozenset[str]] = {
    "reserved": frozenset({"pending", "failed", "abandoned"}),
    "pending": frozenset({"completed", "failed", "abandoned"}),
    "completed": frozenset(),
    "failed": frozenset(),
    "abandoned": frozenset(),
}
PANE_LEASE_NEXT: Mapping[str, frozenset[str]] = {
    "provisioning": frozenset({"active", "failed_closed", "orphaned"}),
    "active": frozenset({"closing", "releasing", "failed_closed", "orphaned"}),
    # A refused close or release (the pane moved past expected_seq, a timeout) puts the
    # lease back in the state it left.
    "closing": frozenset({"closed", "orphaned", "active"}),
    "releasing": frozenset({"released", "release_failed", "orphaned", "active"}),
    "release_failed": frozenset({"releasing", "failed_closed", "orphaned"}),
    "orphaned": frozenset({"failed_closed"}),
    "closed": frozenset(),
    "released": frozenset(),
    "failed_closed": frozenset(),
}
CONTROLLER_NEXT: Mapping[str, frozenset[str]] = {
    "active": frozenset({"released", "superseded"}),
    "released": frozenset(),
    "superseded": frozenset(),
}
MACHINES: Mapping[str, Mapping[str, frozenset[str]]] = {
    "receipt": RECEIPT_NEXT,
    "pane_lease": PANE_LEASE_NEXT,
    "controller": CONTROLLER_NEXT,
}


def reachable(machine: Mapping[str, frozenset[str]], start: str) -> set[str]:
    """``start`` and every state reachable from it."""
    seen, stack = {start}, [start]
    while stack:
        for nxt in machine.get(stack.pop(), frozenset()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


def overlaps(a: str, b: str) -> bool:
    """Two normalised scopes overlap when equal or one contains the other by components."""
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


@dataclass
class Observation:
    state: str
    source: str
    at: float


@dataclass
class Ledger:
    """The call log, the observations and the failures of one soak run."""

    began: float = field(default_factory=time.monotonic)
    calls: list[str] = field(default_factory=list)
    seen: dict[tuple[str, str], list[Observation]] = field(
        default_factory=lambda: defaultdict(list)
    )
    returned: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    newest_controller: dict[str, tuple[int, str]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    broken: set[str] = field(default_factory=set)
    outcomes: Counter[str] = field(default_factory=Counter)

    def now(self) -> float:
        return time.monotonic() - self.began

    def log_call(self, who: str, tool: str, args: Mapping[str, Any], outcome: str) -> None:
        shown = {k: v for k, v in args.items() if k != "creds"}
        self.calls.append(f"{self.now():7.2f} {who} {tool} {json.dumps(shown)[:160]} -> {outcome}")
        self.outcomes[f"{tool}:{outcome.split(' (', 1)[0]}"] += 1

    def fail(self, message: str) -> None:
        self.failures.append(f"{self.now():7.2f} {message}")

    def observe(
        self, kind: str, key: str, state: str, source: str, started: float | None = None
    ) -> None:
        """Record that ``key`` read ``state`` in a call begun at ``started`` (ledger time,
        None: now); a state its history does not allow fails. Only observations that
        ended before this one began are its history: concurrent calls of one controller
        may see the record in either order."""
        begun = self.now() if started is None else started
        history = self.seen[(kind, key)]
        for before in [o for o in history if o.at < begun]:
            if state not in reachable(MACHINES[kind], before.state) and key not in self.broken:
                self.broken.add(key)  # one failure per record: its later reads repeat it
                trail = ", ".join(f"{o.state} ({o.source} @{o.at:.2f})" for o in history[-4:])
                self.fail(
                    f"history: {kind} {key} read {state!r} ({source}, begun @{begun:.2f}) "
                    f"after {before.state!r} ({before.source} @{before.at:.2f}); seen: {trail}"
                )
                break
        history.append(Observation(state, source, self.now()))

    def granted(self, kind: str, key: str) -> None:
        """A call returned this record: it must never be lost."""
        self.returned[kind].add(key)

    def controller_granted(self, controller_id: str, generation: int, lease_id: str) -> None:
        newest = self.newest_controller.get(controller_id)
        if newest is None or generation >= newest[0]:
            self.newest_controller[controller_id] = (generation, lease_id)

    def report(self, last_calls: int = 60) -> str:
        return "\n".join(
            ["failures:", *self.failures, f"last {last_calls} calls:", *self.calls[-last_calls:]]
        )


# ---------------------------------------------------------------- records on disk


@dataclass
class Records:
    controllers: dict[str, ControllerLease]
    pane_leases: dict[str, PaneLease]
    receipts: dict[str, Receipt]


def _decode_dir(
    directory: Path, record_type: type[Any], where: str, ledger: Ledger
) -> dict[str, Any]:
    found: dict[str, Any] = {}
    if not directory.exists():
        return found
    for path in sorted(directory.iterdir()):
        if path.name.endswith(".json.corrupt"):
            ledger.fail(f"{where}: parses: {path} was set aside as corrupt")
        if not path.name.endswith(".json"):
            continue
        try:
            found[path.name[: -len(".json")]] = msgspec.json.decode(
                path.read_bytes(), type=record_type, strict=True
            )
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            ledger.fail(f"{where}: parses: {path}: {exc}")
    return found


def read_records(state: Path, where: str, ledger: Ledger) -> Records:
    """Every coordination record on disk (a quiescent service: no call under way)."""
    leases = state / "leases"
    panes: dict[str, PaneLease] = {}
    for kind in ("reviewer", "writer", "adopted"):
        panes |= _decode_dir(leases / kind, PaneLease, where, ledger)
    return Records(
        controllers=_decode_dir(leases / "controller", ControllerLease, where, ledger),
        pane_leases=panes,
        receipts=_decode_dir(state / "receipts", Receipt, where, ledger),
    )


def check_records(records: Records, where: str, ledger: Ledger) -> None:
    """Every invariant of the module docstring that the records on disk can show."""
    _check_lost(records, where, ledger)
    _check_duplicates(records, where, ledger)
    _check_scopes(records.pane_leases.values(), where, ledger)
    for key, receipt in records.receipts.items():
        ledger.observe("receipt", key, receipt.state, where)
        _check_receipt_content(receipt, where, ledger)
    for key, lease in records.pane_leases.items():
        ledger.observe("pane_lease", key, lease.state, where)
    for key, ctl in records.controllers.items():
        ledger.observe("controller", key, ctl.state, where)


def _check_lost(records: Records, where: str, ledger: Ledger) -> None:
    for key in sorted(ledger.returned["receipt"] - set(records.receipts)):
        ledger.fail(f"{where}: lost: receipt {key} (returned by a call) is not on disk")
    for key in sorted(ledger.returned["pane_lease"] - set(records.pane_leases)):
        ledger.fail(f"{where}: lost: pane lease {key} (returned by a call) is not on disk")
    for controller_id, (generation, lease_id) in sorted(ledger.newest_controller.items()):
        if lease_id not in records.controllers:
            ledger.fail(
                f"{where}: lost: {controller_id}'s newest lease {lease_id} "
                f"(generation {generation}) is not on disk"
            )


def _check_duplicates(records: Records, where: str, ledger: Ledger) -> None:
    generations = Counter((c.controller_id, c.generation) for c in records.controllers.values())
    for (controller_id, generation), count in sorted(generations.items()):
        if count > 1:
            ledger.fail(f"{where}: duplicated: {controller_id} generation {generation} x{count}")
    retained = Counter(p.name for p in records.pane_leases.values() if p.state in RETAINED_STATES)
    for name, count in sorted(retained.items()):
        if count > 1:
            leases = [
                f"{k} {p.lease_type} {p.state}"
                for k, p in records.pane_leases.items()
                if p.name == name and p.state in RETAINED_STATES
            ]
            ledger.fail(f"{where}: duplicated: pane {name} has {count} retained leases: {leases}")
    outstanding = Counter(
        r.name for r in records.receipts.values() if r.state in OUTSTANDING_RECEIPTS
    )
    for name, count in sorted(outstanding.items()):
        if count > 1:
            ids = [
                f"{k} {r.state}"
                for k, r in records.receipts.items()
                if r.name == name and r.state in OUTSTANDING_RECEIPTS
            ]
            ledger.fail(f"{where}: duplicated: pane {name} has {count} outstanding receipts: {ids}")


def _check_scopes(leases: Iterable[PaneLease], where: str, ledger: Ledger) -> None:
    writers = [p for p in leases if p.writer is not None and p.state in RETAINED_STATES]
    for i, a in enumerate(writers):
        for b in writers[i + 1 :]:
            ta, tb = a.writer, b.writer
            assert ta is not None and tb is not None
            if ta.repository != tb.repository:
                continue
            clash = [
                f"owned {x} / owned {y}"
                for x in ta.owned_scopes
                for y in tb.owned_scopes
                if overlaps(x, y)
            ]
            clash += [
                f"owned {x} / locked {y}"
                for x, y in [(x, y) for x in ta.owned_scopes for y in tb.locked_scopes]
                + [(y, x) for x in ta.locked_scopes for y in tb.owned_scopes]
                if overlaps(x, y)
            ]
            if ta.worktree == tb.worktree:
                clash.append(f"worktree {ta.worktree}")
            if ta.branch == tb.branch:
                clash.append(f"branch {ta.branch}")
            if clash:
                ledger.fail(
                    f"{where}: scopes: writers {a.lease_id} ({a.name}, {a.state}) and "
                    f"{b.lease_id} ({b.name}, {b.state}) both retained: {clash}"
                )


def _check_receipt_content(receipt: Receipt, where: str, ledger: Ledger) -> None:
    problem = None
    if receipt.state == "completed" and receipt.result is None:
        problem = "completed without a result"
    elif receipt.state == "failed" and receipt.failure_code is None:
        problem = "failed without a failure code"
    elif receipt.state == "pending" and (receipt.turn is None or receipt.cursor is None):
        problem = "pending without its turn and cursor"
    if problem is not None:
        ledger.fail(f"{where}: history: receipt {receipt.receipt_id}: {problem}")
