"""The ``scripted`` fixture: panes around a scripted agent (``scripted_pane``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.paneworker.scripted_pane import AGENT_SCRIPT, ScriptedPane


@pytest.fixture
def scripted(tmp_path: Path) -> Iterator[Callable[..., ScriptedPane]]:
    panes: list[ScriptedPane] = []

    def start(
        agent: str,
        frames: list[str],
        script: str = AGENT_SCRIPT,
        settle_s: float = 0.0,
        appear_s: float = 0.0,
        size: tuple[int, int] = (100, 30),
    ) -> ScriptedPane:
        path = tmp_path / f"p{len(panes)}"
        path.mkdir()
        pane = ScriptedPane(path, agent, frames, script, settle_s, appear_s, size)
        panes.append(pane)
        return pane

    yield start
    for pane in panes:
        pane.close()
