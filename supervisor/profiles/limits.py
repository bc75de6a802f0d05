"""A profile's ``limits``: the bounds a confined pane's program runs under.

``processes``: processes and threads of the pane at once (a pids cgroup of its own where
the host lets the worker make one; ``panewarden doctor`` says whether it does).
``memory_mb``: data (heap) MiB per process (``RLIMIT_DATA``: private writable mappings;
node CLIs reserve large address spaces they never touch, which ``RLIMIT_AS`` would count).
``tmp_mb``: size of the private ``/tmp`` (and of ``/dev/shm``, bounded alike). Every
field has a default that real agent CLIs fit (docs/operations.md "Confined panes",
"Limits"); the values are checked when the file loads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from msgspec import Meta, Struct

MIB = 1024 * 1024
DEFAULT_PROCESSES = 1024
DEFAULT_MEMORY_MB = 8192
DEFAULT_TMP_MB = 1024
DEFAULT_SHM_MB = 64
PROCESSES_MIN, PROCESSES_MAX = 16, 65536
MEMORY_MB_MIN, MEMORY_MB_MAX = 256, 1024 * 1024
TMP_MB_MIN, TMP_MB_MAX = 1, 1024 * 1024


class LimitsEntry(Struct, forbid_unknown_fields=True, frozen=True):
    """The ``limits`` table of a profile, as written in the file."""

    processes: Annotated[int, Meta(ge=PROCESSES_MIN, le=PROCESSES_MAX)] = DEFAULT_PROCESSES
    memory_mb: Annotated[int, Meta(ge=MEMORY_MB_MIN, le=MEMORY_MB_MAX)] = DEFAULT_MEMORY_MB
    tmp_mb: Annotated[int, Meta(ge=TMP_MB_MIN, le=TMP_MB_MAX)] = DEFAULT_TMP_MB


@dataclass(frozen=True)
class PaneLimits:
    """A confined pane's validated bounds (``LimitsEntry``'s fields, in bytes where sizes)."""

    processes: int = DEFAULT_PROCESSES
    memory_bytes: int = DEFAULT_MEMORY_MB * MIB
    tmp_bytes: int = DEFAULT_TMP_MB * MIB
    shm_bytes: int = DEFAULT_SHM_MB * MIB


def build_limits(entry: LimitsEntry | None) -> PaneLimits:
    """One profile's limits (the defaults when it has no ``limits``; msgspec checked the
    ranges when the file loaded)."""
    if entry is None:
        return PaneLimits()
    return PaneLimits(
        processes=entry.processes,
        memory_bytes=entry.memory_mb * MIB,
        tmp_bytes=entry.tmp_mb * MIB,
        shm_bytes=min(DEFAULT_SHM_MB, entry.tmp_mb) * MIB,
    )
