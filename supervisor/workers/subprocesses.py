"""Short-lived helper processes of the supervisor (git, bwrap), safe under its subreaper.

The supervisor is a child subreaper whose leftover sweep SIGKILLs every child that is
not managed and reaps non-managed zombies. A helper is therefore registered here before
the event loop can run a sweep — it is forked synchronously in the loop thread and its
pid recorded before any await — and stays registered until its exit status has been
collected from its pidfd: a sweep never kills it nor steals its exit code.

Each helper runs in its own session (``start_new_session``), with stdin from
``/dev/null`` or, given ``stdin_data``, a pipe holding just those bytes (at most
``STDIN_LIMIT``, written whole before the fork, so no write can block).
Its stdout and stderr are read without blocking the loop: every byte goes
into a streamed SHA-256, and only the first ``output_limit`` bytes are kept. On timeout
(or when the caller is cancelled) the whole process group is SIGKILLed, only while the
leader is still unreaped, so the group id cannot name anybody else. Output still held
open by a stray descendant after the leader exits is read for ``EOF_GRACE_S`` more, then
dropped (the descendant re-parents to the supervisor, whose sweep kills it).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Protocol

from protocol.errors import ErrorCode, PanewardenError

log = logging.getLogger(__name__)

DEFAULT_OUTPUT_LIMIT = 64 * 1024
# After the leader exits, how long its pipes may stay open (a descendant holding them).
EOF_GRACE_S = 2.0
# After a SIGKILL, how long the leader may take to be reported dead.
KILL_WAIT_S = 5.0
READ_CHUNK = 65536
# What fits a pipe's buffer whatever the kernel's setting: written before the fork.
STDIN_LIMIT = 4096


@dataclass(frozen=True)
class ChildResult:
    """How a helper ended: exit status, kept output, digests of all of it."""

    # The exit status; negative when a signal ended it (as ``Popen.returncode``).
    returncode: int
    timed_out: bool
    duration_s: float
    stdout: bytes
    stderr: bytes
    stdout_sha256: str
    stderr_sha256: str
    stdout_size: int
    stderr_size: int

    @property
    def truncated(self) -> bool:
        """True when stdout was longer than what was kept."""
        return self.stdout_size > len(self.stdout)


class ChildRunner(Protocol):
    """What runs a helper: ``ManagedChildren.run``, or a test's stand-in for it."""

    async def __call__(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        timeout_s: float,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
    ) -> ChildResult: ...


@dataclass
class _Stream:
    """One output pipe: a streamed digest, the first ``limit`` bytes, end of file."""

    fd: int
    limit: int
    eof: asyncio.Event
    digest: hashlib._Hash = field(default_factory=hashlib.sha256)
    kept: bytearray = field(default_factory=bytearray)
    size: int = 0


@dataclass
class _Child:
    proc: subprocess.Popen[bytes]
    pidfd: int
    exited: asyncio.Event
    streams: list[_Stream]
    reaped: bool = False


