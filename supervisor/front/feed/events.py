"""The feed's events, one contract for the HTTP stream and the operator socket.

Each event has a name and a JSON object:

- ``status``: one pane's status and who drives it: ``pane``, ``lifecycle``, ``state``,
  ``kind``, ``turn``, ``seq``, ``source``, ``exit_code``, ``profile``, ``agent``,
  ``confined``, ``lease`` (``{lease_id, lease_type, controller_id}`` or null) and
  ``removed`` (true once: the pane left the service; a pane feed then ends);
- ``screen``: one pane's visible screen: ``pane``, ``frame``, ``cols``, ``rows``,
  ``cursor`` ([row, col], 0-based), ``lines`` (one ANSI line per row, SGR only, each
  starting and ending in the default style, cleaned by ``terminal_safe``: whatever the
  backend, no other control, bidi control or line separator reaches a viewer) and
  ``plain`` (true: no colours, the coloured frame was too large);
- ``error``: ``code`` and ``message`` (operator socket only: HTTP answers a status code
  before the stream starts).
"""

from __future__ import annotations

from typing import Any

from protocol.messages import ScreenFrame
from protocol.terminal_text import terminal_safe
from supervisor.front.tools.pane_tools import lease_info, status_dict
from supervisor.panes.pane import Pane

FEED_EVENTS = ("status", "screen", "error")


def status_event(pane: Pane) -> dict[str, Any]:
    """The ``status`` event of ``pane``: its PaneStatus (``pane`` names it), who runs it,
    its lease, and whether it was removed."""
    body = status_dict(pane.name, pane.status, pane.confined)
    body["pane"] = body.pop("name")
    return body | {
        "profile": pane.profile,
        "agent": pane.agent,
        "lease": lease_info(pane),
        "removed": pane.removed,
    }


def screen_event(pane: str, frame: ScreenFrame) -> dict[str, Any]:
    """The ``screen`` event of one frame."""
    return {
        "pane": pane,
        "frame": frame.frame,
        "cols": frame.cols,
        "rows": frame.rows,
        "cursor": list(frame.cursor),
        "lines": [terminal_safe(line, keep_sgr=True) for line in frame.lines],
        "plain": frame.plain,
    }
