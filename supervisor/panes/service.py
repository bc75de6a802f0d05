"""The pane service: the parts of the supervisor's core, wired together.

``PaneService`` owns the worker socket (``workers``), the registry of panes and their
status (``registry``), starting/removing/re-adopting (``lifecycle``), driving running
panes (``driver``), the short-lived helper processes (``children``: git, bwrap), the
watchdog and the sweep of leftovers, and starts and stops them in order. The front-end
calls the parts directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

from protocol.template import MAX_SPARE_SCREENS, SpareScreen
from protocol.timing import heartbeat_period, orphan_after
from supervisor.config import ServiceConfig
from supervisor.confinement.host import HostSupport, check_host
from supervisor.confinement.pane import PaneConfiner
from supervisor.confinement.secrets import service_paths
from supervisor.panes.driving import PaneDriver
from supervisor.panes.lifecycle import PaneLifecycle
from supervisor.panes.records import PaneRecords
from supervisor.panes.registry import PaneRegistry
from supervisor.panes.watchdog import DEFAULT_PERIOD_S, Watchdog
from supervisor.profiles.confinement import confine_choice
from supervisor.profiles.policy import ProfileSet
from supervisor.workers import orphans
from supervisor.workers.manager import WorkerHandle, WorkerManager
from supervisor.workers.subprocesses import ManagedChildren
from supervisor.workers.template import TemplateManager

log = logging.getLogger(__name__)

# A backstop only: SIGCHLD and every worker death sweep at once.
SWEEP_INTERVAL_S = 5.0


def demo_argv() -> list[str]:
    """How the built-in demo profile starts the bundled demo agent."""
    return [sys.executable, "-m", "supervisor.demo.agent"]


def _backends(config: ServiceConfig, profiles: ProfileSet) -> list[str]:
    """The emulator backends panes may use: the template imports them before forking."""
    named = (profiles.get(name).emulator for name in profiles.names())
    return sorted({config.emulator, *(kind for kind in named if kind)})


def spare_screens(config: ServiceConfig, profiles: ProfileSet) -> list[SpareScreen]:
    """The screens panes start with by default (each profile's backend and size), most
    used first: the template builds them blank ahead, once, for every fork to share."""
    counts: dict[tuple[str, int, int], int] = {}
    for name in profiles.names():
        profile = profiles.get(name)
        key = (profile.emulator or config.emulator, profile.cols, profile.rows)
        counts[key] = counts.get(key, 0) + 1
    ranked = sorted(counts, key=lambda key: -counts[key])[:MAX_SPARE_SCREENS]
    return [SpareScreen(emulator=e, cols=c, rows=r) for e, c, r in ranked]


class PaneService:
    """The supervisor's pane core; see the module docstring."""

    def __init__(
        self,
        config: ServiceConfig,
        profiles: ProfileSet,
        endpoint: str,
        watchdog_period_s: float = DEFAULT_PERIOD_S,
        pane_env: Mapping[str, str] | None = None,
        ctl_socket: str | None = None,
    ) -> None:
        """``ctl_socket``: the service's ctl socket, bound into every confined pane."""
        self.config = config
        self.profiles = profiles
        self.registry = PaneRegistry()
        heartbeat_s = heartbeat_period(config.heartbeat_loss_s)
        self.template = TemplateManager(
            config.state_dir,
            # The worker socket's own private directory (ipc://DIR/supervisor.ipc).
            Path(endpoint.removeprefix("ipc://")).parent,
            config.environ,
            enabled=config.worker_template,
            orphan_after_s=orphan_after(heartbeat_s),
            orphan_grace_s=config.orphan_grace_s,
            preload=_backends(config, profiles),
            spares=spare_screens(config, profiles),
        )
        self.workers = WorkerManager(
            endpoint,
            self.registry.on_worker_event,
            self._on_death,
            heartbeat_loss_s=config.heartbeat_loss_s,
            template=self.template,
            on_forks_settled=self._sweep,
        )
        self.records = PaneRecords(config.state_dir)
        runtime_dir = Path(endpoint.removeprefix("ipc://")).parent
        self.confiner = PaneConfiner(
            HostSupport(None, "not checked yet"),
            confine_choice(config.confine),
            runtime_dir,
            service_paths(config, runtime_dir),
            ctl_socket,
        )
        self.lifecycle = PaneLifecycle(
            config,
            self.registry,
            self.workers,
            self.records,
            lambda: self.profiles,
            self.confiner,
            pane_env=pane_env,
        )
        self.driver = PaneDriver(self.registry, self.workers)
        self.children = ManagedChildren()
        self.watchdog = Watchdog(self.registry, self.driver, period_s=watchdog_period_s)
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Become a subreaper, bind the worker socket, re-adopt surviving panes, then
        start the sweeper and the watchdog."""
        orphans.become_subreaper()
        self.confiner.support = await asyncio.to_thread(check_host, self.config.environ)
        log.info("confinement: %s", self.confiner.support.detail)
        self.workers.bind()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGCHLD, self._sweep)
        self._sweeper = loop.create_task(self._sweep_loop(), name="leftover-sweeper")
        await self.template.start()
        await self.lifecycle.readopt()
        self.watchdog.start()

    async def stop(self, keep_panes: bool = False) -> None:
        """Close every pane (unless ``keep_panes``), then the worker socket."""
        # First, so that no nudge is typed into a pane that is being closed.
        await self.watchdog.stop()
        await self.lifecycle.stop(keep_panes)
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        await self.children.close()
        await self.template.stop(keep=keep_panes)
        asyncio.get_running_loop().remove_signal_handler(signal.SIGCHLD)
        await self.workers.close()

    def replace_profiles(self, profiles: ProfileSet) -> None:
        """Use a new launch policy for panes started from now on."""
        self.profiles = profiles

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_INTERVAL_S)
            self._sweep()

    def _managed_pids(self) -> set[int]:
        # Workers, templates and running helpers: every other child is a leftover.
        return self.workers.managed_pids() | self.template.pids() | self.children.pids()

    def _sweep(self) -> None:
        orphans.sweep_leftovers(self._managed_pids, spare_live=self.workers.forking())

    def _on_death(self, handle: WorkerHandle) -> None:
        killed = orphans.kill_recorded(handle.session_id, handle.descendants)
        killed |= orphans.sweep_leftovers(
            self._managed_pids, already=killed, spare_live=self.workers.forking()
        )
        unproven = self.registry.worker_died(handle, len(killed))
        if unproven is not None:
            # A re-adopted worker that died before it introduced itself: it did not
            # survive the restart, as if its pid had been gone at adoption.
            self.lifecycle.forget_unproven(unproven)
