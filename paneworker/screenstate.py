"""The pane's view of its program: emulator, status machine and output watches.

Bytes from the PTY go through the terminal emulator; OSC 7501 reports update the
status machine; output watches are matched against the visible screen.
Replies the terminal owes the program (query answers) are queued on the PTY.

Where the program sends no OSC 7501 root record, the agent kind's screen rules
(:mod:`paneworker.screen_rules`) decide the state instead, from ``after_step``:
only when the visible text or the window title changed, at most every
``RULES_INTERVAL_S``, and only once the same decision was seen on two evaluations
in a row, so a frame caught half-drawn never flips the status on its own (and,
before the first client input, an ``idle`` only once the screen was quiet for the
rules' ``startup_quiet_s``). The
rules read the screen and, for agents that put their state there, the window title
(cross-checked with the screen: a title alone never reads idle). The OSC record
always wins while it exists; ``source`` says which one decided (``osc7501``,
``title`` or ``screen``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from paneworker.osc7501 import StatusReport
from paneworker.patterns import Pattern
from paneworker.program import Program
from paneworker.screen_rules import Decision, RuleSet, bundled_rules, classify
from paneworker.status import StatusMachine
from paneworker.terminal import Terminal
from protocol.boot import BootRecord
from protocol.messages import OutputMatch, Status, ToSupervisor

log = logging.getLogger(__name__)

MAX_TEXT_BYTES = 900_000
# Screen rules run at most this often: a spinner redraws many times a second and a
# decision is only needed at human speed.
RULES_INTERVAL_S = 0.1


@dataclass
class Watch:
    """An output watch: a compiled pattern or a plain substring."""

    watch_id: int
    needle: str
    regex: Pattern | None

    def find(self, lines: list[str]) -> str | None:
        """The first line that matches, or None."""
        for line in lines:
            if self.regex is not None:
                if self.regex.search(line):
                    return line
            elif self.needle in line:
                return line
        return None


@dataclass
class _RulesProgress:
    """Where the screen rules are: last screen read, decision waiting for a second look."""

    # What was last looked at: the text generation and the window title.
    generation: tuple[int, str] | None = None
    # When a look last found the screen or title changed (for startup_quiet_s).
    changed_at: float = 0.0
    due: float = 0.0
    pending: tuple[str, str | None] | None = None
    applied: tuple[str, str | None] | None = None

    def reset(self) -> None:
        self.generation = None
        self.pending = None
        self.applied = None


class ScreenState:
    """Emulator + status machine + watches for one pane."""

    def __init__(
        self,
        boot: BootRecord,
        send: Callable[[ToSupervisor], object],
        *,
        rules: RuleSet | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``rules`` default to the bundled rules for ``boot.agent``.

        Raises:
            RulesError: the bundled rules file is broken (a packaging bug).
        """
        self._send = send
        self._pane = boot.pane
        self.status = StatusMachine()
        self.rules = rules if rules is not None else bundled_rules(boot.agent)
        self._clock = clock
        self._rules = _RulesProgress()
        self.program: Program | None = None
        self.terminal = Terminal(
            boot.cols,
            boot.rows,
            reply=self._reply,
            on_report=lambda _report: None,
            # In stream order: two reports in one read are two status changes, not one.
            on_root_change=self._apply_root,
            history_lines=boot.history_lines,
        )
        self.watches: dict[int, Watch] = {}
        self._watched_generation = -1
        self.last_decision: Decision | None = None
        # When the program last wrote or the terminal last answered it (for settling).
        self.last_activity = float("-inf")

    def attach(self, program: Program | None) -> None:
        """Connect the PTY that query answers are written to."""
        self.program = program

    def _reply(self, data: bytes) -> None:
        self.last_activity = self._clock()
        if self.program is not None and not self.program.eof:
            self.program.queue_input(data)

    def feed(self, data: bytes) -> None:
        """Feed program output; update status and watches."""
        self.last_activity = self._clock()
        self.terminal.feed(data)
        self._check_watches()

    def _apply_root(self, root: StatusReport | None) -> None:
        if self.status.lifecycle != "running":
            return
        if root is None:
            changed = self.status.apply("clear", None, "osc7501")
        else:
            changed = self.status.apply(root.state, root.kind, "osc7501")
        if changed:
            self._send(Status(status=self.status.snapshot()))

    def program_exited(self, exit_code: int | None) -> None:
        """Record the program's end (after its leftovers were killed)."""
        self.terminal.records.drop_transient()
        if self.status.set_lifecycle("exited", exit_code):
            self._send(Status(status=self.status.snapshot()))

    def after_step(self) -> None:
        """Run once per loop step: let the screen rules decide when OSC 7501 does not."""
        if not self.rules.rules or self.status.lifecycle != "running":
            return
        progress = self._rules
        if self.terminal.records.root is not None:
            # The program reports its own state. Forget the screen's view, so that
            # when the record goes away the screen is read afresh.
            progress.reset()
            return
        now = self._clock()
        generation = self._looked_at()
        if generation == progress.generation and progress.pending is None:
            return
        if now < progress.due:
            return
        progress.due = now + RULES_INTERVAL_S
        if generation != progress.generation:
            progress.changed_at = now
        progress.generation = generation
        decision = classify(self.rules, self.terminal.display_lines(), self.terminal.title)
        self.last_decision = decision
        key = (decision.state, decision.kind)
        if key == progress.applied:
            progress.pending = None
            return
        if key != progress.pending:
            progress.pending = key
            return
        if self._startup_idle_unsettled(decision.state, now):
            return  # still pending: looked at again every interval until quiet long enough
        progress.pending = None
        progress.applied = key
        if self.status.apply(decision.state, decision.kind, decision.source):
            self._send(Status(status=self.status.snapshot()))

    def _startup_idle_unsettled(self, state: str, now: float) -> bool:
        """An idle before the first input that has not been quiet for ``startup_quiet_s``."""
        quiet_s = self.rules.startup_quiet_s
        if state != "idle" or quiet_s <= 0 or self.status.input_seen:
            return False
        return now - self._rules.changed_at < quiet_s

    def _looked_at(self) -> tuple[int, str]:
        """What the rules read, as a cheap key: visible text generation and window title."""
        return self.terminal.text_generation, self.terminal.title

    def rules_deadline(self) -> float | None:
        """When ``after_step`` next has screen-rule work, or None (for the loop's timeout)."""
        progress = self._rules
        if not self.rules.rules or self.terminal.records.root is not None:
            return None
        if progress.pending is None and progress.generation == self._looked_at():
            return None
        return progress.due

    # ------------------------------------------------------------ text

    def text(self, lines: int | None, scrollback: bool) -> str:
        """Screen text (optionally with scrollback), last ``lines`` lines, bounded."""
        rows = self.terminal.display_lines()
        if scrollback:
            rows = self.terminal.history_lines() + rows
        while rows and not rows[-1]:
            rows.pop()
        if lines is not None:
            rows = rows[-lines:] if lines > 0 else []
        text = "\n".join(rows)
        data = text.encode()
        if len(data) > MAX_TEXT_BYTES:
            # Keep the newest output; a frame must stay under the protocol limit.
            text = data[-MAX_TEXT_BYTES:].decode(errors="ignore")
            text = text[text.find("\n") + 1 :]
        return text

    # ------------------------------------------------------------ watches

    def add_watch(self, watch: Watch) -> None:
        """Register a watch and match it against the current screen at once."""
        self.watches[watch.watch_id] = watch
        self._watched_generation = -1
        self._check_watches()

    def _check_watches(self) -> None:
        if not self.watches:
            return
        generation = self.terminal.text_generation
        if generation == self._watched_generation:
            return
        self._watched_generation = generation
        lines = self.terminal.display_lines()
        for watch_id, watch in list(self.watches.items()):
            line = watch.find(lines)
            if line is not None:
                del self.watches[watch_id]
                self._send(OutputMatch(watch_id=watch_id, line=line, seq=self.status.seq))
