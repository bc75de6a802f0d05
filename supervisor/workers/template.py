"""The worker template, seen from the supervisor: start it, prove it, fork through it.

One template per state dir (``python -m paneworker.template``) forks a worker per pane in a few
milliseconds, and is the subreaper of the workers it forked: what a dead worker's pane
leaves re-parents to it and is killed there, even after a supervisor restart, when the
workers are no longer the supervisor's descendants.

The manager starts the template as its child, with a secret on an inherited pipe (only
the hash is kept, in ``$STATE/template/template.json`` with its pid, start time, socket
and build) and a connected socket pair. A restarted supervisor re-adopts the template
of its state dir from that record: pidfd first, then the start time, then
``SO_PEERCRED`` on a connection to the recorded socket, then the proof in
``TemplateHello``. A process that does not prove itself is never signalled. A template
of another build is retired (it forks no more and exits once its workers are gone) and
a new one started. A dead template is restarted (with a growing pause after quick
deaths); its workers re-parent to the supervisor, as cold-started workers are. Whenever
no template can fork (disabled, starting too long, dead, hung), the caller starts the
worker cold: ``fork`` raises ``TemplateUnavailable``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import itertools
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from protocol.template import (
    MAX_SPARE_SCREENS,
    TEMPLATE_PROTOCOL_VERSION,
    Closed,
    Fork,
    Forked,
    ForkFailed,
    PacketError,
    Retire,
    SpareScreen,
    TemplateBoot,
    TemplateHello,
    decode_from_template,
    encode_boot,
    peer_pid,
    receive_packet,
    send_packet,
)
from supervisor.procfs import process_start_ticks
from supervisor.store.records import RecordStore
from supervisor.workers.worker_env import template_build, worker_env

log = logging.getLogger(__name__)

RECORD_VERSION = 1
RECORD_KEY = "template"
# A new template imports the worker code: bounded, generously for a loaded machine.
START_TIMEOUT_S = 20.0
# A pane start waits this long for a template that is starting, then starts cold.
WAIT_FOR_START_S = 5.0
# A template with a fork pending that answers no fork for this long is hung. Forks are
# answered in order, so under a storm of starts (1,000 at once) the last waits far
# longer than this while the template keeps answering: progress, not a hang.
FORK_TIMEOUT_S = 5.0
# However busy the template, one start waits at most this long for its fork.
MAX_FORK_WAIT_S = 120.0
# Fork requests sent and not yet answered, at most: the rest wait in the supervisor.
# Their packets (each with a descriptor) would otherwise fill the socket's queue
# (EAGAIN) under a storm of starts, and each would start its worker cold.
MAX_FORKS_IN_FLIGHT = 8
PROOF_TIMEOUT_S = 2.0
STOP_TIMEOUT_S = 5.0
# A template that dies sooner than this after its start counts as a failed start.
STABLE_AFTER_S = 60.0
MAX_BACKOFF_S = 30.0


class TemplateUnavailable(Exception):
    """No template can fork now; the reason is in the message (for the log line)."""


class TemplateRecord(msgspec.Struct, forbid_unknown_fields=True):
    """What a restarted supervisor needs to re-adopt the template."""

    version: int
    name: str
    pid: int
    start_ticks: int
    secret_sha256: str
    socket_path: str
    build: str
    started_at: float


@dataclass(frozen=True)
class ForkedWorker:
    """A worker the template forked: its pid, a pidfd of it, its start time."""

    pid: int
    pidfd: int
    start_ticks: int


@dataclass
class TemplateHandle:
    """One template process and the supervisor's connection to it."""

    pid: int
    start_ticks: int
    secret_hash: bytes
    socket_path: str
    sock: socket.socket | None
    pidfd: int
    proc: subprocess.Popen[bytes] | None
    hello: asyncio.Future[TemplateHello]
    started: float = field(default_factory=time.monotonic)
    pending: dict[int, asyncio.Future[tuple[Forked, int]]] = field(default_factory=dict)
    # When it last answered a fork (forked or failed): its progress through the queue.
    answered_at: float = 0.0
    proven: bool = False
    # Asked to stop (retired, replaced or the service stopping): its death is expected.
    retired: bool = False
    dead: bool = False
    died: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def usable(self) -> bool:
        return self.proven and not self.dead and self.sock is not None


