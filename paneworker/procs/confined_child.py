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
  (``protocol.limits.PidsCgroup``), the child moves itself into it before the exec, and
  the worker removes it when the pane's tree is gone. A host where the worker cannot make one (no
  pids controller it may write: doctor says so) runs the pane without that bound.

Each failure but the cgroup's ends the spawn (the exec never happens): a pane does not
run with less than it was promised.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import resource
import signal
from collections.abc import Callable, Sequence

from protocol.limits import PidsCgroup, ProgramLimits

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
