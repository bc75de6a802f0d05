"""What a request does to its pane: check the program runs, type bytes, look, reply.

Shared by the request state machines so each of them reads as its protocol only.
Replies that hand the client a cursor take it *before* the input was queued
(``cursor()``): a wait with ``after_seq`` set to it sees every status the input
caused, however fast the program answers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from protocol.errors import ErrorCode, PanewardenError
from protocol.messages import Failed, Ok, ToSupervisor

if TYPE_CHECKING:
    from paneworker.procs.program import Program
    from paneworker.screen.state import ScreenState


class PaneIO:
    """The pane as requests see it: its program, its screen and the reply channel."""

    def __init__(
        self,
        program: Callable[[], Program | None],
        screen: ScreenState,
        send: Callable[[ToSupervisor], object],
    ) -> None:
        self._program = program
        self.screen = screen
        self._send = send

    @property
    def program(self) -> Program | None:
        """The pane's program (None when it could not be started)."""
        return self._program()

    def running_program(self) -> Program:
        """The program, or pane_not_running when it is gone or never started."""
        prog = self.program
        if prog is None or self.screen.status.lifecycle != "running" or prog.eof:
            raise PanewardenError(ErrorCode.PANE_NOT_RUNNING, "the pane's program is not running")
        return prog

    def queue(
        self,
        data: bytes,
        done: Callable[[], None] | None = None,
        dropped: Callable[[], None] | None = None,
    ) -> None:
        """Queue bytes for the program's PTY and write what it takes now.

        ``done`` runs once all of it was written; ``dropped`` if the program went away first.
        """
        prog = self.running_program()
        prog.queue_input(data, done, dropped)
        prog.flush()

    def drain_output(self) -> None:
        """Parse what the program already wrote, so checks see the newest screen."""
        self.screen.catch_up()

    def cursor(self) -> int:
        """The pane's seq now: every status recorded from here on is after it."""
        return self.screen.status.seq

    def ok(self, rid: int, cursor: int | None = None) -> None:
        """Reply Ok with ``cursor`` (default: the seq now) and the pane's turn now."""
        status = self.screen.status
        seq = status.seq if cursor is None else cursor
        self._send(Ok(rid=rid, seq=seq, turn=status.turn))

    def fail(self, rid: int, exc: PanewardenError) -> None:
        """Reply with the error's stable code and message."""
        self._send(Failed(rid=rid, code=exc.code.value, message=exc.message))

    def send(self, msg: ToSupervisor) -> None:
        """Send any frame to the supervisor."""
        self._send(msg)
