"""Starting, removing and re-adopting panes.

A start reserves the name first (see the registry), resolves the launch profile off
the event loop, spawns the worker and waits for its Hello; only then is the pane
published and its durable record written. A removal asks the worker to close (it kills
its tree and exits) and kills what is left; a process that never proved it is our
worker (a re-adopted record's pid) is never signalled. After a supervisor restart
every pane record is re-adopted: its worker is asked to introduce itself.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Mapping

from protocol.agents.table import launch_rules_for
from protocol.boot import PaneLaunch
from protocol.errors import ErrorCode, PanewardenError
from protocol.limits import ProgramLimits
from protocol.messages import CAPTURE_QUIET_S, READ_QUIET_MAX_S, Close, Closed, Failed
from protocol.names import NAME_RULE, is_valid_name
from protocol.timing import KILL_GRACE_S
from supervisor.config import ServiceConfig
from supervisor.confinement.nesting import refuse_inside_writable
from supervisor.confinement.pane import LaneGrant, PaneConfiner, PaneSandbox, network_exposes
from supervisor.panes.driving import error_code, refuse_leased
from supervisor.panes.pane import LeaseTag, Pane
from supervisor.panes.records import RECORD_VERSION, PaneRecord, PaneRecords
from supervisor.panes.registry import ADOPTION_WAIT_S, PaneRegistry
from supervisor.procfs import process_start_ticks
from supervisor.profiles.confinement import ConfineSettings
from supervisor.profiles.policy import ProfileSet, WatchdogConfig
from supervisor.workers import orphans
from supervisor.workers.manager import WorkerHandle, WorkerManager

log = logging.getLogger(__name__)

# How long a restarted service waits for its re-adopted workers before it serves.
READOPT_BEFORE_SERVING_S = 2.0
# A worker that acknowledged a close has this long to exit before it is SIGKILLed.
EXIT_AFTER_CLOSE_S = 5.0


class PaneLifecycle:
    """Starts, removes and re-adopts panes; see the module docstring."""

    def __init__(
        self,
        config: ServiceConfig,
        registry: PaneRegistry,
        workers: WorkerManager,
        records: PaneRecords,
        profiles: Callable[[], ProfileSet],
        confiner: PaneConfiner,
        pane_env: Mapping[str, str] | None = None,
    ) -> None:
        self._config = config
        self.confiner = confiner
        # The service's own variables for every pane program (PANEWARDEN_CTL_SOCKET):
        # set last, so a profile cannot point a pane at another socket.
        self._pane_env = dict(pane_env or {})
        self._registry = registry
        self._workers = workers
        self._records = records
        self._profiles = profiles
        self._stopping = False

    def is_stopping(self) -> bool:
        """True once a stop began: no pane starts any more."""
        return self._stopping

    # ------------------------------------------------------------ start

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
        lease: LeaseTag | None = None,
        on_spawn: Callable[[str], None] | None = None,
        grant: LaneGrant | None = None,
        require_confined: bool = False,
        within: Callable[[ConfineSettings], None] | None = None,
    ) -> Pane:
        """Start a pane under a launch profile; returns it once its worker is ready.

        ``lease`` tags the pane from its first moment; ``on_spawn`` hears the worker's
        instance id as soon as the worker exists (before it is ready), so a lease can
        record which pane is its own before the pane is ever visible. ``grant`` is its
        lane's part of the sandbox; ``require_confined`` refuses to start it unconfined
        (``sandbox_unavailable``) whatever its profile says; ``within`` checks the
        profile's confinement, as resolved for this very start, and raises to refuse it.
        """
        if not is_valid_name(name):
            raise PanewardenError(ErrorCode.INVALID_ARGUMENT, f"pane {NAME_RULE}")
        if self.is_stopping():
            raise PanewardenError(ErrorCode.PANE_NOT_RUNNING, "the service is stopping")
        profiles = self._profiles()
        with self._registry.reserve(name, profiles.max_panes):
            # resolve() may read credential files: keep it off the event loop.
            spec = await asyncio.to_thread(
                profiles.resolve,
                profile,
                cwd=cwd,
                extra_args=extra_args,
                argv=argv,
                cols=cols,
                rows=rows,
                environ=self._config.environ,
            )
            # A kind that asks before nothing (Pi) runs confined or not at all.
            required = require_confined or any(
                rules.launch.confined_only for rules in launch_rules_for(spec.agent, spec.argv)
            )
            if within is not None:
                within(spec.confinement)
            confined = self.confiner.confined(spec.confinement, required=required)
            sandbox: PaneSandbox | None = None
            if confined:
                sandbox = await asyncio.to_thread(
                    self.confiner.build,
                    name,
                    agent=spec.agent,
                    argv=spec.argv,
                    cwd=spec.cwd,
                    env=spec.env,
                    settings=spec.confinement,
                    other_cwds=[p.cwd for p in self._registry.panes.values()],
                    grant=grant or LaneGrant(),
                    limits=spec.limits,
                )
            try:
                # No await between this check of the directory and its record.
                lease_id = None if lease is None else lease.lease_id
                refuse_inside_writable(
                    spec.cwd, self._registry.every_worker_pane(), lease_id, "the pane's cwd"
                )
                self._registry.place(name, spec.cwd, lease_id)
            except BaseException:
                if sandbox is not None:
                    self.confiner.forget(sandbox.pane_dir)
                raise
            handle, boot = self._workers.prepare(
                PaneLaunch(
                    pane=name,
                    agent=spec.agent,
                    argv=list(spec.argv) if sandbox is None else sandbox.argv,
                    cwd=spec.cwd,
                    # The sandbox's variables last: its ctl socket is the one inside.
                    env={**spec.env, **self._pane_env, **(sandbox.env if sandbox else {})},
                    cols=spec.cols,
                    rows=spec.rows,
                    orphan_grace_s=self._config.orphan_grace_s,
                    rules_dir=self._rules_dir(),
                    emulator=spec.emulator or self._config.emulator,
                    output_buffer_bytes=self._config.output_buffer_bytes,
                    output_overflow=self._config.output_overflow,
                    confined=confined,
                    egress=[] if sandbox is None else sandbox.egress,
                    egress_socket="" if sandbox is None else sandbox.egress_socket,
                    limits=ProgramLimits() if sandbox is None else sandbox.limits,
                    stand_in="" if sandbox is None else sandbox.stand_in,
                    egress_public=sandbox is not None and sandbox.egress_public,
                    protocol="acp" if spec.protocol == "acp" else "terminal",
                )
            )
            pane = Pane(
                name=name,
                profile=spec.profile,
                agent=spec.agent,
                cwd=spec.cwd,
                handle=handle,
                started_at=time.time(),
                watchdog=spec.watchdog,
                lease=lease,
                confined=confined,
                sandbox_dir=None if sandbox is None else sandbox.pane_dir,
                network=spec.confinement.network if confined else "",
                network_exposes=network_exposes(spec.confinement) if confined else "",
                confinement=spec.confinement if confined else None,
                sandbox_writable=() if sandbox is None else sandbox.writable,
                sandbox_read_only=() if sandbox is None else sandbox.read_only,
            )
            # Tracked before the process exists: its first frames find the pane.
            self._registry.track(pane)
            if on_spawn is not None:
                on_spawn(handle.instance)
            try:
                await self._workers.launch(handle, boot, dict(self._config.environ))
                hello = await self._workers.wait_ready(handle)
            except BaseException:
                self._registry.drop(pane)
                self._workers.kill(handle)
                self._forget_sandbox(pane)
                raise
        if self.is_stopping():
            # The stop may already have closed the panes it knew: this one is not kept.
            if not pane.closing:
                await self.remove(pane)
            raise PanewardenError(ErrorCode.PANE_NOT_RUNNING, "the service is stopping")
        self._registry.publish(pane)
        self._save_record(pane)
        log.info(
            "pane started",
            extra={"pane": name, "worker_pid": handle.pid, "pid": hello.child_pid},
        )
        if hello.spawn_error is not None:
            await self.remove(pane)
            raise PanewardenError(
                ErrorCode.SPAWN_FAILED, f"cannot start {spec.argv[0]!r}: {hello.spawn_error}"
            )
        return pane

    def confinement_of(self, profile: str) -> ConfineSettings:
        """The confinement profile ``profile`` has now (``profile_not_found``)."""
        return self._profiles().get(profile).confinement

    def agent_of(self, profile: str) -> str:
        """The agent kind of a launch profile; raises profile_not_found."""
        return self._profiles().get(profile).agent

    def _rules_dir(self) -> str | None:
        """Screen-rule overrides live in ``rules/`` beside the profiles file."""
        if not self._config.profiles_path:
            return None
        path = os.path.abspath(self._config.profiles_path)
        return os.path.join(os.path.dirname(path), "rules")

    def _save_record(self, pane: Pane) -> None:
        handle = pane.handle
        ticks = process_start_ticks(handle.pid)
        if ticks is None:
            return
        self._records.save(
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
                confined=pane.confined,
                network=pane.network,
                network_exposes=pane.network_exposes,
            )
        )

    # ------------------------------------------------------------ re-adoption

    async def readopt(self) -> None:
        """Take back the panes whose workers outlived a previous supervisor.

        Waits (bounded) for their introductions, so the service answers its first call
        with every surviving pane running.
        """
        records, quarantined = self._records.load_all()
        for name in quarantined:
            log.error("pane record %s was corrupt and is quarantined", name)
        loop = asyncio.get_running_loop()
        for rec in records:
            handle = self._workers.adopt(
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
                self._records.delete(rec.name)
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
                confined=rec.confined,
                sandbox_dir=self.confiner.pane_dir_of(rec.name) if rec.confined else None,
                network=rec.network,
                network_exposes=rec.network_exposes,
                # Its record keeps no grant: at least its cwd is what it writes.
                sandbox_writable=(rec.cwd,) if rec.confined else (),
            )
            task = loop.create_task(self._finish_adoption(pane), name=f"adopt-{rec.name}")
            self._registry.adopting(pane, task)
        pending = self._registry.adoptions()
        if pending:
            # Workers reconnect within ~100 ms and are asked to introduce themselves.
            await asyncio.wait(pending, timeout=READOPT_BEFORE_SERVING_S)

    def _watchdog_config(self, profile: str) -> WatchdogConfig | None:
        try:
            return self._profiles().get(profile).watchdog
        except PanewardenError:
            return None

    async def _finish_adoption(self, pane: Pane) -> None:
        """Wait for the adopted worker's Hello, asking for it; forget a pane whose process
        never proves it is our worker (and never signal that process)."""
        try:
            proven = await self._workers.wait_introduced(pane.handle, ADOPTION_WAIT_S)
        finally:
            self._registry.adopted(pane)
        if not proven:
            if not pane.handle.dead:
                log.error(
                    "pid %d named by the pane record never proved it is our worker; "
                    "the pane is forgotten and the process left alone",
                    pane.handle.pid,
                    extra={"pane": pane.name},
                )
            self.forget_unproven(pane)
            return
        log.info("pane re-adopted", extra={"pane": pane.name, "worker_pid": pane.handle.pid})

    def _forget_sandbox(self, pane: Pane) -> None:
        """Remove a gone pane's sandbox files (its hosts file, its egress socket)."""
        if pane.sandbox_dir is not None:
            self.confiner.forget(pane.sandbox_dir)
            pane.sandbox_dir = None

    def forget_unproven(self, pane: Pane) -> None:
        """Drop a re-adopted pane whose worker never proved itself: no signal, no `lost`."""
        if self._registry.panes.get(pane.name) is pane:
            self._records.delete(pane.name)
        self._registry.drop(pane)
        self._workers.forget(pane.handle)

    # ------------------------------------------------------------ removal

    async def remove_pane(self, name: str) -> tuple[int | None, int]:
        """Kill the pane's whole process tree and forget it; returns (exit_code, killed)."""
        pane = await self._registry.ready(name)
        if pane.closing:
            raise PanewardenError(ErrorCode.NOT_FOUND, f"pane {name!r} is being removed")
        if pane.lease is None or not pane.lease.started_by_pane:
            refuse_leased(pane, "remove_pane")
        return await self.remove(pane)

    async def remove(self, pane: Pane) -> tuple[int | None, int]:
        """Close ``pane``'s worker (kill it if it cannot close) and forget the pane."""
        pane.closing = True
        handle = pane.handle
        exit_code: int | None = pane.status.exit_code
        killed = 0
        try:
            if not handle.dead:
                closed = await self._close_worker(pane)
                if closed is not None:
                    exit_code, killed = closed.exit_code, closed.killed
                    await self._await_death(handle)
                elif handle.proven:
                    # No orderly close: the worker and then the leftovers are killed.
                    self._workers.kill(handle)
                    await self._await_death(handle)
                # else: a record named a process that never proved it is ours: left alone.
            killed += len(orphans.kill_recorded(handle.session_id, handle.descendants))
        finally:
            self._registry.drop(pane)
            self._records.delete(pane.name)
            self._workers.forget(handle)
            self._forget_sandbox(pane)
        log.info("pane removed", extra={"pane": pane.name, "worker_pid": handle.pid})
        return exit_code, killed

    async def close_at(
        self, pane: Pane, expected_seq: int, capture_lines: int
    ) -> tuple[Closed, int]:
        """Capture and close ``pane`` in one worker step, only if it is still at
        ``expected_seq``, once the program is quiet (the capture rule,
        ``CAPTURE_QUIET_S``); returns (the worker's Closed, processes killed in all).

        Raises:
            PanewardenError: ``cursor_mismatch`` (the pane moved: it is left untouched),
                ``worker_lost``, ``timeout``.
        """
        if pane.closing:
            raise PanewardenError(ErrorCode.NOT_FOUND, f"pane {pane.name!r} is being removed")
        handle = pane.handle
        reply = await self._workers.request(
            handle,
            lambda rid: Close(
                rid=rid,
                expected_seq=expected_seq,
                capture_lines=capture_lines,
                grace_s=KILL_GRACE_S,
                quiet_s=CAPTURE_QUIET_S,
            ),
            READ_QUIET_MAX_S + KILL_GRACE_S + 10,
        )
        if isinstance(reply, Failed):
            raise PanewardenError(error_code(reply.code), reply.message)
        assert isinstance(reply, Closed)
        pane.closing = True
        try:
            await self._await_death(handle)
            killed = reply.killed + len(
                orphans.kill_recorded(handle.session_id, handle.descendants)
            )
        finally:
            self._registry.drop(pane)
            self._records.delete(pane.name)
            self._workers.forget(handle)
            self._forget_sandbox(pane)
        log.info("pane closed at seq %d", expected_seq, extra={"pane": pane.name})
        return reply, killed

    async def _close_worker(self, pane: Pane) -> Closed | None:
        """Ask the worker to kill its tree and exit; None when it cannot be asked."""
        handle = pane.handle
        if not handle.ready.done() and not await self._workers.wait_introduced(
            handle, ADOPTION_WAIT_S
        ):
            log.warning("the worker never introduced itself", extra={"pane": pane.name})
            return None
        try:
            reply = await self._workers.request(
                handle, lambda rid: Close(rid=rid, grace_s=KILL_GRACE_S), KILL_GRACE_S + 10
            )
        except PanewardenError as exc:
            log.warning(
                "close failed (%s); killing the worker", exc.code.value, extra={"pane": pane.name}
            )
            return None
        return reply if isinstance(reply, Closed) else None

    async def _await_death(self, handle: WorkerHandle) -> None:
        """Wait for the worker's exit (pidfd); SIGKILL it if it lingers."""
        try:
            await asyncio.wait_for(handle.died.wait(), EXIT_AFTER_CLOSE_S)
        except TimeoutError:
            log.warning("worker did not exit after close; killing it", extra={"pane": handle.pane})
            self._workers.kill(handle)
            await asyncio.wait_for(handle.died.wait(), EXIT_AFTER_CLOSE_S)

    async def stop(self, keep_panes: bool) -> None:
        """No more starts; settle re-adoptions; close every pane unless ``keep_panes``."""
        self._stopping = True
        adopting = self._registry.adoptions()
        for task in adopting:
            task.cancel()
        await asyncio.gather(*adopting, return_exceptions=True)
        if not keep_panes:
            # Panes still starting have a worker but no name yet: close them too.
            await asyncio.gather(
                *(self.remove(p) for p in self._registry.every_worker_pane() if not p.closing),
                return_exceptions=True,
            )