class ManagedChildren:
    """The helpers running now; ``pids()`` joins the workers in the sweep's keep-list."""

    def __init__(self) -> None:
        self._running: dict[int, _Child] = {}

    def pids(self) -> set[int]:
        """Pids the leftover sweep must leave alone (running or not yet reaped)."""
        return set(self._running)

    async def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        timeout_s: float,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        stdin_data: bytes | None = None,
    ) -> ChildResult:
        """Run ``argv`` to its end (or ``timeout_s``); see the module docstring.

        Raises:
            PanewardenError: ``spawn_failed`` when the program cannot be started.
        """
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        child = self._spawn(loop, argv, cwd, env, output_limit, stdin_data)
        timed_out = False
        try:
            try:
                async with asyncio.timeout(timeout_s):
                    await child.exited.wait()
            except TimeoutError:
                timed_out = True
                self._kill_group(child)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(child.exited.wait(), KILL_WAIT_S)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    asyncio.gather(*(s.eof.wait() for s in child.streams)), EOF_GRACE_S
                )
        except BaseException:
            # Cancelled: nothing may outlive the call. The exit callback still reaps it.
            self._kill_group(child)
            raise
        finally:
            for stream in child.streams:
                self._close_stream(loop, stream)
        out, err = child.streams
        return ChildResult(
            returncode=child.proc.returncode if child.reaped else -signal.SIGKILL,
            timed_out=timed_out,
            duration_s=time.monotonic() - started,
            stdout=bytes(out.kept),
            stderr=bytes(err.kept),
            stdout_sha256=out.digest.hexdigest(),
            stderr_sha256=err.digest.hexdigest(),
            stdout_size=out.size,
            stderr_size=err.size,
        )

    async def close(self) -> None:
        """Kill every helper still running and wait (bounded) for each to be reaped."""
        children = list(self._running.values())
        for child in children:
            self._kill_group(child)
        if children:
            await asyncio.wait(
                [asyncio.ensure_future(c.exited.wait()) for c in children], timeout=KILL_WAIT_S
            )

    # ------------------------------------------------------------ internals

    def _spawn(
        self,
        loop: asyncio.AbstractEventLoop,
        argv: Sequence[str],
        cwd: str,
        env: Mapping[str, str],
        output_limit: int,
        stdin_data: bytes | None = None,
    ) -> _Child:
        """Fork and register, with no await in between: a sweep never sees it unmanaged."""
        stdin: int = subprocess.DEVNULL
        if stdin_data is not None:
            if len(stdin_data) > STDIN_LIMIT:
                raise ValueError(f"stdin_data is over {STDIN_LIMIT} bytes")
            stdin, writer = os.pipe2(os.O_CLOEXEC)
            try:
                os.write(writer, stdin_data)
            except BaseException:
                os.close(stdin)
                raise
            finally:
                os.close(writer)
        try:
            proc = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=dict(env),
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            raise PanewardenError(
                ErrorCode.SPAWN_FAILED, f"cannot run {argv[0]!r}: {exc.strerror or exc}"
            ) from None
        finally:
            if stdin_data is not None:
                os.close(stdin)  # the child has its own copy
        child = _Child(
            proc,
            pidfd=os.pidfd_open(proc.pid),
            exited=asyncio.Event(),
            streams=[self._watch(loop, pipe, output_limit) for pipe in (proc.stdout, proc.stderr)],
        )
        self._running[proc.pid] = child
        loop.add_reader(child.pidfd, self._on_exit, child)
        return child

    def _watch(
        self, loop: asyncio.AbstractEventLoop, pipe: IO[bytes] | None, limit: int
    ) -> _Stream:
        assert pipe is not None
        # Our own descriptor, so closing it never depends on the Popen's file object.
        fd = os.dup(pipe.fileno())
        pipe.close()
        os.set_blocking(fd, False)
        stream = _Stream(fd=fd, limit=limit, eof=asyncio.Event())
        loop.add_reader(fd, self._on_readable, stream)
        return stream

    def _on_readable(self, stream: _Stream) -> None:
        try:
            data = os.read(stream.fd, READ_CHUNK)
        except BlockingIOError:
            return
        except OSError as exc:
            if exc.errno != errno.EIO:
                log.warning("reading a helper's output failed: %s", exc)
            data = b""
        if not data:
            stream.eof.set()
            asyncio.get_running_loop().remove_reader(stream.fd)
            return
        stream.digest.update(data)
        stream.size += len(data)
        room = stream.limit - len(stream.kept)
        if room > 0:
            stream.kept += data[:room]

    def _close_stream(self, loop: asyncio.AbstractEventLoop, stream: _Stream) -> None:
        if stream.fd < 0:
            return
        loop.remove_reader(stream.fd)
        os.close(stream.fd)
        stream.fd = -1
        stream.eof.set()

    def _on_exit(self, child: _Child) -> None:
        # The pidfd is readable: the process has exited, so this wait returns at once.
        asyncio.get_running_loop().remove_reader(child.pidfd)
        child.proc.wait(timeout=KILL_WAIT_S)
        child.reaped = True
        os.close(child.pidfd)
        self._running.pop(child.proc.pid, None)
        child.exited.set()

    def _kill_group(self, child: _Child) -> None:
        if child.reaped:
            return  # its group id may name someone else by now
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(child.pidfd, signal.SIGKILL)
