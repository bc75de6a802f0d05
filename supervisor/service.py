"""The pane service: the supervisor's core behind the MCP tools.

It owns the registry, the worker manager and the launch policy, and turns each
tool call into worker requests. Every method raises ``PanewardenError`` with a
stable code for anything a client can get wrong or meet at run time.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from protocol.errors import ErrorCode, PanewardenError
from protocol.messages import (
    AnswerDialog,
    CancelWatch,
    Close,
    Closed,
    Descendants,
    DialogAnswer,
    Exited,
    Failed,
    Interrupt,
    Ok,
    OutputMatch,
    PaneStatusFields,
    ReadScreen,
    ScreenText,
    Status,
    ToSupervisor,
    ToWorker,
    WatchOutput,
    WriteInput,
)
from supervisor import orphans
from supervisor.config import ServiceConfig
from supervisor.pane_records import RECORD_VERSION, PaneRecord, PaneRecords
from supervisor.panes import Pane, wait_for_status
from supervisor.procfs import process_start_ticks
from supervisor.profiles import ProfileSet, WatchdogConfig
from supervisor.watchdog import DEFAULT_PERIOD_S, Watchdog
from supervisor.workers import Reply, WorkerHandle, WorkerManager

log = logging.getLogger(__name__)

RPC_TIMEOUT_S = 15.0
PANE_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
SWEEP_INTERVAL_S = 1.0
CLOSE_GRACE_S = 2.0
# How long a removal waits for a re-adopted worker's Hello (it re-sends it within ~3 s).
ADOPTION_WAIT_S = 8.0


def demo_argv() -> list[str]:
    """How the built-in demo profile starts the bundled demo agent."""
    return [sys.executable, "-m", "supervisor.demo_agent"]


@dataclass(frozen=True)
class WaitTarget:
    """One pane of a ``wait_any`` with its own cursor."""

    name: str
    after_seq: int | None


class PaneService:
    """Starts, drives and removes panes; see the module docstring."""

    def __init__(
        self,
        config: ServiceConfig,
        profiles: ProfileSet,
        endpoint: str,
        watchdog_period_s: float = DEFAULT_PERIOD_S,
    ) -> None:
        self.config = config
        self.profiles = profiles
        self.panes: dict[str, Pane] = {}
        self._reserved: set[str] = set()
        self._by_instance: dict[str, Pane] = {}
        self._watches: dict[int, asyncio.Future[OutputMatch]] = {}
        self._watch_ids = itertools.count(1)
        self.workers = WorkerManager(
            endpoint, self._on_event, self._on_death, heartbeat_loss_s=config.heartbeat_loss_s
        )
        self._sweeper: asyncio.Task[None] | None = None
        self.watchdog = Watchdog(self, period_s=watchdog_period_s)
        self.records = PaneRecords(config.state_dir)
        self._adoptions: list[asyncio.Task[None]] = []

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Become a subreaper, bind the worker socket, start the sweeper and watchdog."""
        orphans.become_subreaper()
        self.workers.bind()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGCHLD, self._sweep)
        self._sweeper = loop.create_task(self._sweep_loop(), name="leftover-sweeper")
        self._readopt()
        self.watchdog.start()

    def _readopt(self) -> None:
        """Take back the panes whose workers outlived a previous supervisor."""
        records, quarantined = self.records.load_all()
        for name in quarantined:
            log.error("pane record %s was corrupt and is quarantined", name)
        for rec in records:
            handle = self.workers.adopt(
                rec.name,
                rec.instance,
                rec.worker_pid,
                rec.worker_start_ticks,
                bytes.fromhex(rec.secret_sha256),
            )
            if handle is None:
                log.warning(
                    "pane %s did not survive the restart", rec.name, extra={"pane": rec.name}
                )
                self.records.delete(rec.name)
                continue
            pane = Pane(
                name=rec.name,
                profile=rec.profile,
                agent=rec.agent,
                cwd=rec.cwd,
                handle=handle,
                started_at=rec.started_at,
                pid=rec.pid,
                watchdog=self._watchdog_config(rec.profile) if rec.watchdog else None,
            )
            self.panes[rec.name] = pane
            self._by_instance[handle.instance] = pane
            self._adoptions.append(
                asyncio.get_running_loop().create_task(self._finish_adoption(pane))
            )

    def _watchdog_config(self, profile: str) -> WatchdogConfig | None:
        try:
            return self.profiles.get(profile).watchdog
        except PanewardenError:
            return None

    async def _finish_adoption(self, pane: Pane) -> None:
        """Wait for the adopted worker's Hello; a silent one is killed and the pane lost."""
        try:
            hello = await self.workers.wait_ready(pane.handle)
        except PanewardenError:
            log.error("adopted worker never proved itself", extra={"pane": pane.name})
            return
        pane.pid = hello.child_pid
        pane.record(hello.status)
        log.info("pane re-adopted", extra={"pane": pane.name, "worker_pid": pane.handle.pid})

    async def stop(self, keep_panes: bool = False) -> None:
        """Close every pane (unless ``keep_panes``), then the worker socket."""
        # First, so that no nudge is typed into a pane that is being closed.
        await self.watchdog.stop()
        for task in self._adoptions:
            task.cancel()
        await asyncio.gather(*self._adoptions, return_exceptions=True)
        if not keep_panes:
            await asyncio.gather(
                *(self._remove(p) for p in list(self.panes.values())),
                return_exceptions=True,
            )
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        asyncio.get_running_loop().remove_signal_handler(signal.SIGCHLD)
        await self.workers.close()

    def replace_profiles(self, profiles: ProfileSet) -> None:
        """Use a new launch policy for panes started from now on."""
        self.profiles = profiles

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_INTERVAL_S)
            self._sweep()

    def _sweep(self) -> None:
        orphans.sweep_leftovers(self.workers.managed_pids)

    # ------------------------------------------------------------ events

    def _on_event(self, handle: WorkerHandle, msg: ToSupervisor) -> None:
        pane = self._by_instance.get(handle.instance)
        match msg:
            case Status(status=status):
                if pane is not None:
                    pane.record(status)
            case Descendants(procs=procs, session_id=session_id):
                handle.descendants = frozenset((int(p), int(t)) for p, t in procs)
                handle.session_id = session_id
            case OutputMatch(watch_id=watch_id):
                future = self._watches.get(watch_id)
                if future is not None and not future.done():
                    future.set_result(msg)
            case Exited(exit_code=code, killed=killed):
                log.info(
                    "program exited (%s), %d leftovers killed",
                    code,
                    killed,
                    extra={"pane": handle.pane, "worker_pid": handle.pid},
                )
            case _:
                pass

    def _on_death(self, handle: WorkerHandle) -> None:
        killed = orphans.kill_recorded(handle.session_id, handle.descendants)
        killed |= orphans.sweep_leftovers(self.workers.managed_pids, already=killed)
        pane = self._by_instance.get(handle.instance)
        if pane is None or pane.closing:
            return
        log.error(
            "worker died (exit %s); pane lost, %d processes killed",
            handle.exit_code,
            len(killed),
            extra={"pane": pane.name, "worker_pid": handle.pid},
        )
        old = pane.status
        gone = old.state in ("working", "blocked")
        pane.record(
            PaneStatusFields(
                lifecycle="lost",
                state="unknown" if gone else old.state,
                kind=None if gone else old.kind,
                turn=old.turn,
                seq=old.seq + 1,
                source=old.source,
                exit_code=None,
            )
        )

    # ------------------------------------------------------------ lookup

    def pane(self, name: str) -> Pane:
        """The pane called ``name``; raises not_found."""
        pane = self.panes.get(name)
        if pane is None:
            raise PanewardenError(ErrorCode.NOT_FOUND, f"no pane named {name!r}")
        return pane

    def list_panes(self) -> list[Pane]:
        """Every pane, by name."""
        return [self.panes[n] for n in sorted(self.panes)]

    async def _rpc(
        self, pane: Pane, make: Callable[[int], ToWorker], timeout_s: float = RPC_TIMEOUT_S
    ) -> Reply:
        if pane.status.lifecycle == "lost" or pane.handle.dead:
            raise PanewardenError(ErrorCode.WORKER_LOST, f"pane {pane.name!r} is lost")
        reply = await self.workers.request(pane.handle, make, timeout_s)
        if isinstance(reply, Failed):
            raise PanewardenError(_code(reply.code), reply.message)
        return reply

    # ------------------------------------------------------------ tools

    async def start_pane(
        self,
        name: str,
        profile: str,
        *,
        cwd: str | None = None,
        extra_args: list[str] | None = None,
        argv: list[str] | None = None,
        cols: int | None = None,
        rows: int | None = None,
    ) -> Pane:
        """Start a pane under a launch profile; returns it once its worker is ready."""
        if not PANE_NAME_RE.fullmatch(name):
            raise PanewardenError(
                ErrorCode.INVALID_ARGUMENT, "pane names match ^[a-z0-9][a-z0-9_-]{0,31}$"
            )
        if name in self.panes or name in self._reserved:
            raise PanewardenError(ErrorCode.PANE_EXISTS, f"a pane named {name!r} exists")
        if len(self.panes) + len(self._reserved) >= self.profiles.max_panes:
            raise PanewardenError(
                ErrorCode.PANE_LIMIT, f"the limit of {self.profiles.max_panes} panes is reached"
            )
        # resolve() may read credential files: keep it off the event loop.
        spec = await asyncio.to_thread(
            self.profiles.resolve,
            profile,
            cwd=cwd,
            extra_args=extra_args,
            argv=argv,
            cols=cols,
            rows=rows,
            environ=self.config.environ,
        )
        self._reserved.add(name)
        try:
            handle = self.workers.spawn(
                {
                    "pane": name,
                    "agent": spec.agent,
                    "argv": list(spec.argv),
                    "cwd": spec.cwd,
                    "env": dict(spec.env),
                    "cols": spec.cols,
                    "rows": spec.rows,
                    "orphan_grace_s": self.config.orphan_grace_s,
                    "rules_dir": self._rules_dir(),
                    "emulator": spec.emulator or self.config.emulator,
                    "output_buffer_bytes": self.config.output_buffer_bytes,
                    "output_overflow": self.config.output_overflow,
                },
                dict(self.config.environ),
            )
            pane = Pane(
                name=name,
                profile=spec.profile,
                agent=spec.agent,
                cwd=spec.cwd,
                handle=handle,
                started_at=time.time(),
                watchdog=spec.watchdog,
            )
            self._by_instance[handle.instance] = pane
            try:
                hello = await self.workers.wait_ready(handle)
            except BaseException:
                self._by_instance.pop(handle.instance, None)
                self.workers.kill(handle)
                raise
        finally:
            self._reserved.discard(name)
        pane.pid = hello.child_pid
        pane.record(hello.status)
        self.panes[name] = pane
        self._save_record(pane)
        log.info(
            "pane started",
            extra={"pane": name, "worker_pid": handle.pid, "pid": hello.child_pid},
        )
        if hello.spawn_error is not None:
            await self._remove(pane)
            raise PanewardenError(
                ErrorCode.SPAWN_FAILED, f"cannot start {spec.argv[0]!r}: {hello.spawn_error}"
            )
        return pane

    def _rules_dir(self) -> str | None:
        """Screen-rule overrides live in ``rules/`` beside the profiles file."""
        if not self.config.profiles_path:
            return None
        return os.path.join(os.path.dirname(os.path.abspath(self.config.profiles_path)), "rules")

    def _save_record(self, pane: Pane) -> None:
        handle = pane.handle
        ticks = process_start_ticks(handle.pid)
        if ticks is None:
            return
        self.records.save(
            PaneRecord(
                version=RECORD_VERSION,
                name=pane.name,
                instance=handle.instance,
                secret_sha256=handle.secret_hash.hex(),
                worker_pid=handle.pid,
                worker_start_ticks=ticks,
                profile=pane.profile,
                agent=pane.agent,
                cwd=pane.cwd,
                started_at=pane.started_at,
                pid=pane.pid,
                watchdog=pane.watchdog is not None,
            )
        )

    async def send_input(
        self, name: str, text: str, submit: bool, expect_turn: int | None
    ) -> tuple[int, int]:
        """Type text (and Enter) unless the pane is blocked; returns (seq, turn)."""
        pane = self.pane(name)
        reply = await self._rpc(
            pane,
            lambda rid: WriteInput(rid=rid, text=text, submit=submit, expect_turn=expect_turn),
        )
        assert isinstance(reply, Ok)
        return reply.seq, reply.turn

    async def read_output(self, name: str, lines: int | None, scrollback: bool) -> ScreenText:
        """The pane's screen text (escape-free), optionally with scrollback."""
        reply = await self._rpc(
            self.pane(name), lambda rid: ReadScreen(rid=rid, lines=lines, scrollback=scrollback)
        )
        assert isinstance(reply, ScreenText)
        return reply

    async def wait_status(
        self, name: str, until: Collection[str], after_seq: int | None, timeout_s: float
    ) -> tuple[PaneStatusFields, bool]:
        """Wait for a status after ``after_seq`` in ``until``; returns (status, timed_out)."""
        return await wait_for_status(self.pane(name), until, after_seq, timeout_s)

    async def wait_any(
        self, targets: Sequence[WaitTarget], until: Collection[str], timeout_s: float
    ) -> tuple[str, PaneStatusFields] | None:
        """The first pane to match; None on timeout. Losing waits are cancelled."""
        panes = [(t, self.pane(t.name)) for t in targets]
        tasks = {
            asyncio.ensure_future(wait_for_status(p, until, t.after_seq, timeout_s)): t.name
            for t, p in panes
        }
        try:
            pending = set(tasks)
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in sorted(done, key=lambda t: list(tasks).index(t)):
                    status, timed_out = task.result()
                    if not timed_out:
                        return tasks[task], status
            return None
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def wait_output(
        self, name: str, pattern: str, regex: bool, timeout_s: float
    ) -> OutputMatch | None:
        """Wait until ``pattern`` shows on the pane's screen; None on timeout."""
        pane = self.pane(name)
        watch_id = next(self._watch_ids)
        future: asyncio.Future[OutputMatch] = asyncio.get_running_loop().create_future()
        self._watches[watch_id] = future
        try:
            await self._rpc(
                pane,
                lambda rid: WatchOutput(rid=rid, watch_id=watch_id, pattern=pattern, regex=regex),
            )
            # A pane whose program ends will never show the pattern: stop waiting then.
            died = asyncio.ensure_future(wait_for_status(pane, (), pane.status.seq, timeout_s))
            waiters: set[asyncio.Future[Any]] = {future, died}
            try:
                done, _ = await asyncio.wait(
                    waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                died.cancel()
            return future.result() if future in done else None
        finally:
            self._watches.pop(watch_id, None)
            if not future.done() and not pane.handle.dead and not pane.removed:
                self.workers.send(pane.handle, CancelWatch(rid=0, watch_id=watch_id))

    async def interrupt(self, name: str) -> int:
        """Send Ctrl-C to the pane's PTY; returns the seq at that moment."""
        reply = await self._rpc(self.pane(name), lambda rid: Interrupt(rid=rid))
        assert isinstance(reply, Ok)
        return reply.seq

    async def answer_dialog(
        self, name: str, answer: DialogAnswer, expect_turn: int | None
    ) -> tuple[int, int]:
        """Answer the pane's permission dialog with allow_once or deny_once."""
        pane = self.pane(name)
        reply = await self._rpc(
            pane,
            lambda rid: AnswerDialog(rid=rid, answer=answer, expect_turn=expect_turn),
        )
        assert isinstance(reply, Ok)
        return reply.seq, reply.turn

    async def remove_pane(self, name: str) -> tuple[int | None, int]:
        """Kill the pane's whole process tree and forget it; returns (exit_code, killed)."""
        pane = self.pane(name)
        if pane.closing:
            raise PanewardenError(ErrorCode.NOT_FOUND, f"pane {name!r} is being removed")
        return await self._remove(pane)

    async def _remove(self, pane: Pane) -> tuple[int | None, int]:
        pane.closing = True
        handle = pane.handle
        exit_code: int | None = pane.status.exit_code
        killed = 0
        try:
            if not handle.dead:
                closed = await self._close_worker(pane)
                if closed is None:
                    # No orderly close: the worker and then the leftovers are killed.
                    self.workers.kill(handle)
                else:
                    exit_code, killed = closed.exit_code, closed.killed
                await self._await_death(handle)
            killed += len(orphans.kill_recorded(handle.session_id, handle.descendants))
        finally:
            self.panes.pop(pane.name, None)
            self._by_instance.pop(handle.instance, None)
            self.records.delete(pane.name)
            pane.mark_removed()
            self.workers.forget(handle)
        log.info("pane removed", extra={"pane": pane.name, "worker_pid": handle.pid})
        return exit_code, killed

    async def _close_worker(self, pane: Pane) -> Closed | None:
        """Ask the worker to kill its tree and exit; None when it cannot be asked."""
        handle = pane.handle
        try:
            if not handle.ready.done():
                # A re-adopted worker that has not re-introduced itself yet will soon.
                await asyncio.wait_for(asyncio.shield(handle.ready), ADOPTION_WAIT_S)
            reply = await self.workers.request(
                handle, lambda rid: Close(rid=rid, grace_s=CLOSE_GRACE_S), CLOSE_GRACE_S + 10
            )
        except (PanewardenError, TimeoutError) as exc:
            code = exc.code.value if isinstance(exc, PanewardenError) else "timeout"
            log.warning("close failed (%s); killing the worker", code, extra={"pane": pane.name})
            return None
        return reply if isinstance(reply, Closed) else None

    async def _await_death(self, handle: WorkerHandle, timeout_s: float = 5.0) -> None:
        """Wait for the worker's exit (pidfd); SIGKILL it if it lingers."""
        try:
            await asyncio.wait_for(handle.died.wait(), timeout_s)
        except TimeoutError:
            log.warning("worker did not exit after close; killing it", extra={"pane": handle.pane})
            self.workers.kill(handle)
            await asyncio.wait_for(handle.died.wait(), timeout_s)


def _code(raw: str) -> ErrorCode:
    try:
        return ErrorCode(raw)
    except ValueError:
        return ErrorCode.INTERNAL


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists (a zombie counts as gone to nobody here)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
