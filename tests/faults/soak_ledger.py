"""The soak test's record of what every client saw, and the invariants it checks.

The soak test (``test_soak.py``) drives one HTTP service from several clients at once;
this module holds what they learned and turns every answer into checks:

- who owns which pane instance (exactly one start of a name wins, and a name is never
  held by two live workers);
- every answer's ``seq`` and ``turn`` per pane instance (never below what an answer that
  completed before the request was sent already showed, across the supervisor restart);
- every error's shape and code (an explicit allow-list);
- ``lost`` and ``worker_lost`` only for a worker the test itself killed.

A violation is recorded, not raised, so one run reports all it found; the test asserts
that the list is empty at the end. Pure bookkeeping: no I/O besides ``/proc`` look-ups.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from protocol.status import ENDED_LIFECYCLES, SETTLED_STATES
from tests.faults import ProcKey, alive

# Every error code a client may meet in the soak, and why.
ALLOWED_CODES: frozenset[str] = frozenset(
    {
        "pane_exists",  # a start lost the race for its name
        "pane_limit",  # max_panes reached (the limit must hold under concurrent starts)
        "not_found",  # peeking at a name nobody holds, or one being removed
        "pane_blocked",  # input while a dialog is up
        "worker_lost",  # the pane's worker was SIGKILLed by the test
        "pane_not_running",  # the program exited (an ``exit`` prompt)
        "no_dialog",  # answering a pane that shows none
        "dialog_unrecognized",  # the dialog did not appear within the answer's wait
        "dialog_changed",  # the dialog moved on while it was being answered
        "delivery_ambiguous",  # the program did not visibly take a prompt in time
        "cursor_mismatch",  # expect_turn no longer matched
    }
)


def is_settled(status: dict[str, Any]) -> bool:
    """A status a default ``wait_status`` may return: a settled state or a terminal lifecycle."""
    return status["state"] in SETTLED_STATES or status["lifecycle"] in ENDED_LIFECYCLES


@dataclass
class Instance:
    """One started pane (one worker), as its owner knows it.

    ``synced`` is true while ``state``/``turn`` are the pane's settled status as the
    owner last saw it; an answer the owner could not see (a call cut by the restart, an
    ambiguous delivery) clears it until a wait without a cursor tells the status again.
    """

    name: str
    worker_pid: int
    worker: ProcKey | None
    owner: int
    removing: bool = False
    remove_uncertain: bool = False
    synced: bool = False
    lifecycle: str = "starting"
    state: str = "unknown"
    turn: int = 0
    # An input not waited on yet: (its cursor, its turn, the input, the states it may end in).
    pending: tuple[int, int, str, frozenset[str]] | None = None
    # Prompt tokens typed into this pane; any other token on its screen was misrouted.
    tokens: set[str] = field(default_factory=set)
    # The prompt of the turn in progress, and the last one whose turn finished (unless a
    # half-typed prompt may have joined it): its reply must be on the screen.
    prompt: str | None = None
    last_reply: str | None = None
    line_dirty: bool = False
    # (when the answer arrived, seq, turn) of every answer about this instance.
    seen: list[tuple[float, int, int]] = field(default_factory=list)

    def learn(self, status: dict[str, Any]) -> None:
        """Take a settled status as the pane's current one."""
        self.synced = True
        self.lifecycle = status["lifecycle"]
        self.state = status["state"]
        self.turn = status["turn"]


@dataclass
class Ledger:
    """Shared by every client task of one soak run (one event loop: no locks needed)."""

    failures: list[str] = field(default_factory=list)
    repeats: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    # The current claim on each name; a name without one is free as far as the test knows.
    claims: dict[str, Instance] = field(default_factory=dict)
    # Names whose start was cut by the restart, with the clients that sent it.
    uncertain_starts: dict[str, set[int]] = field(default_factory=dict)
    # Workers the test SIGKILLed (pid, start ticks).
    killed: set[ProcKey] = field(default_factory=set)
    # Workers seen in any answer of the restarted service (re-adopted or new).
    seen_after_restart: set[int] = field(default_factory=set)

    def fail(self, what: str) -> None:
        """Record a violation (a repeat of the same one is counted, not listed again)."""
        if not self.repeats[what]:
            self.failures.append(what)
        self.repeats[what] += 1

    def report(self) -> str:
        """The violations, each with how often it was seen."""
        return "\n".join(
            f"{what} (x{self.repeats[what]})" if self.repeats[what] > 1 else what
            for what in self.failures
        )

    # ------------------------------------------------------------ answers

    def check_error(self, tool: str, error: dict[str, Any]) -> str:
        """Count an error answer; returns its code. Fails on a shape or code not allowed."""
        code = str(error.get("code"))
        self.outcomes[f"{tool}:{code}"] += 1
        if set(error) != {"code", "message"} or not isinstance(error.get("message"), str):
            self.fail(f"{tool}: error object is not {{code, message}}: {error}")
        if code not in ALLOWED_CODES:
            self.fail(f"{tool}: error code {code!r} is not allowed: {error}")
        return code

    def observe(
        self,
        inst: Instance,
        sent_at: float,
        seq: int,
        turn: int,
        what: str,
        generation: int,
        *,
        replay: bool = False,
    ) -> None:
        """One answer about ``inst``, sent at ``sent_at`` to the service of ``generation``
        (0 before the restart): seq and turn never go back. A ``replay`` (a wait after a
        cursor, which returns the first match after it) may be older than the pane's
        status; its own check is that it comes after the cursor."""
        before = [(s, t) for (at, s, t) in inst.seen if at < sent_at]
        if before and not replay:
            max_seq = max(s for s, _ in before)
            max_turn = max(t for _, t in before)
            if seq < max_seq or turn < max_turn:
                self.fail(
                    f"{inst.name} (worker {inst.worker_pid}): {what} answered seq {seq} "
                    f"turn {turn} after an earlier answer showed seq {max_seq} turn {max_turn}"
                )
        inst.seen.append((time.monotonic(), seq, turn))
        if generation > 0:
            self.seen_after_restart.add(inst.worker_pid)

    def check_lost(self, inst: Instance, what: str) -> None:
        """``lost`` or ``worker_lost`` about ``inst``: only for a worker the test killed."""
        if inst.worker in self.killed or (
            inst.worker is None and any(pid == inst.worker_pid for pid, _ in self.killed)
        ):
            return
        if inst.worker is not None and alive(inst.worker):
            self.fail(f"{inst.name}: {what} although worker {inst.worker_pid} is alive")
        else:
            self.fail(f"{inst.name}: worker {inst.worker_pid} died without being killed ({what})")

    # ------------------------------------------------------------ claims

    def claim(self, inst: Instance, what: str) -> None:
        """``inst`` won its name: no live worker may still hold that name."""
        old = self.claims.get(inst.name)
        if old is not None and not old.removing and old.worker is not None and alive(old.worker):
            self.fail(
                f"{inst.name}: {what} gave worker {inst.worker_pid} while worker "
                f"{old.worker_pid} (client {old.owner}) still holds the name"
            )
        self.claims[inst.name] = inst
        self.uncertain_starts.pop(inst.name, None)

    def release(self, inst: Instance) -> None:
        """``inst`` is gone (removed, or vanished with its killed worker)."""
        if self.claims.get(inst.name) is inst:
            del self.claims[inst.name]

    def stable_claim(self, name: str) -> Instance | None:
        """The claim an answer about ``name`` can be attributed to, if it is not changing."""
        inst = self.claims.get(name)
        return None if inst is None or inst.removing else inst
