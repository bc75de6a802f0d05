"""An ACP session drawn for people and for ``read_output``: plain lines into the emulator.

The pane's emulator is the same as a terminal pane's, so ``read_output``,
``wait_output``, the screen feed and the live viewers need nothing new. What is drawn:
each prompt (``> …``), the agent's message chunks as they stream, its thoughts (dim),
tool calls and every status change of theirs, permission requests with their options
and the answer given, plans, and panewarden's own notes (``[panewarden] …``).

Agent text is the agent's, not a terminal stream: every control character but newline
and tab is dropped (ESC included), so nothing an agent says can move the cursor, set a
title or forge an OSC 7501 status record. Newlines become CR LF. Every method here cleans
what it is given itself: no caller has to remember which strings are the agent's.
"""

from __future__ import annotations

import re
from collections.abc import Callable

# C0 controls but \t and \n, DEL, and the C1 range.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_DIM, _BOLD, _RESET = "\x1b[2m", "\x1b[1m", "\x1b[0m"
# How much of a tool's title or a plan entry is drawn.
TITLE_CHARS = 200
# How much of the agent's stderr tail is drawn when its session breaks.
STDERR_LINES = 20
STDERR_LINE_CHARS = 200


def clean(text: str) -> str:
    """``text`` without control characters (newline and tab kept)."""
    return _CONTROLS.sub("", text)


class Renderer:
    """Writes the session's events as bytes for the pane's terminal."""

    def __init__(self, write: Callable[[bytes], None]) -> None:
        self._write = write
        # True while the cursor is not at the start of a line (a chunk stream is open).
        self._mid_line = False
        self._streaming: str | None = None

    def _emit(self, text: str) -> None:
        if text:
            self._write(text.replace("\n", "\r\n").encode())

    def _line(self, text: str, style: str = "") -> None:
        """A whole line of our own, after closing any open stream."""
        self._close_stream()
        self._emit(f"{style}{text}{_RESET if style else ''}\n")

    def _close_stream(self) -> None:
        if self._mid_line:
            self._emit("\n")
            self._mid_line = False
        self._streaming = None

    def _stream(self, kind: str, text: str, style: str = "") -> None:
        text = clean(text)
        if not text:
            return
        if self._streaming != kind:
            self._close_stream()
            self._streaming = kind
        self._emit(f"{style}{text}{_RESET if style else ''}")
        self._mid_line = not text.endswith("\n")

    # ------------------------------------------------------------ events

    def note(self, text: str) -> None:
        """panewarden's own line."""
        self._line(f"[panewarden] {clean(text)}", _DIM)

    def prompt(self, text: str) -> None:
        """The client's prompt, as sent."""
        self._line(f"> {clean(text)}", _BOLD)

    def message(self, text: str) -> None:
        """A chunk of the agent's reply."""
        self._stream("message", text)

    def thought(self, text: str) -> None:
        """A chunk of the agent's thinking."""
        self._stream("thought", text, _DIM)

    def tool(self, title: str, status: str) -> None:
        """A tool call, or a change of its status."""
        self._line(f"[tool] {clean(title)[:TITLE_CHARS]} ({clean(status)[:40]})")

    def permission(self, title: str, options: list[tuple[str, str]]) -> None:
        """A permission request and its options (kind, name)."""
        shown = ", ".join(f"{clean(name)[:60]} [{clean(kind)[:20]}]" for kind, name in options)
        self._line(f"[permission] {clean(title)[:TITLE_CHARS]}: {shown}", _BOLD)

    def answered(self, title: str, what: str) -> None:
        """The answer given to the permission request about ``title`` (the agent's)."""
        self._line(f"[permission] {clean(title)[:TITLE_CHARS]}: {clean(what)}")

    def stderr(self, text: str) -> None:
        """The agent's last words on stderr, when its session broke or did not start."""
        for row in clean(text).splitlines()[-STDERR_LINES:]:
            self._line(f"[stderr] {row[:STDERR_LINE_CHARS]}", _DIM)

    def plan(self, entries: list[tuple[str, str]]) -> None:
        """The agent's plan (status, content)."""
        self._line("[plan]")
        for status, content in entries:
            mark = {"completed": "x", "in_progress": "~"}.get(status, " ")
            self._line(f"  [{mark}] {clean(content)[:TITLE_CHARS]}")

    def turn_end(self, text: str) -> None:
        """The end of a turn (its stop reason)."""
        self._line(f"[{clean(text)}]", _DIM)
