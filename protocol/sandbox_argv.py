"""Bubblewrap command lines as the worker receives them: what it may still drop at exec.

A sandbox's argv is built by the supervisor (``supervisor.confinement.policy``), and its
hiding mounts name host paths that existed then: every host Unix socket and runtime
directory among them, which come and go with other programs. bwrap cannot mount a
stand-in over a path that vanished before it runs (a read-only root: "Can't mkdir
parents"), and the pane would not start. A path that no longer exists has nothing left
to hide, so the worker drops its stand-in right before the exec: the window shrinks from
the whole start to the exec itself. Nothing else in the argv is touched.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

END_OF_OPTIONS = "--"
HIDDEN_DIR = ("--perms", "0000", "--tmpfs")


def drop_vanished_hides(argv: Sequence[str], stand_in: str) -> list[str]:
    """``argv`` without the stand-in mounts (``--perms 0000 --tmpfs P`` and
    ``--ro-bind STAND_IN P``) whose ``P`` no longer exists; bwrap's options only."""
    out: list[str] = []
    index = 0
    while index < len(argv):
        word = argv[index]
        if word == END_OF_OPTIONS:
            return [*out, *argv[index:]]
        if tuple(argv[index : index + 3]) == HIDDEN_DIR and index + 3 < len(argv):
            if os.path.lexists(argv[index + 3]):
                out += argv[index : index + 4]
            index += 4
            continue
        if word == "--ro-bind" and stand_in and index + 2 < len(argv):
            if argv[index + 1] == stand_in and not os.path.lexists(argv[index + 2]):
                index += 3
                continue
            out += argv[index : index + 3]
            index += 3
            continue
        out.append(word)
        index += 1
    return out
