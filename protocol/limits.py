"""The bounds a confined pane's worker applies to its program (``PaneLaunch.limits``).

The supervisor decides them from the profile's ``limits`` (``supervisor.profiles.limits``);
the worker applies them between its fork and the sandbox's exec
(``paneworker.procs.confined_child``). Zero means unbounded.
"""

from __future__ import annotations

import msgspec


class ProgramLimits(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``processes``: the pane's processes and threads at once (a pids cgroup of its own,
    where the host lets the worker make one); ``memory_bytes``: each process's data
    (``RLIMIT_DATA``)."""

    processes: int = 0
    memory_bytes: int = 0
