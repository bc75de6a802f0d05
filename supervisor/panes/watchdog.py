"""The per-profile watchdog: nudge panes whose finished turn sits untouched (docs/design.md §5).

Every ``period_s`` (5 s by default) one pass looks at each pane whose profile has a
``watchdog`` table. A pane is nudged, i.e. the profile's ``nudge_text`` is typed and
submitted through ``PaneService.send_input`` (so the worker's atomic refusals apply),
when all of these hold:

- the pane is ``running``, not leased, not being removed, and its turn is finished:
  state ``done``, or ``idle`` after at least one turn. ``cancelled`` and ``error`` are
  not finished turns here: a cancel is someone's deliberate stop (``deny_once`` or
  Ctrl-C) and an erroring agent is not helped by being prodded. ``idle`` at turn 0 is a
  fresh pane that was never given work. ``blocked`` is never nudged;
- its status ``seq`` has not changed for ``idle_timeout_secs`` (measured from the pass
  that first saw that ``seq``, or from the last nudge, whichever is later, so the
  watchdog's own view is up to one period late);
- when ``todo_file`` is set, that file still has an unchecked task-list item
  (``- [ ]``; also ``*``, ``+`` or ``1.`` as the marker). A missing or unreadable file
  means no nudge and is logged once until it becomes readable again;
- fewer than ``max_consecutive_nudges`` nudges went in since the last outside progress.

Outside progress is a new turn the watchdog did not cause. A nudge is sent with
``expect_turn`` set to the settled turn, so it can only start the next turn; that turn is
the nudge's own and keeps the count. Any other new turn (a client's ``send_input``, or a
jump of more than one turn) resets the count and lifts a give-up. Once the cap is reached
and the pane is due again, the watchdog gives up on it, logs that once, and waits for
outside progress; ``on_give_up`` listeners (the notifier) hear of it then. A refusal
from ``send_input`` (blocked, not running, turn moved on, worker lost) only skips
that check.

A pane keeps the watchdog settings its profile had when it started (a SIGHUP reload does
not change running panes). Nudges and give-ups are logged with ``extra={"pane": name}``;
the nudge text is operator configuration and is left out of the logs.

``clock`` is injectable so tests can move time past the (at least 10 s) idle timeout
without waiting for it; ``wait_passes`` lets a test or a diagnostic wait for complete
passes instead of sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from protocol.errors import ErrorCode, PanewardenError
from protocol.messages import PaneStatusFields
from protocol.safe_files import FileReadError, read_regular_file
from supervisor.panes.pane import Pane

log = logging.getLogger(__name__)

DEFAULT_PERIOD_S = 5.0
# A todo list is small; the bound keeps a mistaken path (a log file, say) from being
# read whole every period.
TODO_FILE_LIMIT_BYTES = 4 * 1024 * 1024
# A GitHub-style task-list item: a bullet or ordered-list marker, then `[ ]` and a space
# or the line's end.
UNCHECKED_ITEM = re.compile(r"^[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t]+\[ \](?=\s|$)", re.MULTILINE)


class PaneDirectory(Protocol):
    """Where the watchdog finds the panes (``PaneRegistry`` satisfies it)."""

    @property
    def panes(self) -> Mapping[str, Pane]:
        """The live panes by name."""
        ...


class NudgeTarget(Protocol):
    """How the watchdog types into a pane (``PaneDriver`` satisfies it)."""

    async def send_input(
        self, name: str, text: str, submit: bool, expect_turn: int | None
    ) -> tuple[int, int]:
        """Type text into a pane with the usual refusals; returns (seq, turn)."""
        ...


@dataclass
class _Tracked:
    """What the watchdog remembers about one pane between passes."""

    pane: Pane
    seq: int
    turn: int
    since: float
    nudges: int = 0
    # The turn the last nudge may start; the first new turn seen consumes it.
    own_turn: int | None = None
    gave_up: bool = False
    todo_trouble: bool = False


def finished_turn(status: PaneStatusFields) -> bool:
    """True when ``status`` is a turn the watchdog may nudge past (see module docstring)."""
    return status.state == "done" or (status.state == "idle" and status.turn >= 1)


def has_unchecked_item(text: str) -> bool:
    """True when a Markdown task list in ``text`` still has an open ``[ ]`` item."""
    return UNCHECKED_ITEM.search(text) is not None


class Watchdog:
    """Checks watched panes every ``period_s`` and nudges the idle ones."""

    def __init__(
        self,
        panes: PaneDirectory,
        typist: NudgeTarget,
        *,
        period_s: float = DEFAULT_PERIOD_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not period_s > 0:
            raise ValueError("period_s must be positive")
        self._panes = panes
        self._typist = typist
        self._period_s = period_s
        self._clock = clock
        self._tracked: dict[str, _Tracked] = {}
        self._task: asyncio.Task[None] | None = None
        self._started = 0
        self._finished = 0
        self._pass_done = asyncio.Event()
        self._give_up_listeners: list[Callable[[Pane], None]] = []

    def on_give_up(self, listener: Callable[[Pane], None]) -> None:
        """Call ``listener`` with a pane each time the watchdog gives up on it."""
        self._give_up_listeners.append(listener)

    @property
    def period_s(self) -> float:
        """Seconds between passes."""
        return self._period_s

    def start(self) -> None:
        """Start the periodic task (call from the running loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="watchdog")

    async def stop(self) -> None:
        """Stop the periodic task; a nudge in flight is abandoned."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def wait_passes(self, count: int = 1) -> None:
        """Return once ``count`` passes that began after this call have completed."""
        target = self._started + count
        while self._finished < target:
            await self._pass_done.wait()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._period_s)
            try:
                await self.check()
            except Exception:
                # One bad pass must not end the watchdog for every pane.
                log.exception("watchdog pass failed")

    async def check(self) -> None:
        """One pass over every watched pane."""
        self._started += 1
        try:
            now = self._clock()
            watched = {n: p for n, p in self._panes.panes.items() if p.watchdog is not None}
            for name in [n for n, t in self._tracked.items() if watched.get(n) is not t.pane]:
                # Removed, or a new pane reusing the name: its history is not this one's.
                del self._tracked[name]
            due: list[_Tracked] = []
            for name, pane in watched.items():
                tracked = self._tracked.get(name)
                if tracked is None:
                    tracked = _Tracked(pane, pane.status.seq, pane.status.turn, now)
                    self._tracked[name] = tracked
                self._observe(tracked, now)
                if self._due(tracked, now):
                    due.append(tracked)
            await asyncio.gather(*(self._consider(t) for t in due))
        finally:
            self._finished += 1
            event, self._pass_done = self._pass_done, asyncio.Event()
            event.set()

    def _observe(self, tracked: _Tracked, now: float) -> None:
        status = tracked.pane.status
        if status.seq == tracked.seq:
            return
        if status.turn > tracked.turn:
            ours = tracked.own_turn is not None and status.turn == tracked.own_turn
            tracked.own_turn = None
            if not ours:
                if tracked.nudges or tracked.gave_up:
                    log.info(
                        "watchdog: outside progress, nudge count reset",
                        extra={"pane": tracked.pane.name},
                    )
                tracked.nudges = 0
                tracked.gave_up = False
            tracked.turn = status.turn
        tracked.seq = status.seq
        tracked.since = now

    def _due(self, tracked: _Tracked, now: float) -> bool:
        config = tracked.pane.watchdog
        return (
            config is not None
            and not tracked.gave_up
            and _nudgeable(tracked.pane)
            and now - tracked.since >= config.idle_timeout_secs
        )

    async def _consider(self, tracked: _Tracked) -> None:
        pane = tracked.pane
        config = pane.watchdog
        assert config is not None
        try:
            if config.todo_file is not None and not await self._todo_open(
                tracked, config.todo_file
            ):
                return
            if tracked.nudges >= config.max_consecutive_nudges:
                tracked.gave_up = True
                log.warning(
                    "watchdog: giving up after %d nudges without outside progress",
                    tracked.nudges,
                    extra={"pane": pane.name},
                )
                for listener in self._give_up_listeners:
                    listener(pane)
                return
            # The todo read yielded to the loop: the pane may have moved on since.
            if not _nudgeable(pane) or pane.status.seq != tracked.seq:
                return
            await self._nudge(tracked, config.nudge_text)
        except Exception:
            log.exception("watchdog check failed", extra={"pane": pane.name})

    async def _nudge(self, tracked: _Tracked, text: str) -> None:
        pane = tracked.pane
        turn = pane.status.turn
        try:
            # No await between the checks above and this call: lease, closing and
            # lifecycle cannot change in between. Blocked and turn are checked again,
            # atomically, by the worker.
            await self._typist.send_input(pane.name, text, submit=True, expect_turn=turn)
        except PanewardenError as exc:
            if exc.code is not ErrorCode.DELIVERY_AMBIGUOUS:
                log.debug("watchdog nudge refused (%s)", exc.code.value, extra={"pane": pane.name})
                return
            # The text is typed but a dialog took the Enter's place: it counts, so a
            # pane that keeps doing this still reaches the cap.
            log.warning(
                "watchdog nudge typed but not submitted: a dialog appeared",
                extra={"pane": pane.name, "code": exc.code.value},
            )
        tracked.nudges += 1
        tracked.own_turn = turn + 1
        tracked.since = self._clock()
        config = pane.watchdog
        assert config is not None
        log.info(
            "watchdog nudged the pane (%d of %d)",
            tracked.nudges,
            config.max_consecutive_nudges,
            extra={"pane": pane.name},
        )

    async def _todo_open(self, tracked: _Tracked, path: str) -> bool:
        try:
            data = await asyncio.to_thread(
                read_regular_file, path, limit_bytes=TODO_FILE_LIMIT_BYTES
            )
        except FileReadError as exc:
            if not tracked.todo_trouble:
                tracked.todo_trouble = True
                log.warning(
                    "watchdog: cannot read todo file %s (%s); not nudging",
                    path,
                    exc.reason,
                    extra={"pane": tracked.pane.name},
                )
            return False
        tracked.todo_trouble = False
        return has_unchecked_item(data.decode("utf-8", errors="replace"))


def _nudgeable(pane: Pane) -> bool:
    return (
        not pane.removed
        and not pane.closing
        and pane.lease is None
        and pane.status.lifecycle == "running"
        and finished_turn(pane.status)
    )
