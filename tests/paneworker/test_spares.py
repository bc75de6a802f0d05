"""Spare screens: what the template builds ahead, and which worker may adopt one.

The fork-level behaviour (workers adopting a spare each get their own copy) is in
``test_template.py``; these check the choices: one screen per backend and size, bad
specs refused, a spare handed out once and only for its exact backend, size and
scrollback, and a terminal refusing a screen of another size.
"""

from __future__ import annotations

import logging

import pytest

from paneworker.screen.terminal import Terminal
from paneworker.template.spares import MAX_SPARE_SIDE, SPARE_HISTORY_LINES, SpareScreens
from protocol.boot import BootRecord, PaneLaunch
from protocol.template import MAX_SPARE_SCREENS, SpareScreen


def _boot(
    cols: int = 80, rows: int = 24, emulator: str = "pyte", history: int | None = None
) -> BootRecord:
    return BootRecord(
        protocol_version=1,
        instance="i",
        secret=b"s",
        endpoint="ipc:///nowhere",
        launch=PaneLaunch(
            pane="p",
            agent="generic",
            argv=["true"],
            cwd="/",
            env={},
            cols=cols,
            rows=rows,
            emulator=emulator,
            history_lines=SPARE_HISTORY_LINES if history is None else history,
        ),
    )


def test_one_screen_per_backend_and_size_bad_specs_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    spares = SpareScreens.build(
        [
            SpareScreen(emulator="pyte", cols=80, rows=24),
            SpareScreen(emulator="pyte", cols=80, rows=24),
            SpareScreen(emulator="pyte", cols=0, rows=24),
            SpareScreen(emulator="pyte", cols=80, rows=MAX_SPARE_SIDE + 1),
            SpareScreen(emulator="no-such-backend", cols=80, rows=24),
            SpareScreen(emulator="pyte", cols=100, rows=30),
        ]
    )
    assert len(spares) == 2
    assert "bad size" in caplog.text and "no-such-backend" in caplog.text


def test_at_most_the_bound_is_built() -> None:
    wanted = [
        SpareScreen(emulator="pyte", cols=10 + i, rows=5) for i in range(MAX_SPARE_SCREENS + 3)
    ]
    assert len(SpareScreens.build(wanted)) == MAX_SPARE_SCREENS


def test_a_spare_goes_once_and_only_to_its_exact_backend_size_and_scrollback() -> None:
    spares = SpareScreens.build([SpareScreen(emulator="pyte", cols=80, rows=24)])
    assert spares.take(_boot(cols=81)) is None
    assert spares.take(_boot(rows=25)) is None
    assert spares.take(_boot(emulator="ghostty")) is None
    assert spares.take(_boot(history=SPARE_HISTORY_LINES + 1)) is None
    screen = spares.take(_boot())
    assert screen is not None and (screen.cols, screen.rows) == (80, 24)
    assert not any(line.strip() for line in screen.display_lines())
    assert spares.take(_boot()) is None


def test_a_terminal_uses_the_screen_it_is_given_and_refuses_another_size() -> None:
    screen = SpareScreens.build([SpareScreen(emulator="pyte", cols=40, rows=10)]).take(
        _boot(cols=40, rows=10)
    )
    assert screen is not None
    term = Terminal(40, 10, reply=lambda _b: None, on_report=lambda _r: None, model=screen)
    term.feed(b"adopted\r\n")
    assert term.display_lines()[0] == "adopted"
    assert screen.display_lines()[0] == "adopted"
    with pytest.raises(ValueError, match="not of this size"):
        Terminal(41, 10, reply=lambda _b: None, on_report=lambda _r: None, model=screen)
