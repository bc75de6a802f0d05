"""Blank pane screens the worker template builds once, for every fork to adopt.

A screen is the largest thing a worker builds at its start (a 120x40 pyte screen: rows
of cells and their pages; a ghostty one: the native terminal's pages), and building it
in each worker writes every page it lands on. Built in the template instead, before
the first fork, it is shared: a worker that adopts it copies only the pages its program
draws on. A worker adopts the spare whose backend and size its boot record asks for
(and the default scrollback); any other worker builds its own, as a cold worker does.

The template never touches a spare after building it, so each fork gets it blank.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from paneworker.screen.emulator import EmulatorUnavailable, ScreenModel, open_model
from protocol.boot import DEFAULT_HISTORY_LINES, BootRecord
from protocol.template import MAX_SPARE_SCREENS, SpareScreen

log = logging.getLogger(__name__)

# Scrollback of a spare: a boot record's default (the supervisor never sets another).
SPARE_HISTORY_LINES = DEFAULT_HISTORY_LINES
# A bound on a spare's sides whatever the boot record says (profiles allow 500x200).
MAX_SPARE_SIDE = 1000

Key = tuple[str, int, int]


class SpareScreens:
    """The template's blank screens by (backend, cols, rows)."""

    def __init__(self, screens: dict[Key, ScreenModel] | None = None) -> None:
        self._screens = dict(screens or {})

    @classmethod
    def build(cls, wanted: Iterable[SpareScreen]) -> SpareScreens:
        """Build one blank screen per distinct spec (the first ``MAX_SPARE_SCREENS``);
        a spec that cannot be built is logged and skipped."""
        screens: dict[Key, ScreenModel] = {}
        for spec in wanted:
            key = (spec.emulator, spec.cols, spec.rows)
            if key in screens:
                continue
            if len(screens) >= MAX_SPARE_SCREENS:
                break
            if not (1 <= spec.cols <= MAX_SPARE_SIDE and 1 <= spec.rows <= MAX_SPARE_SIDE):
                log.warning("spare screen %dx%d refused: bad size", spec.cols, spec.rows)
                continue
            try:
                screens[key] = open_model(spec.emulator, spec.cols, spec.rows, SPARE_HISTORY_LINES)
            except EmulatorUnavailable as exc:
                log.warning("no spare %s screen: %s", spec.emulator, exc)
            except Exception:  # only a saving: a worker builds its own screen
                log.exception("no spare %s screen", spec.emulator)
        return cls(screens)

    def __len__(self) -> int:
        return len(self._screens)

    def take(self, boot: BootRecord) -> ScreenModel | None:
        """The blank screen for ``boot``, once (None when there is none for it)."""
        if boot.launch.history_lines != SPARE_HISTORY_LINES:
            return None
        return self._screens.pop((boot.launch.emulator, boot.launch.cols, boot.launch.rows), None)
