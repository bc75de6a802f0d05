"""The notifier: one bounded queue and one sender task per target, off the service's path.

``emit`` only appends to the queues of the targets that want the event and returns; a
sender task per target delivers its queue in order. So a slow, failing or hanging
endpoint delays nothing but its own later notifications:

- each queue holds at most ``QUEUE_LIMIT`` events; a full queue drops its **oldest**
  event (the newest says most about the pane now) and counts it as dropped;
- a webhook attempt is bounded by ``CONNECT_TIMEOUT_S`` to connect and
  ``TOTAL_TIMEOUT_S`` in all, and only its status is used: ``identity`` is asked and
  at most ``RESPONSE_READ_BYTES`` of the body are read, undecoded; a command by
  ``COMMAND_TIMEOUT_S``, then its process group is killed and reaped
  (``ManagedChildren``, injected as ``run_command``);
- an event is tried ``ATTEMPTS`` times in all, after ``BACKOFF_S`` then twice that;
  only a timeout, a transport error, a 5xx or a 429 is retried. An event that never got
  through is counted as failed.

``report`` is the ``notifications`` object of ``service_status``. ``replace`` swaps in a
reloaded file: the old targets' senders stop, what they still held counts as dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx2

from protocol.errors import PanewardenError
from protocol.messages import PaneStatusFields
from supervisor.notify.config import CommandTarget, NotifyConfig, Target, WebhookTarget
from supervisor.notify.events import PaneRef, event_body, status_events

log = logging.getLogger(__name__)

QUEUE_LIMIT = 64
CONNECT_TIMEOUT_S = 2.0
TOTAL_TIMEOUT_S = 5.0
# How much of a webhook's answer is read (raw) before the connection is dropped.
RESPONSE_READ_BYTES = 4096
COMMAND_TIMEOUT_S = 10.0
ATTEMPTS = 3
BACKOFF_S = 0.5
# What a command may print: kept only to be dropped (a command's output goes nowhere).
COMMAND_OUTPUT_LIMIT = 4096

# The only variables a command gets: enough to find programs and reach a desktop session.
COMMAND_ENV_PASSED = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "DBUS_SESSION_BUS_ADDRESS",
    "XDG_RUNTIME_DIR",
)
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"

# Runs a command target: (argv, stdin bytes) -> (returncode, timed out).
CommandRunner = Callable[[Sequence[str], bytes], Awaitable[tuple[int, bool]]]


def command_env(environ: Mapping[str, str]) -> dict[str, str]:
    """A command's environment: ``COMMAND_ENV_PASSED`` from the service's, nothing else."""
    env = {name: environ[name] for name in COMMAND_ENV_PASSED if name in environ}
    env.setdefault("PATH", DEFAULT_PATH)
    return env


@dataclass
class _Counts:
    sent: int = 0
    failed: int = 0
    dropped: int = 0
    timeouts: int = 0

    def add(self, other: _Counts) -> None:
        self.sent += other.sent
        self.failed += other.failed
        self.dropped += other.dropped
        self.timeouts += other.timeouts


@dataclass
class _Lane:
    """One target's queue, sender and figures."""

    target: Target
    queue: deque[bytes] = field(default_factory=lambda: deque(maxlen=QUEUE_LIMIT))
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    counts: _Counts = field(default_factory=_Counts)
    in_flight: bool = False
    task: asyncio.Task[None] | None = None

    @property
    def queued(self) -> int:
        return len(self.queue) + self.in_flight


class _Retry(Exception):
    """This attempt failed in a way worth another one."""


class _GiveUp(Exception):
    """This attempt failed in a way another one would not mend."""


