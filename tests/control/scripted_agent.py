"""The demo agent with two delays real CLIs show, scripted for the coordination tests.

A prompt containing ``late-start`` is taken (echoed, Enter read) and the agent stays
``idle`` for ``LATE_START_S`` before its turn begins, so a relay waits for the turn
while the pane reads settled. A prompt containing ``late-draw`` reports ``done`` and
then draws its last lines over the next ``DRAW_STEPS * DRAW_STEP_S`` seconds, as Claude
Code reports its settle before it draws the reply; the last one is ``LAST_LINE``.

Run as a script (``python tests/control/scripted_agent.py [mark]``): the worker starts
it with a cleared environment, and the installed ``supervisor`` package is importable.
"""

from __future__ import annotations

import sys

import supervisor.demo.agent as demo

LATE_START_S = 1.5
# Each step well below the capture rule's quiet (0.3 s), so the reply is still being
# drawn when the quiet wait looks; all of them well within its 2 s bound.
DRAW_STEPS = 5
DRAW_STEP_S = 0.12
LAST_LINE = "the reply, drawn last"


class ScriptedAgent(demo.DemoAgent):
    """``DemoAgent`` with a late turn start and a late-drawn reply (see the module)."""

    def _turn(self, text: str) -> None:
        if "late-start" in text:
            self._keys.wait(LATE_START_S)
        super()._turn(text)
        if "late-draw" in text:
            for step in range(1, DRAW_STEPS + 1):
                self._keys.wait(DRAW_STEP_S)
                last = step == DRAW_STEPS
                self._write((LAST_LINE if last else f"drawing ({step}/{DRAW_STEPS})") + "\r\n")


if __name__ == "__main__":
    demo.DemoAgent = ScriptedAgent  # type: ignore[misc]
    sys.exit(demo.main())
