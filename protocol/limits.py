"""The bounds a confined pane's worker applies to its program (``PaneLaunch.limits``).

The supervisor decides them from the profile's ``limits`` (``supervisor.profiles.limits``);
the worker applies them between its fork and the sandbox's exec
(``paneworker.procs.confined_child``). Zero means unbounded. ``PidsCgroup`` is here
because both sides use it: the worker makes a pane's, ``panewarden doctor`` checks that
one can be made.
"""

from __future__ import annotations

import contextlib
import os

import msgspec

CGROUP_ROOT = "/sys/fs/cgroup"
CGROUP_PREFIX = "panewarden-"


class ProgramLimits(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``processes``: the pane's processes and threads at once (a pids cgroup of its own,
    where the host lets the worker make one); ``memory_bytes``: each process's data
    (``RLIMIT_DATA``); ``own_network``: the worker's child makes the pane's network
    namespace itself before it execs the sandbox (a root service's pane listing a port
    below 1024: ``paneworker.procs.confined_child.enter_new_network``)."""

    processes: int = 0
    memory_bytes: int = 0
    own_network: bool = False


class PidsCgroup:
    """One pane's pids cgroup (v2, or v1's pids hierarchy), made by its worker."""

    def __init__(self, path: str) -> None:
        self.path = path

    @classmethod
    def make(
        cls, pane: str, processes: int, proc_cgroup: str = "/proc/self/cgroup"
    ) -> PidsCgroup | None:
        """A new cgroup of at most ``processes`` tasks below the worker's own, or None
        when this host lets the worker make none."""
        for base in pids_bases(proc_cgroup):
            _sweep(base)
            path = os.path.join(base, f"{CGROUP_PREFIX}{pane}-{os.getpid()}")
            try:
                os.mkdir(path, 0o755)
            except FileExistsError:
                pass
            except OSError:
                continue
            try:
                with open(os.path.join(path, "pids.max"), "w") as handle:
                    handle.write(str(processes))
            except OSError:
                with contextlib.suppress(OSError):
                    os.rmdir(path)
                continue
            return cls(path)
        return None

    def join(self) -> None:
        """Move the calling process into the cgroup (in the child, before the exec: it
        has one thread). On v1 through ``tasks``: moving only the calling thread skips
        the kernel's global threadgroup lock, whose RCU wait made ``cgroup.procs`` cost
        10-20 ms per start here (``tasks``: 0.5 ms); v2 has only ``cgroup.procs``."""
        name = "tasks" if os.path.exists(os.path.join(self.path, "tasks")) else "cgroup.procs"
        with open(os.path.join(self.path, name), "w") as handle:
            handle.write("0")

    def remove(self) -> None:
        """Remove the cgroup (it is gone already, or still has a task: left to the next
        sweep)."""
        with contextlib.suppress(OSError):
            os.rmdir(self.path)


def pids_bases(proc_cgroup: str = "/proc/self/cgroup") -> list[str]:
    """Where the calling process's pids cgroup is, v2 first (which needs ``pids`` in
    its ``cgroup.subtree_control``) then v1's pids hierarchy."""
    try:
        with open(proc_cgroup) as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    bases: list[str] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        relative = path.lstrip("/")
        if controllers == "":
            for mount in (CGROUP_ROOT, os.path.join(CGROUP_ROOT, "unified")):
                base = os.path.join(mount, relative)
                if _delegates_pids(base):
                    bases.insert(0, base)
        elif "pids" in controllers.split(","):
            bases.append(os.path.join(CGROUP_ROOT, "pids", relative))
    return bases


def _delegates_pids(base: str) -> bool:
    try:
        with open(os.path.join(base, "cgroup.subtree_control")) as handle:
            return "pids" in handle.read().split()
    except OSError:
        return False


def _sweep(base: str) -> None:
    """Remove the cgroups of workers that are gone (a SIGKILLed worker leaves its own)."""
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        if not name.startswith(CGROUP_PREFIX):
            continue
        pid = name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(base, name))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