class Notifier:
    """Delivers pane events to the configured targets; see the module docstring."""

    def __init__(
        self,
        config: NotifyConfig,
        service: str,
        run_command: CommandRunner,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._config = config
        self._service = service
        self._run_command = run_command
        self._clock = clock
        self._lanes: list[_Lane] = []
        self._retired = _Counts()
        self._http: httpx2.AsyncClient | None = None

    async def start(self) -> None:
        """Open the HTTP client and start a sender per target."""
        self._http = httpx2.AsyncClient(
            timeout=httpx2.Timeout(TOTAL_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
            follow_redirects=False,
            # Proxies and netrc from the environment are not the operator's intent here.
            trust_env=False,
        )
        self._start_lanes(self._config)

    async def stop(self) -> None:
        """Stop every sender (what is still queued counts as dropped); close the client."""
        await self._retire_lanes()
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def replace(self, config: NotifyConfig) -> None:
        """Use a reloaded notifications file from now on."""
        await self._retire_lanes()
        self._config = config
        self._start_lanes(config)

    # ------------------------------------------------------------ events

    def status_changed(self, pane: PaneRef, old: PaneStatusFields, new: PaneStatusFields) -> None:
        """A pane recorded ``new`` after ``old``: emit the events that change is."""
        for event in status_events(old, new):
            self.emit(event, pane, new)

    def emit(self, event: str, pane: PaneRef, status: PaneStatusFields) -> None:
        """Queue ``event`` for every target that wants it; never waits."""
        lanes = [lane for lane in self._lanes if event in lane.target.events]
        if not lanes:
            return
        body = event_body(event, self._service, pane, status, self._clock())
        for lane in lanes:
            if len(lane.queue) == QUEUE_LIMIT:
                lane.counts.dropped += 1  # the deque drops its oldest on append
            lane.queue.append(body)
            lane.wake.set()

    def report(self) -> dict[str, Any]:
        """The ``notifications`` object of ``service_status``."""
        total = _Counts()
        total.add(self._retired)
        targets = []
        for lane in self._lanes:
            total.add(lane.counts)
            kind = "webhook" if isinstance(lane.target, WebhookTarget) else "command"
            targets.append(
                {
                    "kind": kind,
                    "target": lane.target.label,
                    "events": sorted(lane.target.events),
                    "sent": lane.counts.sent,
                    "failed": lane.counts.failed,
                    "dropped": lane.counts.dropped,
                    "timeouts": lane.counts.timeouts,
                    "queued": lane.queued,
                }
            )
        return {
            "targets": len(self._lanes),
            "sent": total.sent,
            "failed": total.failed,
            "dropped": total.dropped,
            "timeouts": total.timeouts,
            "queued": sum(lane.queued for lane in self._lanes),
            "by_target": targets,
        }

    # ------------------------------------------------------------ senders

    def _start_lanes(self, config: NotifyConfig) -> None:
        loop = asyncio.get_running_loop()
        self._lanes = [_Lane(target) for target in config.targets]
        for i, lane in enumerate(self._lanes):
            lane.task = loop.create_task(self._send_loop(lane), name=f"notify-{i}")

    async def _retire_lanes(self) -> None:
        lanes, self._lanes = self._lanes, []
        for lane in lanes:
            if lane.task is not None:
                lane.task.cancel()
        for lane in lanes:
            if lane.task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await lane.task
            lane.counts.dropped += lane.queued
            self._retired.add(lane.counts)

    async def _send_loop(self, lane: _Lane) -> None:
        while True:
            while not lane.queue:
                lane.wake.clear()
                await lane.wake.wait()
            body = lane.queue.popleft()
            lane.in_flight = True
            try:
                await self._deliver(lane, body)
            finally:
                lane.in_flight = False

    async def _deliver(self, lane: _Lane, body: bytes) -> None:
        """Try ``body`` up to ``ATTEMPTS`` times; count it sent or failed."""
        reason = "?"
        for attempt in range(ATTEMPTS):
            if attempt:
                await asyncio.sleep(BACKOFF_S * 2 ** (attempt - 1))
            try:
                await self._attempt(lane, body)
            except _Retry as exc:
                reason = str(exc)
                continue
            except _GiveUp as exc:
                reason = str(exc)
                break
            lane.counts.sent += 1
            return
        lane.counts.failed += 1
        log.warning("notification to %s failed: %s", lane.target.label, reason)

    async def _attempt(self, lane: _Lane, body: bytes) -> None:
        target = lane.target
        if isinstance(target, CommandTarget):
            await self._attempt_command(lane, target, body)
        else:
            await self._attempt_webhook(lane, target, body)

    async def _attempt_webhook(self, lane: _Lane, target: WebhookTarget, body: bytes) -> None:
        assert self._http is not None
        headers = {
            **dict(target.headers),
            "Content-Type": "application/json",
            "Accept-Encoding": "identity",
        }
        try:
            async with (
                asyncio.timeout(TOTAL_TIMEOUT_S),
                self._http.stream("POST", target.url, content=body, headers=headers) as response,
            ):
                # Only the status counts: at most RESPONSE_READ_BYTES of the body are read,
                # raw (never decoded), so a compressed or endless answer costs that bound.
                seen = 0
                async for chunk in response.aiter_raw():
                    seen += len(chunk)
                    if seen >= RESPONSE_READ_BYTES:
                        break
        except (TimeoutError, httpx2.TimeoutException):
            lane.counts.timeouts += 1
            raise _Retry("timed out") from None
        except httpx2.HTTPError as exc:
            raise _Retry(type(exc).__name__) from None
        code = response.status_code
        if 200 <= code < 300:
            return
        if code >= 500 or code == 429:
            raise _Retry(f"HTTP {code}")
        raise _GiveUp(f"HTTP {code}")

    async def _attempt_command(self, lane: _Lane, target: CommandTarget, body: bytes) -> None:
        try:
            returncode, timed_out = await self._run_command(target.argv, body)
        except PanewardenError as exc:  # it cannot be started: another try will not help
            raise _GiveUp(exc.message) from None
        if timed_out:
            lane.counts.timeouts += 1
            raise _Retry(f"killed after {COMMAND_TIMEOUT_S:.0f}s")
        if returncode != 0:
            raise _Retry(f"exit status {returncode}")
