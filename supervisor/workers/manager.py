"""The worker manager: spawn pane workers, talk to them, notice when they die.

The supervisor binds one ROUTER socket; every worker connects a DEALER whose
routing id is its pane instance id. A worker is forked from the worker template
(``template``) or, when no template can, started cold as ``python -m paneworker``.
Either way it is ready once it sent ``Hello`` with the right protocol version and the
proof of its secret (the secret reached it on a pipe; only its hash is kept here),
from the pid it was started as (``SO_PEERCRED``). Death is noticed through the
worker's pidfd (no polling) or, for a hung worker, heartbeat loss.
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
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import zmq
import zmq.asyncio

from protocol import PROTOCOL_VERSION
from protocol.boot import BootRecord, PaneLaunch, encode_boot
from protocol.errors import ErrorCode, PanewardenError
from protocol.framing import MAX_FRAME_BYTES, Codec, FrameError
from protocol.messages import (
    Closed,
    Failed,
    Heartbeat,
    Hello,
    Introduce,
    Ok,
    ScreenText,
    ToSupervisor,
    ToWorker,
)
from protocol.timing import DEFAULT_HEARTBEAT_LOSS_S, heartbeat_period, orphan_after
from supervisor.procfs import process_start_ticks
from supervisor.workers.template import TemplateManager, TemplateUnavailable
from supervisor.workers.worker_env import worker_env

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_S = 20.0
# How often a re-adopted worker is asked to introduce itself until it does.
INTRODUCE_RETRY_S = 0.05
MAX_INLINE_BOOT = 60_000  # stays below a pipe buffer, so the write cannot block
# Frames kept for a worker whose pid the template has not named yet (a Hello, a Status,
# its Descendants: a handful; more is a misbehaving peer).
MAX_EARLY_FRAMES = 64
# How long after a worker's death its requests may still get the replies it sent.
REPLIES_AFTER_DEATH_S = 0.2

Reply = Ok | Failed | ScreenText | Closed


@dataclass
class WorkerHandle:
    """One worker process and what the supervisor knows about it."""

    pane: str
    instance: str
    pid: int
    secret_hash: bytes
    proc: subprocess.Popen[bytes] | None
    pidfd: int
    ready: asyncio.Future[Hello]
    pending: dict[int, asyncio.Future[Reply]] = field(default_factory=dict)
    descendants: frozenset[tuple[int, int]] = frozenset()
    session_id: int | None = None
    last_rx: float = field(default_factory=time.monotonic)
    dead: bool = False
    died: asyncio.Event = field(default_factory=asyncio.Event)
    exit_code: int | None = None

    # Set when a Hello proved the secret (this supervisor's spawn, or a re-adoption).
    introduced: bool = False
    # The worker's start time (clock ticks since boot): with ``pid``, which process it is.
    start_ticks: int | None = None
    # True for a worker this supervisor started (cold, or forked by its proven template).
    spawned: bool = False
    # Frames that came before the template said which pid it forked (handled then), with
    # the sending pid of a Hello.
    early: list[tuple[ToSupervisor, int | None]] = field(default_factory=list)
    # A fork was asked of the template for this worker (whether or not it answered).
    forked_first: bool = False
    # A kill asked for before the process was known: done as soon as it is.
    kill_requested: bool = False

    @property
    def proven(self) -> bool:
        """True once this process is known to be our worker: we spawned it, or its Hello
        proved the secret. Only a proven worker is ever signalled."""
        return self.spawned or self.introduced


EventSink = Callable[[WorkerHandle, ToSupervisor], None]
DeathSink = Callable[[WorkerHandle], None]


class WorkerManager:
    """Owns the ROUTER socket and every ``WorkerHandle``."""

    def __init__(
        self,
        endpoint: str,
        on_event: EventSink,
        on_death: DeathSink,
        heartbeat_loss_s: float = DEFAULT_HEARTBEAT_LOSS_S,
        template: TemplateManager | None = None,
        on_forks_settled: Callable[[], None] | None = None,
    ) -> None:
        """``on_forks_settled`` runs when the last fork in flight got its answer (the
        leftover sweep spares unknown children meanwhile: one may be that worker)."""
        self.endpoint = endpoint
        self._forks_in_flight = 0
        self._on_forks_settled = on_forks_settled
        self._template = template
        self._heartbeat_loss_s = heartbeat_loss_s
        self.heartbeat_s = heartbeat_period(heartbeat_loss_s)
        self._on_event = on_event
        self._on_death = on_death
        self._ctx = zmq.asyncio.Context()
        self._sock: zmq.asyncio.Socket | None = None
        self._codec = Codec()
        self._rids = itertools.count(1)
        self.by_instance: dict[str, WorkerHandle] = {}
        self._tasks: list[asyncio.Task[None]] = []

    # ------------------------------------------------------------ lifecycle

    def bind(self) -> None:
        """Bind the ROUTER socket (under umask 077: the socket file takes the umask)."""
        sock = self._ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        # No ROUTER_HANDOVER: a second connection claiming a live worker's routing id
        # is ignored instead of taking the worker's place.
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES + 1024)
        old = os.umask(0o077)
        try:
            sock.bind(self.endpoint)
        finally:
            os.umask(old)
        self._sock = sock
        loop = asyncio.get_running_loop()
        loops = ((self._receive_loop(), "worker-rx"), (self._heartbeat_loop(), "worker-hb"))
        for coro, name in loops:
            task = loop.create_task(coro, name=name)
            task.add_done_callback(_stop_if_deaf)
            self._tasks.append(task)

    async def close(self) -> None:
        """Stop the loops and close the socket before the context."""
        for task in self._tasks:
            task.cancel()
        # A loop that died is how the service came to stop (its error was logged when
        # it died): the stop goes on, rather than re-raising it here halfway.
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for handle in list(self.by_instance.values()):
            self._forget(handle)
        if self._sock is not None:
            self._sock.close(linger=0)
            self._sock = None
        self._ctx.term()

    def managed_pids(self) -> set[int]:
        """Pids of live workers: the orphan reaper must leave these alone."""
        return {h.pid for h in self.by_instance.values() if not h.dead}

    # ------------------------------------------------------------ spawning

    def prepare(self, launch: PaneLaunch) -> tuple[WorkerHandle, bytes]:
        """A handle for a pane's worker about to be started, and its encoded boot record.

        Registered at once, before the process exists (its frames always find it);
        ``launch`` starts the process. Raises PanewardenError(spawn_failed) for a launch
        spec too large.
        """
        secret = secrets.token_bytes(32)
        instance = secrets.token_hex(8)
        boot = BootRecord(
            protocol_version=PROTOCOL_VERSION,
            instance=instance,
            secret=secret,
            endpoint=self.endpoint,
            launch=launch,
            heartbeat_s=self.heartbeat_s,
            orphan_after_s=orphan_after(self.heartbeat_s),
        )
        data = encode_boot(boot)
        if len(data) > MAX_INLINE_BOOT:
            raise PanewardenError(ErrorCode.SPAWN_FAILED, "launch spec too large")
        handle = WorkerHandle(
            pane=launch.pane,
            instance=instance,
            pid=0,
            secret_hash=hashlib.sha256(secret).digest(),
            proc=None,
            pidfd=-1,
            ready=asyncio.get_running_loop().create_future(),
            spawned=True,
        )
        self.by_instance[instance] = handle
        return handle, data

    async def launch(self, handle: WorkerHandle, boot: bytes, environ: dict[str, str]) -> None:
        """Start the worker of a prepared handle: forked from the template, else cold; the
        caller then awaits ``handle.ready``.

        Raises PanewardenError(spawn_failed) when the process cannot be started.
        """
        try:
            if not await self._fork(handle, boot):
                self._spawn_cold(handle, boot, environ)
        except BaseException:
            self._never_started(handle)
            raise
        asyncio.get_running_loop().add_reader(handle.pidfd, self._on_pidfd, handle)
        early, handle.early = handle.early, []
        for msg, peer_pid in early:
            self._dispatch(handle, msg, peer_pid)
        if handle.kill_requested:
            self.kill(handle)

    def _never_started(self, handle: WorkerHandle) -> None:
        """A prepared worker that will never run: whoever waits for it is told."""
        handle.dead = True
        handle.died.set()
        self.by_instance.pop(handle.instance, None)
        if not handle.ready.done():
            handle.ready.set_exception(
                PanewardenError(ErrorCode.SPAWN_FAILED, "the pane worker did not start")
            )
            handle.ready.exception()

    async def _fork(self, handle: WorkerHandle, boot: bytes) -> bool:
        """Fork the worker from the template; False when the template cannot (logged)."""
        template = self._template
        if template is None or not template.enabled:
            return False
        handle.forked_first = True
        self._forks_in_flight += 1
        try:
            forked = await template.fork(boot)
        except TemplateUnavailable as exc:
            log.warning(
                "worker template unavailable (%s); starting the worker cold",
                exc,
                extra={"pane": handle.pane},
            )
            return False
        else:
            handle.pid, handle.pidfd = forked.pid, forked.pidfd
            handle.start_ticks = forked.start_ticks
            return True
        finally:
            self._forks_in_flight -= 1
            if not self._forks_in_flight and self._on_forks_settled is not None:
                self._on_forks_settled()

    def forking(self) -> bool:
        """True while a fork's answer is awaited: a worker may exist whose pid is not
        known yet (its template may die before it tells, leaving it our child)."""
        return self._forks_in_flight > 0

    def _spawn_cold(self, handle: WorkerHandle, boot: bytes, environ: dict[str, str]) -> None:
        """Start the worker as a new interpreter (``python -m paneworker``)."""
        read_fd, write_fd = os.pipe()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "paneworker", "--boot-fd", str(read_fd)],
                pass_fds=(read_fd,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,  # stdout may be the MCP channel
                env=worker_env(environ),
                cwd="/",
                start_new_session=True,
            )
        except OSError as exc:
            os.close(write_fd)
            raise PanewardenError(ErrorCode.SPAWN_FAILED, f"cannot start a worker: {exc}") from exc
        finally:
            os.close(read_fd)
        # Set before any await, so the orphan reaper never mistakes it.
        handle.proc = proc
        handle.pid = proc.pid
        handle.pidfd = os.pidfd_open(proc.pid)
        # Our unreaped child: its pid cannot have been reused yet.
        handle.start_ticks = process_start_ticks(proc.pid)
        try:
            os.write(write_fd, boot)
        finally:
            os.close(write_fd)

    async def wait_ready(
        self, handle: WorkerHandle, timeout_s: float = HANDSHAKE_TIMEOUT_S
    ) -> Hello:
        """Wait for the worker's Hello; kill it and raise spawn_failed on timeout."""
        try:
            return await asyncio.wait_for(asyncio.shield(handle.ready), timeout_s)
        except TimeoutError:
            log.error("worker sent no hello in %.0fs", timeout_s, extra={"pane": handle.pane})
            self.kill(handle)
            raise PanewardenError(
                ErrorCode.SPAWN_FAILED, "the pane worker did not start in time"
            ) from None

    async def wait_introduced(self, handle: WorkerHandle, timeout_s: float) -> bool:
        """Wait (bounded) for a re-adopted worker's Hello, prompting it to send one.

        Returns True once it proved itself; False on timeout or death. Never kills.
        """
        deadline = time.monotonic() + timeout_s
        while not handle.ready.done() and not handle.dead:
            # Sent again until it arrives: the ROUTER drops frames for a peer that has
            # not reconnected yet, and workers reconnect within 100 ms.
            self.send(handle, Introduce())
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    asyncio.shield(handle.ready), min(INTRODUCE_RETRY_S, remaining)
                )
        return handle.proven and not handle.dead

    def adopt(
        self, pane: str, instance: str, pid: int, start_ticks: int, secret_hash: bytes
    ) -> WorkerHandle | None:
        """Re-adopt a worker that outlived a previous supervisor; None if it is gone.

        The pidfd is opened first and the start time compared after, so a reused
        pid is never adopted. The worker is ready once its Hello proves the secret.
        """
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return None
        if process_start_ticks(pid) != start_ticks:
            os.close(pidfd)
            return None
        loop = asyncio.get_running_loop()
        handle = WorkerHandle(
            pane=pane,
            instance=instance,
            pid=pid,
            secret_hash=secret_hash,
            proc=None,
            pidfd=pidfd,
            ready=loop.create_future(),
            start_ticks=start_ticks,
        )
        self.by_instance[instance] = handle
        loop.add_reader(pidfd, self._on_pidfd, handle)
        return handle

    def kill(self, handle: WorkerHandle) -> None:
        """SIGKILL a worker (its pidfd then reports the death); never an unproven one.

        A re-adopted record names a pid and start time anyone able to write the state
        dir could forge: until its Hello proves the secret, the process is not ours.
        """
        if not handle.proven:
            log.warning(
                "not signalling unproven process %d", handle.pid, extra={"pane": handle.pane}
            )
            return
        if handle.pidfd < 0:
            handle.kill_requested = True  # not started yet: killed as soon as it is
            return
        if not handle.dead:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(handle.pidfd, signal.SIGKILL)

    # ------------------------------------------------------------ requests

    async def request(
        self, handle: WorkerHandle, make: Callable[[int], ToWorker], timeout_s: float
    ) -> Reply:
        """Send a request and await its reply; raises worker_lost or timeout.

        A worker that has not introduced itself yet (re-adopted after a restart) is
        waited for, within the same ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        if not handle.ready.done() and not handle.dead:
            await self.wait_introduced(handle, timeout_s)
        if handle.dead or not handle.proven:
            raise PanewardenError(ErrorCode.WORKER_LOST, "the pane's worker is gone")
        timeout_s = max(0.0, deadline - time.monotonic())
        rid = next(self._rids)
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        handle.pending[rid] = future
        try:
            self.send(handle, make(rid))
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            raise PanewardenError(
                ErrorCode.TIMEOUT, f"the pane's worker did not answer in {timeout_s:.0f}s"
            ) from None
        finally:
            handle.pending.pop(rid, None)

    def send(self, handle: WorkerHandle, msg: ToWorker) -> None:
        """Queue a frame for a worker (never blocks; drops if the worker is gone)."""
        if self._sock is None or handle.dead:
            return
        try:
            self._sock.send_multipart(
                [handle.instance.encode(), self._codec.encode(msg)], flags=zmq.NOBLOCK
            )
        except (zmq.Again, zmq.ZMQError) as exc:
            log.warning("could not send to worker: %s", exc, extra={"pane": handle.pane})

    # ------------------------------------------------------------ receiving

    async def _receive_loop(self) -> None:
        assert self._sock is not None
        while True:
            frames = await self._sock.recv_multipart(copy=False)
            if len(frames) != 2:
                log.warning("dropped a frame with %d parts", len(frames))
                continue
            ident = bytes(frames[0].buffer).decode(errors="replace")
            try:
                msg = self._codec.decode_to_supervisor(bytes(frames[1].buffer))
            except FrameError as exc:
                log.warning("dropped a malformed frame from a worker: %s", exc)
                continue
            handle = self.by_instance.get(ident)
            if handle is None:
                log.warning("dropped a %s frame from an unknown worker", type(msg).__name__)
                continue
            peer_pid = _peer_pid(frames[1]) if isinstance(msg, Hello) else None
            if handle.pid == 0:
                # Forked, but the template's answer naming the pid is still on its way:
                # kept, in order, until the pid is known (and the pane tracked).
                if len(handle.early) < MAX_EARLY_FRAMES:
                    handle.early.append((msg, peer_pid))
                continue
            try:
                self._dispatch(handle, msg, peer_pid)
            except Exception:
                # One event sink's bug costs this frame, never the only reader of
                # every pane: without it every call times out and nothing is logged.
                log.exception(
                    "dropped a %s frame: its dispatch failed",
                    type(msg).__name__,
                    extra={"pane": handle.pane},
                )

    def _dispatch(self, handle: WorkerHandle, msg: ToSupervisor, peer_pid: int | None) -> None:
        if isinstance(msg, Hello):
            self._check_hello(handle, msg, peer_pid)
            return
        if not handle.ready.done():
            return
        handle.last_rx = time.monotonic()
        if isinstance(msg, Ok | Failed | ScreenText | Closed):
            future = handle.pending.get(msg.rid)
            if future is not None and not future.done():
                future.set_result(msg)
        elif not isinstance(msg, Heartbeat):
            self._on_event(handle, msg)

    def _check_hello(self, handle: WorkerHandle, hello: Hello, peer_pid: int | None) -> None:
        proof_ok = hmac.compare_digest(hashlib.sha256(hello.proof).digest(), handle.secret_hash)
        if hello.protocol_version != PROTOCOL_VERSION or not proof_ok:
            log.error(
                "refused a hello (version %s, proof %s)",
                hello.protocol_version,
                "ok" if proof_ok else "bad",
                extra={"pane": handle.pane},
            )
            return
        if peer_pid is not None and peer_pid != handle.pid:
            log.error("refused a hello from pid %s", peer_pid, extra={"pane": handle.pane})
            if handle.spawned and handle.forked_first:
                # It holds this worker's secret: a fork whose template died before
                # naming it, replaced by a cold start. Ours, and not wanted.
                _kill_twin(peer_pid, handle.pid)
            return
        handle.last_rx = time.monotonic()
        handle.introduced = True
        handle.session_id = hello.child_pid
        if not handle.ready.done():
            handle.ready.set_result(hello)
        # First Hello or a re-introduction: either way it carries the worker's status.
        self._on_event(handle, hello)

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            now = time.monotonic()
            for handle in list(self.by_instance.values()):
                if handle.dead or not handle.ready.done():
                    continue
                try:
                    self._beat(handle, now)
                except Exception:
                    log.exception("heartbeat failed", extra={"pane": handle.pane})

    def _beat(self, handle: WorkerHandle, now: float) -> None:
        self.send(handle, Heartbeat(sent_at=time.time()))
        if now - handle.last_rx > self._heartbeat_loss_s:
            log.error("worker stopped answering; killing it", extra={"pane": handle.pane})
            self.kill(handle)

    # ------------------------------------------------------------ death

    def _on_pidfd(self, handle: WorkerHandle) -> None:
        loop = asyncio.get_running_loop()
        loop.remove_reader(handle.pidfd)
        handle.dead = True
        if handle.proc is not None:
            # The pidfd is readable: the process has exited, so this wait is immediate.
            handle.exit_code = handle.proc.wait(timeout=5)
        handle.died.set()
        # Its last replies (a Closed, say) may still be on their way through the socket:
        # requests fail only if nothing answers them by then.
        loop.call_later(REPLIES_AFTER_DEATH_S, _fail_pending, handle)
        if not handle.ready.done():
            handle.ready.set_exception(
                PanewardenError(ErrorCode.SPAWN_FAILED, "the pane worker died while starting")
            )
            handle.ready.exception()  # mark retrieved: a dead start is reported elsewhere
        self._on_death(handle)

    def forget(self, handle: WorkerHandle) -> None:
        """Drop a handle the registry no longer needs."""
        self._forget(handle)

    def _forget(self, handle: WorkerHandle) -> None:
        self.by_instance.pop(handle.instance, None)
        if not handle.dead:
            with contextlib.suppress(RuntimeError):
                asyncio.get_running_loop().remove_reader(handle.pidfd)
        with contextlib.suppress(OSError):
            os.close(handle.pidfd)
        handle.pidfd = -1


def _stop_if_deaf(task: asyncio.Task[None]) -> None:
    """A receive or heartbeat loop that ended on its own leaves the service deaf to every
    pane: say so and stop the service (SIGTERM to itself: the ordinary stop, panes closed)."""
    if task.cancelled():
        return
    log.critical(
        "the %s loop died; stopping the service rather than running deaf",
        task.get_name(),
        exc_info=task.exception(),
    )
    os.kill(os.getpid(), signal.SIGTERM)


def _kill_twin(peer_pid: int, worker_pid: int) -> None:
    """SIGKILL a process that proved a worker's secret but is not that worker."""
    if peer_pid <= 1 or peer_pid in (worker_pid, os.getpid()):
        return
    try:
        pidfd = os.pidfd_open(peer_pid)
    except OSError:
        return
    try:
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        log.warning("killed pid %d: a second process with a worker's secret", peer_pid)
    except OSError:
        pass
    finally:
        os.close(pidfd)


def _fail_pending(handle: WorkerHandle) -> None:
    for future in handle.pending.values():
        if not future.done():
            future.set_exception(PanewardenError(ErrorCode.WORKER_LOST, "the pane's worker died"))


def _peer_pid(frame: zmq.Frame) -> int | None:
    """The sending process's pid from SO_PEERCRED (``localhost:uid:gid:pid`` on ipc)."""
    try:
        address = frame.get("Peer-Address")
    except zmq.ZMQError:
        return None
    parts = str(address).split(":")
    if len(parts) == 4 and parts[3].isdigit():
        return int(parts[3])
    return None
