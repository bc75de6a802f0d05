"""Which emulator backend the terminal tests run on.

``PANEWARDEN_EMULATOR=ghostty`` runs this directory on the ghostty backend (CI runs
it once per backend); unset, the default backend. :data:`ALL` is every backend
installed here, for the tests that compare backends in one run.
"""

from __future__ import annotations

import os

from paneworker.screen.emulator import EMULATORS, EmulatorUnavailable, check_available

EMULATOR = os.environ.get("PANEWARDEN_EMULATOR") or "pyte"


def _installed() -> list[str]:
    found: list[str] = []
    for kind in EMULATORS:
        try:
            check_available(kind)
        except EmulatorUnavailable:
            continue
        found.append(kind)
    return found


ALL = [EMULATOR] if os.environ.get("PANEWARDEN_EMULATOR") else _installed()
