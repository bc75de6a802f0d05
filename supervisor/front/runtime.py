"""Running the supervisor: state dir, lock, profiles, worker and ctl sockets, transport,
signals.

``serve`` is the one entry used by every transport. SIGTERM and SIGINT stop the
service gracefully (panes closed unless ``keep_panes``); SIGHUP reloads the
profiles file and the notifications file atomically (a bad file keeps the old one and
logs why).
Signal handlers only record; the loop does the work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from protocol.errors import PanewardenError
from supervisor.config import ServiceConfig
from supervisor.control.service import ControlService
from supervisor.front.ctl.attestation import Attestor
from supervisor.front.ctl.commands import ctl_commands
from supervisor.front.ctl.server import AuditCall, CtlServer
from supervisor.front.ctl.wire import CTL_SOCKET_NAME, CTL_SOCKET_VARIABLE
from supervisor.front.feed.hub import FeedHub
from supervisor.front.feed.operator_socket import OperatorSocket
from supervisor.front.feed.wire import OPERATOR_RECORD, OPERATOR_SOCKET_NAME
from supervisor.front.notifications import build_notifier, reload_notify
from supervisor.lanes.service import LaneService
from supervisor.notify.config import load_notify
from supervisor.notify.notifier import Notifier
from supervisor.panes.service import PaneService, demo_argv
from supervisor.profiles.policy import ProfileSet, load_profiles
from supervisor.store.statedir import (
    SupervisorLock,
    atomic_write,
    ensure_private_dir,
    runtime_socket_path,
)
from supervisor.workers.host_limits import raise_fd_limit

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def load_policy(config: ServiceConfig) -> ProfileSet:
    """Load the launch profiles named by the config (the built-in demo without a file),
    and raise the soft fd limit to what their ``max_panes`` needs."""
    profiles = load_profiles(config.profiles_path, demo_argv=demo_argv())
    limit = raise_fd_limit(profiles.max_panes)
    if limit.panes < profiles.max_panes:
        log.warning(
            "RLIMIT_NOFILE (soft %d, hard %d) holds %d panes, fewer than max_panes %d: "
            "raise the hard limit (docs/operations.md, Bounds)",
            limit.soft,
            limit.hard,
            limit.panes,
            profiles.max_panes,
        )
    elif limit.soft != limit.before:
        log.info("RLIMIT_NOFILE soft limit raised from %d to %d", limit.before, limit.soft)
    return profiles


@dataclass(frozen=True)
class Services:
    """The running service's cores: the panes, the authority over them, and who is told
    of their events."""

    panes: PaneService
    control: ControlService
    lanes: LaneService
    notifier: Notifier
    # The operator's screen feed (HTTP /feed, the operator socket).
    feed: FeedHub | None = None


@asynccontextmanager
async def running_service(
    config: ServiceConfig, keep_panes: bool = False, audit: AuditCall | None = None
) -> AsyncIterator[Services]:
    """Lock the state dir, start the pane and control cores, and stop them on exit.

    ``audit`` records each mutating ``panewarden ctl`` call (HTTP with an audit file).
    """
    state = ensure_private_dir(config.state_dir)
    lock = SupervisorLock(state)
    lock.acquire()
    try:
        profiles = load_policy(config)
        notify_settings = load_notify(config.notify_path)
        sock_path = runtime_socket_path(state, dict(config.environ))
        ensure_private_dir(sock_path.parent.parent)
        ensure_private_dir(sock_path.parent)
        sock_path.unlink(missing_ok=True)
        run_dir = ensure_private_dir(state / "run")
        atomic_write(run_dir / "endpoint", f"ipc://{sock_path}\n".encode())
        ctl_path = sock_path.with_name(CTL_SOCKET_NAME)
        service = PaneService(
            config,
            profiles,
            f"ipc://{sock_path}",
            watchdog_period_s=config.watchdog_period_s,
            pane_env={CTL_SOCKET_VARIABLE: str(ctl_path)},
            ctl_socket=str(ctl_path),
        )
        await service.start()
        control = ControlService(config, service)
        await control.start()
        notifier = build_notifier(config, notify_settings, control)
        await notifier.start()
        lanes = LaneService(control)
        await lanes.starters.sweep()
        ctl = CtlServer(
            ctl_path, Attestor(service.registry).identify, ctl_commands(control, lanes), audit
        )
        feed = FeedHub(service)
        operator = OperatorSocket(
            sock_path.with_name(OPERATOR_SOCKET_NAME), feed, Attestor(service.registry).identify
        )
        try:
            await ctl.start()
            atomic_write(run_dir / "ctl", f"{ctl_path}\n".encode())
            await operator.start()
            atomic_write(run_dir / OPERATOR_RECORD, f"{operator.path}\n".encode())
            yield Services(service, control, lanes, notifier, feed)
        finally:
            try:
                # First: no ctl call may start or wait on a pane that is being closed.
                (run_dir / "ctl").unlink(missing_ok=True)
                await ctl.stop()
                await lanes.starters.stop()
                (run_dir / OPERATOR_RECORD).unlink(missing_ok=True)
                await feed.stop()
                await operator.stop()
                await service.stop(keep_panes=keep_panes)
                await notifier.stop()
            finally:
                _release_stop_signals()
            sock_path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                # The socket's own directory (one per state dir) goes with it.
                sock_path.parent.rmdir()
    finally:
        lock.release()


def reload_profiles(service: PaneService, config: ServiceConfig) -> bool:
    """Swap in a freshly loaded profiles file; keep the old one if it is bad."""
    try:
        profiles = load_policy(config)
    except PanewardenError as exc:
        log.error(
            "profiles reload refused, keeping the old ones: %s",
            exc.message,
            extra={"code": exc.code.value},
        )
        return False
    service.replace_profiles(profiles)
    log.info("profiles reloaded: %s", ", ".join(profiles.names()) or "(none)")
    return True


async def serve_until_signalled(
    service: PaneService,
    config: ServiceConfig,
    serve: Callable[[], Awaitable[None]],
    on_reload: Callable[[], None] | None = None,
    on_stop: Callable[[], None] | None = None,
    notifier: Notifier | None = None,
) -> None:
    """Run ``serve`` until it returns or SIGTERM/SIGINT arrives; SIGHUP reloads (the
    profiles, and ``notifier``'s file).

    A stop signal calls ``on_stop`` (which must make ``serve`` return soon), or cancels
    ``serve`` when there is none. Stop signals stay handled (logged and ignored) after
    this returns, while the caller closes the panes: a client that sends SIGINT then
    SIGTERM must not kill the service in the middle of its stop. ``running_service``
    hands them back to the default when the service has stopped.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(serve())

    def stop(signum: int) -> None:
        log.info("stopping on signal %d", signum)
        if on_stop is not None:
            on_stop()
        else:
            task.cancel()

    reloads: set[asyncio.Task[bool]] = set()

    def reload() -> None:
        reload_profiles(service, config)
        if notifier is not None:
            # Its old senders are awaited while they stop: a task, kept until it ends.
            job = loop.create_task(reload_notify(notifier, config), name="notify-reload")
            reloads.add(job)
            job.add_done_callback(reloads.discard)
        if on_reload is not None:
            on_reload()

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop, sig)
    loop.add_signal_handler(signal.SIGHUP, reload)
    try:
        await task
    except asyncio.CancelledError:
        if not task.cancelled():
            raise
    finally:
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, _already_stopping, sig)
        loop.remove_signal_handler(signal.SIGHUP)


def _already_stopping(signum: int) -> None:
    log.info("already stopping (signal %d)", signum)


def _release_stop_signals() -> None:
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.remove_signal_handler(sig)