def backoff_s(failures: int) -> float:
    """Pause before the next start after ``failures`` failed starts in a row."""
    if failures <= 1:
        return 0.0
    return float(min(MAX_BACKOFF_S, 0.5 * 2 ** (failures - 2)))


class TemplateManager:
    """Owns the template processes of one supervisor; see the module docstring."""

    def __init__(
        self,
        state_dir: Path,
        runtime_dir: Path,
        environ: Mapping[str, str],
        *,
        enabled: bool = True,
        orphan_after_s: float,
        orphan_grace_s: float,
        preload: list[str] | None = None,
        spares: list[SpareScreen] | None = None,
    ) -> None:
        self.enabled = enabled
        self._runtime_dir = runtime_dir
        self._env = worker_env(environ)
        self.build = template_build(self._env)
        self._orphan_after_s = orphan_after_s
        self._orphan_grace_s = orphan_grace_s
        self._preload = list(preload or [])
        self._spares = list(spares or [])[:MAX_SPARE_SCREENS]
        self._records = RecordStore(state_dir / "template", TemplateRecord, RECORD_VERSION, "name")
        self._handles: list[TemplateHandle] = []
        self.active: TemplateHandle | None = None
        self._starting: asyncio.Task[None] | None = None
        self._failures = 0
        self._retry_at = 0.0
        self._rids = itertools.count(1)
        self._fork_slots = asyncio.Semaphore(MAX_FORKS_IN_FLIGHT)
        self._stopping = False

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Re-adopt the previous supervisor's template, or start one in the background."""
        if not self.enabled:
            return
        if await self._adopt_recorded() is None:
            self._start_soon()

    def pids(self) -> set[int]:
        """Live template processes: never leftovers to the supervisor's sweep."""
        return {h.pid for h in self._handles if not h.dead}

    async def stop(self, keep: bool) -> None:
        """Stop starting templates. ``keep``: leave the template running for the next
        supervisor (it waits out the orphan periods); else retire it and wait (bounded)."""
        self._stopping = True
        if self._starting is not None:
            self._starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._starting
        self.active = None
        for handle in self._handles:
            handle.retired = True
        if keep:
            for handle in list(self._handles):
                self._release(handle)
            return
        for handle in list(self._handles):
            self._send(handle, Retire())
        waits = [h.died.wait() for h in self._handles if not h.dead]
        if waits:
            _done, pending = await asyncio.wait(
                [asyncio.ensure_future(w) for w in waits], timeout=STOP_TIMEOUT_S
            )
            for task in pending:
                task.cancel()
        for handle in list(self._handles):
            if not handle.dead and handle.proc is not None and handle.proven:
                log.warning("the worker template did not retire; killing it")
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(handle.pidfd, signal.SIGKILL)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(handle.died.wait(), STOP_TIMEOUT_S)
            self._release(handle)
        self._records.delete(RECORD_KEY)

    # ------------------------------------------------------------ forking

    async def fork(self, boot: bytes) -> ForkedWorker:
        """Fork a worker that reads ``boot`` from its boot pipe.

        Raises:
            TemplateUnavailable: no template could fork it (start the worker cold).
        """
        answered_by = time.monotonic() + MAX_FORK_WAIT_S
        try:
            async with asyncio.timeout(MAX_FORK_WAIT_S):
                await self._fork_slots.acquire()
        except TimeoutError:
            raise TemplateUnavailable(f"no fork slot in {MAX_FORK_WAIT_S:.0f}s") from None
        try:
            return await self._fork_in_slot(boot, answered_by)
        finally:
            self._fork_slots.release()

    async def _fork_in_slot(self, boot: bytes, answered_by: float) -> ForkedWorker:
        handle = await self._ready()
        assert handle.sock is not None
        read_fd, write_fd = os.pipe()
        try:
            # Smaller than a pipe's buffer (the caller checks): this write cannot block.
            os.write(write_fd, boot)
        finally:
            os.close(write_fd)
        rid = next(self._rids)
        future: asyncio.Future[tuple[Forked, int]] = asyncio.get_running_loop().create_future()
        handle.pending[rid] = future
        try:
            try:
                send_packet(handle.sock, Fork(rid=rid), (read_fd, 2))
            except OSError as exc:
                raise TemplateUnavailable(f"cannot reach the template: {exc}") from exc
            finally:
                os.close(read_fd)
            forked, pidfd = await self._answer(handle, future, answered_by)
        except BaseException:
            _kill_late(future)
            raise
        finally:
            handle.pending.pop(rid, None)
        named = _pidfd_pid(pidfd)
        if (named is not None and named != forked.pid) or process_start_ticks(
            forked.pid
        ) != forked.start_ticks:
            _kill_and_close(pidfd)
            raise TemplateUnavailable("the forked worker is not the process reported")
        self._failures = 0
        return ForkedWorker(pid=forked.pid, pidfd=pidfd, start_ticks=forked.start_ticks)

    async def _answer(
        self,
        handle: TemplateHandle,
        future: asyncio.Future[tuple[Forked, int]],
        answered_by: float,
    ) -> tuple[Forked, int]:
        """Wait for the template's answer to one fork, for as long as it makes progress.

        The template is replaced only when it answered nothing, neither this fork nor
        any other, for ``FORK_TIMEOUT_S`` since this one was sent; the wait ends at
        ``answered_by`` whatever the template does.
        """
        sent = time.monotonic()
        while True:
            now = time.monotonic()
            if now >= answered_by:
                raise TemplateUnavailable(f"no fork answer in {MAX_FORK_WAIT_S:.0f}s")
            quiet_since = max(sent, handle.answered_at)
            left = min(quiet_since + FORK_TIMEOUT_S, answered_by) - now
            if quiet_since + FORK_TIMEOUT_S <= now:
                log.error(
                    "the worker template answered no fork in %.0fs; replacing it", FORK_TIMEOUT_S
                )
                self._retire(handle)
                raise TemplateUnavailable("the template did not answer")
            try:
                return await asyncio.wait_for(asyncio.shield(future), left)
            except TimeoutError:
                continue

    async def _ready(self) -> TemplateHandle:
        if not self.enabled:
            raise TemplateUnavailable("disabled")
        if self.active is not None and self.active.usable:
            return self.active
        self._start_soon()
        starting = self._starting
        if starting is None or self._retry_at > time.monotonic():
            raise TemplateUnavailable("restarting after a failure")
        try:
            await asyncio.wait_for(asyncio.shield(starting), WAIT_FOR_START_S)
        except TimeoutError:
            raise TemplateUnavailable("still starting") from None
        if self.active is None or not self.active.usable:
            raise TemplateUnavailable("it did not start")
        return self.active

    # ------------------------------------------------------------ starting

    def _start_soon(self) -> None:
        if self._stopping or self._starting is not None:
            return
        if self.active is not None and self.active.usable:
            return
        delay = max(0.0, self._retry_at - time.monotonic())
        loop = asyncio.get_running_loop()
        self._starting = loop.create_task(self._start_after(delay), name="template-start")

    async def _start_after(self, delay_s: float) -> None:
        try:
            if delay_s:
                await asyncio.sleep(delay_s)
            handle = await self._spawn()
        except (OSError, TemplateUnavailable) as exc:
            self._starting = None
            self._failed_start()
            log.warning(
                "the worker template did not start (%s); panes start cold until it does "
                "(next try in %.1fs)",
                exc,
                max(0.0, self._retry_at - time.monotonic()),
            )
            # A crash loop backs off, but comes back by itself: the next pane should
            # not have to ask (and start cold) before a template is tried again.
            self._start_soon()
            return
        finally:
            if self._starting is asyncio.current_task():
                self._starting = None
        self.active = handle
        self._save_record(handle)
        log.info("worker template ready", extra={"pid": handle.pid})

    def _failed_start(self) -> None:
        self._failures += 1
        self._retry_at = time.monotonic() + backoff_s(self._failures)

    async def _spawn(self) -> TemplateHandle:
        secret = secrets.token_bytes(32)
        path = self._runtime_dir / f"template-{secrets.token_hex(4)}.sock"
        boot = TemplateBoot(
            protocol_version=TEMPLATE_PROTOCOL_VERSION,
            secret=secret,
            socket_path=str(path),
            build=self.build,
            orphan_after_s=self._orphan_after_s,
            orphan_grace_s=self._orphan_grace_s,
            preload=self._preload,
            spares=self._spares,
        )
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        read_fd, write_fd = os.pipe()
        try:
            proc = self._launch(read_fd, theirs.fileno())
        except OSError:
            ours.close()
            os.close(write_fd)
            raise
        finally:
            os.close(read_fd)
            theirs.close()
        # Tracked before any await: the leftover sweep must never take it for one.
        handle = TemplateHandle(
            pid=proc.pid,
            # Our unreaped child: its pid cannot have been reused yet.
            start_ticks=process_start_ticks(proc.pid) or 0,
            secret_hash=hashlib.sha256(secret).digest(),
            socket_path=str(path),
            sock=ours,
            pidfd=os.pidfd_open(proc.pid),
            proc=proc,
            hello=asyncio.get_running_loop().create_future(),
        )
        self._track(handle)
        try:
            os.write(write_fd, encode_boot(boot))
        finally:
            os.close(write_fd)
        try:
            await asyncio.wait_for(asyncio.shield(handle.hello), START_TIMEOUT_S)
        except (TimeoutError, TemplateUnavailable) as exc:
            # Our own child with no workers yet: killing it harms nothing.
            handle.retired = True
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(handle.pidfd, signal.SIGKILL)
            self._release(handle, keep_watching_death=True)
            raise TemplateUnavailable(str(exc) or "no hello in time") from None
        return handle

    def _launch(self, boot_fd: int, conn_fd: int) -> subprocess.Popen[bytes]:
        """Start ``python -m paneworker.template`` with the boot pipe and its connection."""
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "paneworker.template",
                "--boot-fd",
                str(boot_fd),
                "--conn-fd",
                str(conn_fd),
            ],
            pass_fds=(boot_fd, conn_fd),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,  # stdout may be the MCP channel
            env=self._env,
            cwd="/",
            start_new_session=True,
        )

    # ------------------------------------------------------------ re-adoption

    async def _adopt_recorded(self) -> TemplateHandle | None:
        record = self._records.load(RECORD_KEY)
        if record is None:
            return None
        handle = self._connect_recorded(record)
        if handle is None:
            self._records.delete(RECORD_KEY)
            return None
        self._track(handle)
        try:
            hello = await asyncio.wait_for(asyncio.shield(handle.hello), PROOF_TIMEOUT_S)
        except (TimeoutError, TemplateUnavailable) as exc:
            log.error(
                "pid %d named by the template record never proved it is our template (%s); "
                "left alone",
                record.pid,
                exc or "no hello",
            )
            self._release(handle)
            self._records.delete(RECORD_KEY)
            return None
        if hello.build != self.build:
            log.info("the worker template is of another build; retiring it for a new one")
            self._retire(handle)
            return None
        self.active = handle
        log.info("worker template re-adopted", extra={"pid": handle.pid})
        return handle

    def _connect_recorded(self, record: TemplateRecord) -> TemplateHandle | None:
        """Open the recorded process (pidfd, then start time) and connect to its socket."""
        try:
            pidfd = os.pidfd_open(record.pid)
        except ProcessLookupError:
            _unlink_socket(record.socket_path)
            return None
        if process_start_ticks(record.pid) != record.start_ticks:
            os.close(pidfd)
            return None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sock.setblocking(False)
        try:
            sock.connect(record.socket_path)
            peer = peer_pid(sock)
        except OSError as exc:
            log.warning("the recorded worker template does not answer (%s); left alone", exc)
            sock.close()
            os.close(pidfd)
            return None
        if peer != record.pid:
            log.error("the template socket belongs to pid %d, not %d; left alone", peer, record.pid)
            sock.close()
            os.close(pidfd)
            return None
        return TemplateHandle(
            pid=record.pid,
            start_ticks=record.start_ticks,
            secret_hash=bytes.fromhex(record.secret_sha256),
            socket_path=record.socket_path,
            sock=sock,
            pidfd=pidfd,
            proc=None,
            hello=asyncio.get_running_loop().create_future(),
        )

    def _save_record(self, handle: TemplateHandle) -> None:
        self._records.save(
            RECORD_KEY,
            TemplateRecord(
                version=RECORD_VERSION,
                name=RECORD_KEY,
                pid=handle.pid,
                start_ticks=handle.start_ticks,
                secret_sha256=handle.secret_hash.hex(),
                socket_path=handle.socket_path,
                build=self.build,
                started_at=time.time(),
            ),
        )

    # ------------------------------------------------------------ events

    def _track(self, handle: TemplateHandle) -> None:
        self._handles.append(handle)
        loop = asyncio.get_running_loop()
        loop.add_reader(handle.pidfd, self._on_death, handle)
        if handle.sock is not None:
            handle.sock.setblocking(False)
            loop.add_reader(handle.sock.fileno(), self._on_readable, handle)

    def _on_readable(self, handle: TemplateHandle) -> None:
        while handle.sock is not None:
            try:
                got = receive_packet(handle.sock)
            except Closed:
                self._on_disconnect(handle)
                return
            if got is None:
                return
            data, fds = got
            try:
                msg = decode_from_template(data)
            except PacketError as exc:
                log.warning("dropped a malformed packet from the worker template: %s", exc)
                _close_all(fds)
                continue
            if isinstance(msg, Forked):
                self._on_forked(handle, msg, fds)
                continue
            _close_all(fds)
            if isinstance(msg, TemplateHello):
                self._on_hello(handle, msg)
            elif isinstance(msg, ForkFailed):
                handle.answered_at = time.monotonic()
                future = handle.pending.get(msg.rid)
                if future is not None and not future.done():
                    future.set_exception(TemplateUnavailable(msg.message[:200]))

    def _on_hello(self, handle: TemplateHandle, hello: TemplateHello) -> None:
        proof_ok = hmac.compare_digest(hashlib.sha256(hello.proof).digest(), handle.secret_hash)
        if hello.protocol_version != TEMPLATE_PROTOCOL_VERSION or not proof_ok:
            problem = f"refused its hello (protocol {hello.protocol_version}, proof "
            problem += "ok)" if proof_ok else "bad)"
        elif hello.pid != handle.pid:
            problem = f"refused its hello: pid {hello.pid}, not {handle.pid}"
        else:
            handle.proven = True
            if not handle.hello.done():
                handle.hello.set_result(hello)
            return
        log.error("worker template %s", problem, extra={"pid": handle.pid})
        if not handle.hello.done():
            handle.hello.set_exception(TemplateUnavailable(problem))
            handle.hello.exception()  # retrieved: the waiter may have timed out already

    def _on_forked(self, handle: TemplateHandle, msg: Forked, fds: list[int]) -> None:
        handle.answered_at = time.monotonic()
        future = handle.pending.get(msg.rid)
        if len(fds) != 1:
            _close_all(fds)
            if future is not None and not future.done():
                future.set_exception(TemplateUnavailable("a fork answer without its pidfd"))
            return
        if future is None or future.done():
            # Asked for by a start that gave up: nobody will ever know this worker.
            log.warning("killing a worker forked too late", extra={"worker_pid": msg.pid})
            _kill_and_close(fds[0])
            return
        future.set_result((msg, fds[0]))

    def _on_disconnect(self, handle: TemplateHandle) -> None:
        self._close_connection(handle)
        if handle is self.active:
            # Dying (its pidfd tells soon), or it dropped us: either way, no more forks.
            self.active = None
            log.info("lost the connection to the worker template", extra={"pid": handle.pid})
            self._start_soon()

    def _on_death(self, handle: TemplateHandle) -> None:
        asyncio.get_running_loop().remove_reader(handle.pidfd)
        handle.dead = True
        if handle.proc is not None:
            # The pidfd is readable: our child has exited, so this wait is immediate.
            handle.proc.wait(timeout=5)
        handle.died.set()
        self._release(handle)
        _unlink_socket(handle.socket_path)
        if handle is self.active:
            self.active = None
            self._records.delete(RECORD_KEY)
        if handle.retired or self._stopping or not handle.proven:
            # Not proven: it died starting, and the start that waits for it counts the
            # failure and tries again (counting it here too doubled the back-off).
            return
        if time.monotonic() - handle.started < STABLE_AFTER_S:
            self._failed_start()
        else:
            self._failures = 1
            self._retry_at = time.monotonic()
        log.warning("the worker template died; restarting it", extra={"pid": handle.pid})
        self._start_soon()

    # ------------------------------------------------------------ helpers

    def _send(self, handle: TemplateHandle, msg: Fork | Retire) -> bool:
        if handle.sock is None:
            return False
        try:
            send_packet(handle.sock, msg)
        except OSError:
            return False
        return True

    def _retire(self, handle: TemplateHandle) -> None:
        """No more forks from ``handle``; it exits by itself once its workers are gone."""
        handle.retired = True
        if handle.proven:
            self._send(handle, Retire())
        if handle is self.active:
            self.active = None
        self._close_connection(handle)
        if handle.proc is None:
            # Not our child: nothing of it is ours to reap, and nothing more to say.
            self._release(handle)
        self._start_soon()

    def _close_connection(self, handle: TemplateHandle) -> None:
        sock, handle.sock = handle.sock, None
        if sock is not None:
            with contextlib.suppress(ValueError, RuntimeError):
                asyncio.get_running_loop().remove_reader(sock.fileno())
            sock.close()
        for future in handle.pending.values():
            if not future.done():
                future.set_exception(TemplateUnavailable("the connection closed"))
        if not handle.hello.done():
            handle.hello.set_exception(TemplateUnavailable("the connection closed"))
            handle.hello.exception()

    def _release(self, handle: TemplateHandle, keep_watching_death: bool = False) -> None:
        """Stop tracking ``handle`` (unless its death must still be reaped)."""
        self._close_connection(handle)
        if keep_watching_death and not handle.dead:
            return
        if handle in self._handles:
            self._handles.remove(handle)
        if handle.pidfd >= 0:
            if not handle.dead:
                with contextlib.suppress(ValueError, RuntimeError):
                    asyncio.get_running_loop().remove_reader(handle.pidfd)
            os.close(handle.pidfd)
            handle.pidfd = -1


def _pidfd_pid(pidfd: int) -> int | None:
    """The pid a pidfd refers to (``/proc/self/fdinfo``), None if unreadable."""
    try:
        text = Path(f"/proc/self/fdinfo/{pidfd}").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Pid:"):
            return int(line.split()[1])
    return None


def _kill_and_close(pidfd: int) -> None:
    with contextlib.suppress(OSError):
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    os.close(pidfd)


def _kill_late(future: asyncio.Future[tuple[Forked, int]]) -> None:
    """A fork that completed for a caller that gave up: the worker must not run."""
    if future.done() and not future.cancelled() and future.exception() is None:
        _forked, pidfd = future.result()
        _kill_and_close(pidfd)


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _unlink_socket(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
