"""The feed hub: worker frames and pane statuses fanned out to any number of viewers.

A viewer watches one pane (its statuses and screens) or every pane (statuses only). The
first viewer of a pane subscribes its worker (``SubscribeScreen``), the last one to leave
unsubscribes it, so an unwatched pane renders nothing; a worker that re-introduces
itself (it thought the supervisor gone) is subscribed again while it has viewers.

Nothing here waits on a viewer. Every push is a synchronous store into the viewer's
mailbox: the newest screen replaces an unsent one (coalesced) and each pane's newest
status replaces its unsent one, so a mailbox holds at most one screen and one status
per pane, and a slow viewer gets fewer frames, never more memory. A new viewer of a
watched pane gets the latest frame at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from protocol.errors import ErrorCode, PanewardenError
from protocol.messages import ScreenFrame, SubscribeScreen, UnsubscribeScreen
from supervisor.front.feed.events import screen_event, status_event
from supervisor.panes.pane import Pane
from supervisor.panes.service import PaneService

log = logging.getLogger(__name__)

# Viewers at once, over every transport (each costs a mailbox and a stream).
MAX_VIEWERS = 64
SUBSCRIBE_TIMEOUT_S = 5.0

Event = tuple[str, dict[str, Any]]


class Viewer:
    """One viewer's mailbox; see the module docstring."""

    def __init__(self, pane: str | None, instance: str | None = None) -> None:
        self.pane = pane
        # The watched pane's worker instance: a later pane of the same name is another.
        self.instance = instance
        self._statuses: dict[str, dict[str, Any]] = {}
        self._screen: dict[str, Any] | None = None
        self._ready = asyncio.Event()
        self.ended = False

    def push_status(self, event: dict[str, Any]) -> None:
        self._statuses.pop(event["pane"], None)
        self._statuses[event["pane"]] = event
        if self.pane is not None and event["removed"]:
            self.ended = True
        self._ready.set()

    def push_screen(self, event: dict[str, Any]) -> None:
        self._screen = event
        self._ready.set()

    def end(self) -> None:
        self.ended = True
        self._ready.set()

    async def next(self, timeout_s: float) -> list[Event]:
        """The events waiting, statuses first; [] after ``timeout_s`` without any, or once
        the feed ended and everything was taken."""
        if not self._statuses and self._screen is None and not self.ended:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ready.wait(), timeout_s)
        self._ready.clear()
        events: list[Event] = [("status", e) for e in self._statuses.values()]
        self._statuses.clear()
        if self._screen is not None:
            events.append(("screen", self._screen))
            self._screen = None
        return events


class FeedHub:
    """Viewers, per-pane watch counts and each watched pane's latest frame (both by worker
    instance: a pane removed and started again under its name is another pane)."""

    def __init__(self, service: PaneService) -> None:
        self._service = service
        self._viewers: set[Viewer] = set()
        self._watching: dict[str, int] = {}
        self._frames: dict[str, dict[str, Any]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        service.registry.on_change(self._on_change)
        service.registry.on_screen_frame(self._on_frame)

    async def open(self, pane: str | None) -> Viewer:
        """A viewer of ``pane`` (None: every pane's status), with the current statuses
        (and the latest frame) waiting in its mailbox.

        Raises:
            PanewardenError: ``not_found`` for an unknown pane, ``pane_limit`` past
                ``MAX_VIEWERS``.
        """
        if len(self._viewers) >= MAX_VIEWERS:
            raise PanewardenError(
                ErrorCode.PANE_LIMIT, f"the limit of {MAX_VIEWERS} feed viewers is reached"
            )
        registry = self._service.registry
        panes = [await registry.ready(pane)] if pane is not None else await registry.ready_all()
        instance = panes[0].handle.instance if pane is not None else None
        viewer = Viewer(pane, instance)
        for each in panes:
            viewer.push_status(status_event(each))
        self._viewers.add(viewer)
        if instance is not None:
            count = self._watching.get(instance, 0) + 1
            self._watching[instance] = count
            frame = self._frames.get(instance)
            if frame is not None:
                viewer.push_screen(frame)
            if count == 1:
                await self._tell(panes[0], subscribe=True)
        return viewer

    def close(self, viewer: Viewer) -> None:
        """Forget ``viewer``; the last viewer of a pane unsubscribes its worker."""
        if viewer not in self._viewers:
            return
        self._viewers.discard(viewer)
        instance = viewer.instance
        if instance is None:
            return
        count = self._watching.get(instance, 0) - 1
        if count > 0:
            self._watching[instance] = count
            return
        self._watching.pop(instance, None)
        self._frames.pop(instance, None)
        pane = self._service.registry.by_instance(instance)
        if pane is not None:
            self._spawn(self._tell(pane, subscribe=False))

    def end_viewers(self) -> None:
        """End every viewer's feed (the service stops): its stream finishes cleanly."""
        for viewer in list(self._viewers):
            viewer.end()

    async def stop(self) -> None:
        """End every viewer and wait for the (un)subscriptions in flight."""
        self.end_viewers()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=SUBSCRIBE_TIMEOUT_S)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _tell(self, pane: Pane, subscribe: bool) -> None:
        make = SubscribeScreen if subscribe else UnsubscribeScreen
        try:
            await self._service.workers.request(
                pane.handle, lambda rid: make(rid=rid), SUBSCRIBE_TIMEOUT_S
            )
        except PanewardenError as exc:
            # A pane whose worker is gone has no screen to send; its status says why.
            log.info("screen feed: %s", exc.message, extra={"pane": pane.name})

    def _on_change(self, pane: Pane, introduced: bool) -> None:
        event = status_event(pane)
        instance = pane.handle.instance
        for viewer in self._viewers:
            if viewer.pane is None or viewer.instance == instance:
                viewer.push_status(event)
        if introduced and self._watching.get(instance) and not pane.removed:
            self._spawn(self._tell(pane, subscribe=True))

    def _on_frame(self, pane: Pane, frame: ScreenFrame) -> None:
        instance = pane.handle.instance
        if not self._watching.get(instance):
            return
        event = screen_event(pane.name, frame)
        self._frames[instance] = event
        for viewer in self._viewers:
            if viewer.instance == instance:
                viewer.push_screen(event)
