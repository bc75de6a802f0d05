"""What a confined pane's worker does between its fork and the sandbox's exec.

Bubblewrap 0.8 has no option for these, and a launcher inside would add an interpreter's
start to every pane, so the forked child does them, and everything it starts inside
the sandbox inherits them:

- a new, empty session keyring (``KEYCTL_JOIN_SESSION_KEYRING`` with no name): the
  service's session keyring, and every key a process of the user put there, is not the
  program's (the user keyrings are the new user namespace's own already);
- ``RLIMIT_DATA`` at ``memory_bytes`` (each process's heap and private writable
  mappings; not ``RLIMIT_AS``, which the address space node reserves would exceed);
- its pids cgroup: the worker makes one per pane with ``pids.max`` at ``processes``
  (``PidsCgroup``), the child moves itself into it before the exec, and the worker
  removes it when the pane's tree is gone. A host where the worker cannot make one (no
  pids controller it may write: doctor says so) runs the pane without that bound.

Each failure but the cgroup's ends the spawn (the exec never happens): a pane does not
run with less than it was promised.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import resource
import signal
from collections.abc import Callable, Sequence

from protocol.limits import ProgramLimits

# keyctl(2)'s number per machine (asm/unistd.h).
KEYCTL_NR = {
    "x86_64": 250,
    "aarch64": 219,
    "arm64": 219,
    "riscv64": 219,
    "i386": 288,
    "i686": 288,
    "armv7l": 311,
    "ppc64le": 311,
    "s390x": 280,
}
KEYCTL_JOIN_SESSION_KEYRING = 1
CGROUP_ROOT = "/sys/fs/cgroup"
CGROUP_PREFIX = "panewarden-"
TERMINAL_SIGNALS = (signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP)


def join_new_session_keyring(libc: ctypes.CDLL | None = None) -> None:
    """Make the calling process's session keyring a new, empty, anonymous one.

    Raises:
        OSError: the kernel refused (ENOSYS and EPERM are not refusals: a kernel without
            keys, or a seccomp filter that forbids keyctl, leaves no keyring to reach).
    """
    number = KEYCTL_NR.get(platform.machine())
    if number is None:
        raise OSError(errno.ENOSYS, f"keyctl's number on {platform.machine()} is not known")
    call = libc if libc is not None else ctypes.CDLL(None, use_errno=True)
    if call.syscall(number, KEYCTL_JOIN_SESSION_KEYRING, None) >= 0:
        return
    code = ctypes.get_errno()
    if code not in (errno.ENOSYS, errno.EPERM):
        raise OSError(code, f"cannot join a new session keyring: {os.strerror(code)}")


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
        """Move the calling process into the cgroup (in the child, before the exec)."""
        with open(os.path.join(self.path, "cgroup.procs"), "w") as handle:
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


def child_setup(
    limits: ProgramLimits, cgroup: PidsCgroup | None, *, ignore: Sequence[int] = TERMINAL_SIGNALS
) -> Callable[[], None]:
    """The function the forked child runs before it execs the sandbox."""
    libc = ctypes.CDLL(None, use_errno=True)

    def setup() -> None:
        for sig in ignore:
            signal.signal(sig, signal.SIG_IGN)
        join_new_session_keyring(libc)
        if limits.memory_bytes > 0:
            resource.setrlimit(resource.RLIMIT_DATA, (limits.memory_bytes, limits.memory_bytes))
        if cgroup is not None:
            cgroup.join()

    return setup
