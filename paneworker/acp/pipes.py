"""The program of an ACP pane on three pipes: its stdin, stdout and stderr.

The program runs in its own session (``setsid``: its pid is its session and process
group id, as on a PTY), so the reaper's tree kill finds it the same way, with the
cleared environment and cwd the supervisor decided. Every fd is non-blocking: a
program that stops reading its stdin never blocks the worker's loop, and input is
queued (bounded) and written when the pipe can take it. The program is reaped by the
worker's reaper (``waitpid(-1)``), never by ``subprocess``: its ``Popen`` is only the
spawn (``_posixsubprocess``: close_fds, cwd, exec errors reported), told the exit code
afterwards so it never waits on the pid itself.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections import deque
from collections.abc import Callable
from typing import IO

READ_CHUNK = 65536
# Input queued for a program that does not read it: past this the session is broken.
MAX_QUEUED_INPUT = 8 * 1024 * 1024
# The newest stderr the pane keeps (the agent's own words when a session cannot start).
STDERR_TAIL_BYTES = 4096


def _own(file: IO[bytes]) -> int:
    fd = os.dup(file.fileno())
    file.close()
    return fd


class InputOverflow(OSError):
    """The program stopped reading its stdin and the queue reached its bound."""


class PipeProgram:
    """One spawned program and its three pipe ends (ours)."""

    def __init__(
        self,
        argv: list[str],
        cwd: str,
        env: dict[str, str],
        setup: Callable[[], None] | None = None,
    ) -> None:
        """Spawn ``argv``; raises OSError (e.g. FileNotFoundError) if exec fails.
        ``setup`` runs in the child before the exec (a sandbox's, ``confined_child``)."""
        self._proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
            bufsize=0,
            preexec_fn=setup,
        )
        assert self._proc.stdin is not None
        assert self._proc.stdout is not None
        assert self._proc.stderr is not None
        self.pid: int = self._proc.pid
        # Own raw fds (copies, close-on-exec): the file objects are closed at once.
        self.stdin_fd: int | None = _own(self._proc.stdin)
        self.fd: int = _own(self._proc.stdout)
        self.stderr_fd: int | None = _own(self._proc.stderr)
        self._proc.stdin = self._proc.stdout = self._proc.stderr = None
        for fd in (self.stdin_fd, self.fd, self.stderr_fd):
            assert fd is not None
            os.set_blocking(fd, False)
        self._queue: deque[bytes] = deque()
        self._queued = 0
        self.eof = False
        self.stderr_tail = b""

    # ------------------------------------------------------------ output

    def read(self) -> bytes:
        """Read stdout; b"" when nothing is ready, sets ``eof`` at its end."""
        if self.eof:
            return b""
        try:
            data = os.read(self.fd, READ_CHUNK)
        except BlockingIOError:
            return b""
        except OSError:
            self.eof = True
            return b""
        if not data:
            self.eof = True
        return data

    def read_stderr(self) -> bytes:
        """Read stderr (keeping its newest ``STDERR_TAIL_BYTES``); closes it at its end."""
        fd = self.stderr_fd
        if fd is None:
            return b""
        try:
            data = os.read(fd, READ_CHUNK)
        except BlockingIOError:
            return b""
        except OSError:
            data = b""
        if not data:
            os.close(fd)
            self.stderr_fd = None
            return b""
        self.stderr_tail = (self.stderr_tail + data)[-STDERR_TAIL_BYTES:]
        return data

    # ------------------------------------------------------------ input

    def queue_input(self, data: bytes) -> None:
        """Queue bytes for stdin; raises InputOverflow past ``MAX_QUEUED_INPUT``."""
        if self.stdin_fd is None:
            return
        if self._queued + len(data) > MAX_QUEUED_INPUT:
            raise InputOverflow(errno.ENOBUFS, "the agent stopped reading its input")
        self._queue.append(data)
        self._queued += len(data)

    @property
    def wants_write(self) -> bool:
        """True while queued input waits for the pipe."""
        return bool(self._queue)

    def flush(self) -> None:
        """Write as much queued input as the pipe takes now."""
        while self._queue and self.stdin_fd is not None:
            head = self._queue[0]
            try:
                written = os.write(self.stdin_fd, head)
            except BlockingIOError:
                return
            except OSError:
                # The program closed its stdin or is gone: nobody reads the rest.
                self._drop_input()
                return
            self._queued -= written
            if written < len(head):
                self._queue[0] = head[written:]
                return
            self._queue.popleft()

    def _drop_input(self) -> None:
        self._queue.clear()
        self._queued = 0
        if self.stdin_fd is not None:
            os.close(self.stdin_fd)
            self.stdin_fd = None

    # ------------------------------------------------------------ end

    def resize(self, cols: int, rows: int) -> None:
        """A pipe has no window size: only the pane's screen is resized."""

    def mark_reaped(self, exit_code: int | None = None) -> None:
        """The worker's reaper reaped the pid: ``subprocess`` must never wait on it."""
        self._proc.returncode = 0 if exit_code is None else exit_code

    def close(self) -> None:
        """Close our pipe ends (idempotent); queued input is dropped."""
        self._drop_input()
        if self.stderr_fd is not None:
            os.close(self.stderr_fd)
            self.stderr_fd = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.eof = True
        if self._proc.returncode is None:
            # Reaped by the worker (or it will be): keep Popen from tracking the pid.
            self._proc.returncode = -1
