"""Terminal emulator backends behind one interface.

:class:`~paneworker.screen.emulator.base.ScreenModel` is the interface; two backends
implement it: ``pyte`` (pure Python, the default: :mod:`pyte_model`) and
``ghostty`` (libghostty-vt through the optional ``pyghostty`` package:
:mod:`ghostty_model`). Everything else the pane's terminal does, answering
queries, OSC 7501, the raw-byte scanner and the unparsed backlog, is shared and
lives beside them (:mod:`answers`, :mod:`scanner`, :mod:`backlog`).
"""

from __future__ import annotations

from paneworker.screen.emulator.base import Cell, EmulatorUnavailable, ScreenModel
from protocol.boot import DEFAULT_EMULATOR, EMULATORS


def open_model(kind: str, cols: int, rows: int, history_lines: int) -> ScreenModel:
    """A new screen of backend ``kind``.

    Raises:
        EmulatorUnavailable: ``kind`` is unknown, or its package is not installed.
    """
    if kind == "pyte":
        from paneworker.screen.emulator.pyte_model import PyteModel

        return PyteModel(cols, rows, history_lines)
    if kind == "ghostty":
        from paneworker.screen.emulator.ghostty_model import GhosttyModel

        return GhosttyModel(cols, rows, history_lines)
    raise EmulatorUnavailable(f"unknown emulator {kind!r}; one of {', '.join(EMULATORS)}")


def check_available(kind: str) -> None:
    """Raise :class:`EmulatorUnavailable` unless backend ``kind`` can run here."""
    open_model(kind, 2, 2, 0)


__all__ = [
    "DEFAULT_EMULATOR",
    "EMULATORS",
    "Cell",
    "EmulatorUnavailable",
    "ScreenModel",
    "check_available",
    "open_model",
]
