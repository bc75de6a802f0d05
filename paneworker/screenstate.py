"""The pane's view of its program: emulator, status machine and output watches.

Bytes from the PTY go through the terminal emulator; OSC 7501 reports update the
status machine; output watches are matched against the visible screen.
Replies the terminal owes the program (query answers) are queued on the PTY.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

from paneworker.osc7501 import StatusReport
from paneworker.program import Program
from paneworker.status import StatusMachine
from paneworker.terminal import Terminal
from protocol.boot import BootRecord
from protocol.messages import OutputMatch, Status, ToSupervisor

log = logging.getLogger(__name__)

MAX_TEXT_CHARS = 900_000


@dataclass
class Watch:
    """An output watch: a compiled pattern or a plain substring."""

    watch_id: int
    needle: str
    regex: re.Pattern[str] | None

    def find(self, lines: list[str]) -> str | None:
        """The first line that matches, or None."""
        for line in lines:
            if self.regex is not None:
                if self.regex.search(line):
                    return line
            elif self.needle in line:
                return line
        return None


class ScreenState:
    """Emulator + status machine + watches for one pane."""

    def __init__(self, boot: BootRecord, send: Callable[[ToSupervisor], object]) -> None:
        self._send = send
        self._pane = boot.pane
        self.status = StatusMachine()
        self.program: Program | None = None
        self._report_seen = False
        self.terminal = Terminal(
            boot.cols,
            boot.rows,
            reply=self._reply,
            on_report=self._on_report,
            history_lines=boot.history_lines,
        )
        self.watches: dict[int, Watch] = {}
        self._watched_generation = -1

    def attach(self, program: Program | None) -> None:
        """Connect the PTY that query answers are written to."""
        self.program = program

    def _reply(self, data: bytes) -> None:
        if self.program is not None and not self.program.eof:
            self.program.queue_input(data)

    def _on_report(self, _report: StatusReport) -> None:
        self._report_seen = True

    def feed(self, data: bytes) -> None:
        """Feed program output; update status and watches."""
        self.terminal.feed(data)
        if self._report_seen:
            self._report_seen = False
            self._apply_root(self.terminal.records.root)
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
        """Hook run once per loop step (reserved for screen rules)."""

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
        if len(text) > MAX_TEXT_CHARS:
            # Keep the newest output; a frame must stay under the protocol limit.
            text = text[-MAX_TEXT_CHARS:]
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
