"""The pane's view of its program: emulator, status machine and output watches.

Drain, then parse. :meth:`ScreenState.drain` reads the PTY as fast as the program
writes into the terminal's backlog (cheap: a scan for queries and reports, and a
copy); the emulator catches up in batches when the loop is free
(:meth:`ScreenState.parse_step`) and completely whenever something looks at the
screen (:meth:`ScreenState.catch_up`: read_output, output watches, screen rules,
dialog and prompt checks). A query or an OSC 7501 report in the backlog is parsed
up to at once: queries are answered without delay, and a report updates the status
machine exactly when the screen has been parsed up to it, never before. While it
parses, the worker keeps reading the PTY between chunks, so a program printing a
burst is not slowed by the emulator.

The backlog is bounded (``boot.launch.output_buffer_bytes``). At the bound, with
``output_overflow = "throttle"`` (the default) the worker stops reading: the
program blocks in its write, nothing is lost. With ``"drop"`` the oldest unparsed
bytes are discarded, the screen converges from the newest output, and a warning
log line says how many bytes were skipped (``Terminal.skipped_bytes`` counts them).
Replies the terminal owes the program (query answers) are queued on the PTY.

Where the program sends no OSC 7501 root record, the agent kind's screen rules
(:mod:`paneworker.status.screen_rules`) decide the state instead, from ``after_step``:
only when the visible text or the window title changed, at most every
``RULES_INTERVAL_S``, and only once the same decision was seen on two evaluations
in a row, so a frame caught half-drawn never flips the status on its own (and,
before the first client input, an ``idle`` only once the screen was quiet for the
rules' ``startup_quiet_s``, after it for their ``idle_quiet_s``). The
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

from paneworker.procs.program import Program
from paneworker.screen.emulator import EmulatorUnavailable, ScreenModel
from paneworker.screen.feed import ScreenFeed
from paneworker.screen.patterns import Pattern
from paneworker.screen.terminal import Terminal
from paneworker.screen.turn_output import TurnMarks, rows_since, take_mark
from paneworker.status.machine import StatusMachine
from paneworker.status.osc7501 import StatusReport
from paneworker.status.screen_rules import Decision, RuleSet, bundled_rules, classify
from protocol.boot import BootRecord
from protocol.messages import OutputMatch, Status, ToSupervisor

log = logging.getLogger(__name__)

MAX_TEXT_BYTES = 900_000
# One batch of parsing when the loop is otherwise free; then requests are looked at.
PARSE_STEP_S = 0.02
# Screen rules look only at a caught-up screen; past this backlog they wait their turn.
RULES_MAX_BACKLOG = 256 * 1024
# Reads per drain call: the PTY hands out about 4 KiB per read.
DRAIN_MAX_READS = 256
# During a long catch-up, how often the worker's keepalive (heartbeat) gets a chance.
KEEPALIVE_EVERY_S = 0.25
SKIP_LOG_EVERY_S = 1.0
# The scrollback is compacted (ghostty compresses its pages) once output stopped this long.
COMPACT_AFTER_QUIET_S = 1.0
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
    # When a look last found the screen or title changed (for the quiet periods).
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
        spare: ScreenModel | None = None,
    ) -> None:
        """``rules`` default to the bundled rules for ``boot.launch.agent``; ``spare`` is a
        blank screen of the boot's backend and size to adopt (:mod:`paneworker.template.spares`).

        Raises:
            RulesError: the bundled rules file is broken (a packaging bug).
        """
        self._send = send
        self._pane = boot.launch.pane
        self.status = StatusMachine()
        self.rules = rules if rules is not None else bundled_rules(boot.launch.agent)
        self._clock = clock
        self._rules = _RulesProgress()
        self.program: Program | None = None
        self._limit = boot.launch.output_buffer_bytes
        self._drop = boot.launch.output_overflow == "drop"
        self.terminal = self._open_terminal(boot, spare)
        # Frames of the visible screen while the supervisor has viewers.
        self.screen_feed = ScreenFeed(lambda: self.terminal, send, clock)
        # Called now and then during a long catch-up (the worker sends heartbeats).
        self.keepalive: Callable[[], None] | None = None
        self._keepalive_at = 0.0
        self._skip_logged_at = float("-inf")
        self._skip_logged = 0
        self._uncompacted = 0  # bytes received since the scrollback was last compacted
        self.watches: dict[int, Watch] = {}
        self._watched_generation = -1
        self.turn_marks = TurnMarks()
        self.last_decision: Decision | None = None
        # When the program last wrote or the terminal last answered it (for settling).
        self.last_activity = float("-inf")

    def _open_terminal(self, boot: BootRecord, spare: ScreenModel | None) -> Terminal:
        def terminal(emulator: str, model: ScreenModel | None = None) -> Terminal:
            return Terminal(
                boot.launch.cols,
                boot.launch.rows,
                reply=self._reply,
                on_report=lambda _report: None,
                # In stream order, right where each change is in the output: two reports
                # in one read are two status changes, not one.
                on_root_change=self._apply_root,
                history_lines=boot.launch.history_lines,
                emulator=emulator,
                clock=self._clock,
                model=model,
            )

        try:
            return terminal(boot.launch.emulator, spare)
        except EmulatorUnavailable as exc:
            # The supervisor checks this at start; a worker that still cannot load it
            # keeps the pane usable on the default backend rather than failing it.
            log.error("%s; using pyte", exc, extra={"pane": self._pane})
            return terminal("pyte")

    def attach(self, program: Program | None) -> None:
        """Connect the PTY that query answers are written to."""
        self.program = program

    def _reply(self, data: bytes) -> None:
        self.last_activity = self._clock()
        if self.program is not None and not self.program.eof:
            self.program.queue_input(data)

    # ------------------------------------------------------------ output in

    @property
    def accepting_output(self) -> bool:
        """False while the backlog is full and the program must wait (throttle mode)."""
        return self._drop or self.terminal.pending < self._limit

    def has_parse_work(self) -> bool:
        """True when the loop should come back at once to parse more."""
        terminal = self.terminal
        return terminal.parse_limit() > terminal.parsed

    def parse_deadline(self) -> float | None:
        """When a held synchronized frame must be parsed anyway, or None."""
        return self.terminal.hold_deadline()

    def feed(self, data: bytes) -> None:
        """Receive output and parse it now (tests and tools; the worker drains)."""
        self.receive(data)
        self.catch_up()

    def receive(self, data: bytes) -> None:
        """Take program output into the backlog (drop mode: trim it to the bound)."""
        self.last_activity = self._clock()
        self._uncompacted += len(data)
        terminal = self.terminal
        terminal.receive(data)
        if self._drop and terminal.pending > self._limit:
            terminal.drop_oldest(self._limit // 2)
            self._log_skipped()

    def drain(self, max_reads: int = DRAIN_MAX_READS) -> None:
        """Read what the PTY holds into the backlog (up to the bound in throttle mode)."""
        prog = self.program
        if prog is None:
            return
        for _ in range(max_reads):
            if prog.eof or not self.accepting_output:
                return
            data = prog.read()
            if not data:
                return
            self.receive(data)

    def drain_to_end(self) -> None:
        """Read everything left on the PTY of a program that exited (no bound)."""
        prog = self.program
        while prog is not None and not prog.eof and (data := prog.read()):
            self.receive(data)

    def _between_chunks(self) -> None:
        self.drain()
        if self.keepalive is not None:
            now = self._clock()
            if now >= self._keepalive_at:
                self._keepalive_at = now + KEEPALIVE_EVERY_S
                self.keepalive()

    def catch_up(self) -> None:
        """Parse everything received so far (the PTY is read meanwhile, not parsed).

        What the screen is looked at through calls this first.
        """
        self.drain()
        self.terminal.catch_up(between=self._between_chunks)
        self._after_parse()

    def parse_step(self) -> None:
        """Parse for a bounded time (a query or report waiting is always reached)."""
        terminal = self.terminal
        if terminal.pending == 0:
            return
        terminal.catch_up(between=self._between_chunks, deadline=self._clock() + PARSE_STEP_S)
        self._after_parse()

    def _after_parse(self) -> None:
        self._check_watches()

    def _log_skipped(self) -> None:
        skipped = self.terminal.skipped_bytes
        now = self._clock()
        if now - self._skip_logged_at < SKIP_LOG_EVERY_S:
            return
        log.warning(
            "output overflow: skipped %d bytes of unparsed output (%d in total); "
            "the screen shows the newest output",
            skipped - self._skip_logged,
            skipped,
            extra={"pane": self._pane},
        )
        self._skip_logged_at = now
        self._skip_logged = skipped

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
        """Run once per loop step: parse a batch, then the screen rules (if no OSC 7501)."""
        self.parse_step()
        if (
            self._uncompacted
            and self.terminal.pending == 0
            and self._clock() - self.last_activity >= COMPACT_AFTER_QUIET_S
        ):
            self._uncompacted = 0
            self.terminal.compact()
        if not self._rules_look():
            return
        progress = self._rules
        if self._program_reports():
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
        if self.terminal.pending > RULES_MAX_BACKLOG:
            return  # busy: the parse steps get there first, the rules look afterwards
        self.catch_up()
        if self._program_reports():
            return  # a report came with the newest output: it decides
        generation = self._looked_at()
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
        if self._idle_unsettled(decision.state, now):
            return  # still pending: looked at again every interval until quiet long enough
        progress.pending = None
        progress.applied = key
        if self.status.apply(decision.state, decision.kind, decision.source):
            self._send(Status(status=self.status.snapshot()))

    def _rules_look(self) -> bool:
        """Whether the screen rules look at this pane at all: it has rules and its program
        runs. One predicate for ``after_step`` and ``rules_deadline``: a deadline the step
        never acts on is a loop that never sleeps (a program that exited at once)."""
        return bool(self.rules.rules) and self.status.lifecycle == "running"

    def _program_reports(self) -> bool:
        """True while the program's own OSC 7501 root record decides the state."""
        return self.terminal.records.root is not None

    def _idle_unsettled(self, state: str, now: float) -> bool:
        """An idle not yet quiet for the rules' ``startup_quiet_s`` (before the first
        input) or ``idle_quiet_s`` (after it)."""
        rules = self.rules
        quiet_s = rules.idle_quiet_s if self.status.input_seen else rules.startup_quiet_s
        if state != "idle" or quiet_s <= 0:
            return False
        return now - self._rules.changed_at < quiet_s

    def _looked_at(self) -> tuple[int, str]:
        """What the rules read, as a cheap key: visible text generation and window title."""
        return self.terminal.text_generation, self.terminal.title

    def compact_deadline(self) -> float | None:
        """When ``after_step`` compacts the scrollback of a quiet pane, or None."""
        if not self._uncompacted or self.terminal.pending:
            return None
        return self.last_activity + COMPACT_AFTER_QUIET_S

    def rules_deadline(self) -> float | None:
        """When ``after_step`` next has screen-rule work, or None (for the loop's timeout)."""
        progress = self._rules
        if not self._rules_look() or self._program_reports():
            return None
        if progress.pending is None and progress.generation == self._looked_at():
            return None
        return progress.due

    # ------------------------------------------------------------ text

    def text(self, lines: int | None, scrollback: bool) -> str:
        """Screen text (optionally with scrollback), last ``lines`` lines, bounded.

        Everything received before the call is parsed first.
        """
        self.catch_up()
        rows = self.terminal.display_lines()
        if scrollback:
            rows = self.terminal.history_lines() + rows
        return _render(rows, lines)

    def mark_input(self, cursor: int, prompt: str = "") -> None:
        """Mark where the screen stands before ``prompt``, the input taken at ``cursor``,
        is typed."""
        self.catch_up()
        terminal = self.terminal
        self.turn_marks.record(
            cursor, take_mark(terminal.history_lines(), terminal.display_lines(), prompt)
        )

    def turn_text(self, cursor: int, lines: int | None) -> str | None:
        """What the screen changed since the input typed at ``cursor`` (its last ``lines``
        lines, bounded), or None with no usable mark (see ``turn_output``)."""
        mark = self.turn_marks.get(cursor)
        if mark is None:
            return None
        self.catch_up()
        terminal = self.terminal
        rows = rows_since(mark, terminal.history_lines(), terminal.display_lines())
        return None if rows is None else _render(rows, lines)

    # ------------------------------------------------------------ watches

    def add_watch(self, watch: Watch) -> None:
        """Register a watch and match it against the current screen at once."""
        self.watches[watch.watch_id] = watch
        self._watched_generation = -1
        self.catch_up()
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


def _render(rows: list[str], lines: int | None) -> str:
    """The text of ``rows`` without trailing blank lines: the last ``lines`` of them, and
    the newest ``MAX_TEXT_BYTES`` at most (a frame must stay under the protocol limit)."""
    while rows and not rows[-1]:
        rows.pop()
    if lines is not None:
        rows = rows[-lines:] if lines > 0 else []
    text = "\n".join(rows)
    data = text.encode()
    if len(data) > MAX_TEXT_BYTES:
        text = data[-MAX_TEXT_BYTES:].decode(errors="ignore")
        text = text[text.find("\n") + 1 :]
    return text
