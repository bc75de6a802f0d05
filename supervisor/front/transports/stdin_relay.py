"""A relay between the client's stdin and the SDK's stdio transport, so a stop can end it.

The SDK reads stdin on a worker thread; that read cannot be cancelled, so a service
told to stop (SIGINT, SIGTERM) while the client keeps stdin open would never get past
it. Claude Code stops a stdio server with SIGINT, SIGTERM 0.1 s later and SIGKILL 0.4 s
after that, with stdin open: panes must be closing by then.

The relay puts a pipe in fd 0 before the SDK claims it and copies the real stdin into
the pipe from the event loop (non-blocking, both ways). ``end()`` closes the pipe's
write end: the SDK reads EOF, its session ends normally, and the service stops in
order. Real EOF on stdin ends it the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os

CHUNK = 65536
# Input read from the client but not yet taken by the SDK: reading pauses beyond this.
MAX_PENDING = 1 << 20


class StdinRelay:
    """Copies fd 0 (as it was) into a pipe that becomes fd 0; see the module docstring."""

    def __init__(self) -> None:
        self._source = -1
        self._sink = -1
        self._pending = bytearray()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reading = False
        self._writing = False
        self._source_eof = False

    def install(self) -> None:
        """Swap fd 0 for the pipe and start copying; call from the running loop.

        A stdin that cannot be polled (a regular file, /dev/null) never blocks a read:
        it is left in place and the relay does nothing.
        """
        self._loop = asyncio.get_running_loop()
        self._source = os.dup(0)
        try:
            self._loop.add_reader(self._source, lambda: None)
        except PermissionError:
            os.close(self._source)
            self._source = -1
            return
        self._loop.remove_reader(self._source)
        read_end, self._sink = os.pipe()
        os.dup2(read_end, 0)
        os.close(read_end)
        os.set_blocking(self._source, False)
        os.set_blocking(self._sink, False)
        os.set_inheritable(self._source, False)
        os.set_inheritable(self._sink, False)
        self._resume_reading()

    def end(self) -> None:
        """Give the SDK EOF now (idempotent); what was not relayed yet is dropped."""
        if self._sink < 0:
            return
        self._pause_reading()
        self._pause_writing()
        os.close(self._sink)
        self._sink = -1
        with contextlib.suppress(OSError):
            os.close(self._source)
        self._source = -1
        self._pending.clear()

    # ------------------------------------------------------------ copying

    def _on_readable(self) -> None:
        try:
            data = os.read(self._source, CHUNK)
        except BlockingIOError:
            return
        except OSError as exc:
            if exc.errno != errno.EIO:
                raise
            data = b""
        if not data:
            self._source_eof = True
            self._pause_reading()
            if not self._pending:
                self.end()
            return
        self._pending += data
        if len(self._pending) >= MAX_PENDING:
            self._pause_reading()
        self._on_writable()

    def _on_writable(self) -> None:
        while self._pending and self._sink >= 0:
            try:
                written = os.write(self._sink, self._pending)
            except BlockingIOError:
                self._resume_writing()
                return
            except BrokenPipeError:
                # The SDK closed its end: nobody will read what the client sends.
                self.end()
                return
            del self._pending[:written]
        self._pause_writing()
        if self._source_eof:
            self.end()
        elif len(self._pending) < MAX_PENDING:
            self._resume_reading()

    def _resume_reading(self) -> None:
        if not self._reading and self._loop is not None and self._source >= 0:
            self._loop.add_reader(self._source, self._on_readable)
            self._reading = True

    def _pause_reading(self) -> None:
        if self._reading and self._loop is not None:
            self._loop.remove_reader(self._source)
            self._reading = False

    def _resume_writing(self) -> None:
        if not self._writing and self._loop is not None and self._sink >= 0:
            self._loop.add_writer(self._sink, self._on_writable)
            self._writing = True

    def _pause_writing(self) -> None:
        if self._writing and self._loop is not None:
            self._loop.remove_writer(self._sink)
            self._writing = False
