"""The screen feed: ``ScreenFrame`` pushes of the visible screen while someone watches.

The supervisor subscribes when a first viewer attaches and unsubscribes when the last
leaves; an unwatched pane renders nothing. While subscribed, the loop calls
:meth:`ScreenFeed.step` once per step: a frame goes out when the screen (text, colours
or cursor) changed, at most once per interval, so a burst of output becomes one frame
(coalesced, never queued). The interval is ``MIN_INTERVAL_S`` or, when rendering is
slow (a large screen on a slow backend), ``RENDER_BUDGET`` times the last render's
cost: a watched pane spends at most about 1/``RENDER_BUDGET`` of its time rendering,
however busy it is. The first frame after a subscription goes out at once.

Frames are sent without blocking (the link drops on a full queue); the supervisor
coalesces again per viewer, so a slow viewer only ever costs frames, never memory.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from paneworker.screen.terminal import Terminal
from protocol.messages import ScreenFrame, ToSupervisor

# The shortest gap between two frames (a viewer sees a change within about this long).
MIN_INTERVAL_S = 0.05
# Rendering may take at most 1/RENDER_BUDGET of the worker's time.
RENDER_BUDGET = 10
# A coloured frame larger than this is sent as plain text (the protocol bound is 1 MiB).
MAX_FRAME_CHARS = 400_000


class ScreenFeed:
    """Whether the pane is watched, and when its next frame is due."""

    def __init__(
        self,
        terminal: Callable[[], Terminal],
        send: Callable[[ToSupervisor], object],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``terminal``: the pane's current terminal; ``send``: the link, non-blocking."""
        self._terminal = terminal
        self._send = send
        self._clock = clock
        self.subscribed = False
        self._frame = 0
        self._sent_key: tuple[int, tuple[int, int], int, int] | None = None
        self._next_at = 0.0

    def subscribe(self) -> None:
        """Start pushing; the next step sends a full frame at once."""
        self.subscribed = True
        self._sent_key = None
        self._next_at = 0.0

    def unsubscribe(self) -> None:
        """Stop pushing (also when a supervisor may have restarted: it re-subscribes)."""
        self.subscribed = False
        self._sent_key = None

    def _key(self) -> tuple[int, tuple[int, int], int, int]:
        t = self._terminal()
        return (t.text_generation, t.cursor, t.cols, t.rows)

    def deadline(self) -> float | None:
        """When a step must run to send a changed screen, or None (nothing to send)."""
        if not self.subscribed or self._key() == self._sent_key:
            return None
        return self._next_at

    def step(self) -> None:
        """Send a frame if the screen changed and the interval has passed."""
        if not self.subscribed:
            return
        now = self._clock()
        if now < self._next_at:
            return
        key = self._key()
        if key == self._sent_key:
            return
        started = time.perf_counter()
        frame = self.render()
        cost = time.perf_counter() - started
        self._send(frame)
        self._sent_key = key
        self._next_at = now + max(MIN_INTERVAL_S, RENDER_BUDGET * cost)

    def render(self) -> ScreenFrame:
        """The current visible screen as a frame."""
        t = self._terminal()
        self._frame += 1
        lines = t.styled_lines()
        plain = sum(map(len, lines)) > MAX_FRAME_CHARS
        if plain:
            lines = [line[: t.cols] for line in t.display_lines()]
        return ScreenFrame(
            frame=self._frame, cols=t.cols, rows=t.rows, cursor=t.cursor, lines=lines, plain=plain
        )
