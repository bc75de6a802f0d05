"""The program on the pane's PTY: spawn it, read its output, queue input to it.

The program runs in its own session (ptyprocess forks with ``setsid``), so its pid
is also its session id and process-group id. The master fd is non-blocking: input
is queued and written when the PTY can take it, so a program that stops reading
never blocks the worker's loop.
"""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import struct
import termios
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ptyprocess import PtyProcess

from paneworker.procs.confined_child import child_setup
from protocol.limits import PidsCgroup, ProgramLimits

READ_CHUNK = 65536
TERMINAL_SIGNALS = (signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP)


@dataclass
class _Pending:
    data: bytes
    done: Callable[[], None] | None
    dropped: Callable[[], None] | None = None


class Program:
    """One spawned program and its PTY master."""

    def __init__(
        self,
        argv: list[str],
        cwd: str,
        env: dict[str, str],
        cols: int,
        rows: int,
        *,
        sandboxed: bool = False,
        limits: ProgramLimits | None = None,
        cgroup: PidsCgroup | None = None,
    ):
        """Spawn ``argv``; raises OSError (e.g. FileNotFoundError) if exec fails.

        ``sandboxed``: argv is a sandbox that runs the program (bwrap). ^C, ^\\ and ^Z go
        to the terminal's whole foreground group, the sandbox's own processes included:
        they start with those signals ignored, and the sandbox gives the program its
        defaults back (``supervisor.confinement.policy``); it also gets a keyring of its
        own, ``limits`` and ``cgroup`` (``confined_child``)."""
        preexec = (
            child_setup(limits or ProgramLimits(), cgroup, ignore=TERMINAL_SIGNALS)
            if sandboxed
            else None
        )
        self._proc = PtyProcess.spawn(
            argv, cwd=cwd, env=env, dimensions=(rows, cols), preexec_fn=preexec
        )
        # Ours to reap and close: stop ptyprocess from waiting or sleeping on its own.
        self._proc.delayafterclose = 0
        self._proc.delayafterterminate = 0
        self.pid: int = self._proc.pid
        self.fd: int = self._proc.fd
        os.set_blocking(self.fd, False)
        self._queue: deque[_Pending] = deque()
        self.eof = False

    def read(self) -> bytes:
        """Read what is available; b"" when nothing is, sets ``eof`` on EIO/EOF."""
        try:
            data = os.read(self.fd, READ_CHUNK)
        except BlockingIOError:
            return b""
        except OSError as exc:
            if exc.errno != errno.EIO:
                raise
            self.eof = True
            return b""
        if not data:
            self.eof = True
        return data

    def queue_input(
        self,
        data: bytes,
        done: Callable[[], None] | None = None,
        dropped: Callable[[], None] | None = None,
    ) -> None:
        """Queue ``data`` for the PTY; ``done`` runs once all of it was written.

        ``dropped`` runs instead if the program goes away before it was all written.
        """
        self._queue.append(_Pending(data, done, dropped))

    @property
    def wants_write(self) -> bool:
        """True while queued input waits for the PTY."""
        return bool(self._queue)

    def flush(self) -> None:
        """Write as much queued input as the PTY takes now."""
        while self._queue:
            head = self._queue[0]
            if head.data:
                try:
                    written = os.write(self.fd, head.data)
                except BlockingIOError:
                    return
                except OSError as exc:
                    if exc.errno not in (errno.EIO, errno.EBADF):
                        raise
                    # The program is gone: drop input nobody will read.
                    self._drop_queued()
                    return
                head.data = head.data[written:]
                if head.data:
                    return
            self._queue.popleft()
            if head.done is not None:
                head.done()

    def _drop_queued(self) -> None:
        pending, self._queue = self._queue, deque()
        for item in pending:
            if item.dropped is not None:
                item.dropped()

    def resize(self, cols: int, rows: int) -> None:
        """Set the PTY window size (the kernel sends SIGWINCH to the foreground group)."""
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def mark_reaped(self) -> None:
        """Tell ptyprocess the child is reaped so it never waits on it again."""
        self._proc.terminated = True

    def close(self) -> None:
        """Close the master fd (idempotent); input still queued is dropped."""
        self._drop_queued()
        self._proc.terminated = True
        if not self._proc.closed:
            self._proc.close(force=True)
