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
  pids controller it may write: doctor says so) runs the pane without that bound;
- for a root service's pane that lists a port below 1024 (``ProgramLimits.own_network``),
  its network namespace: made here, as root in the init user namespace, with ``lo`` up
  and ``net.ipv4.ip_unprivileged_port_start`` at 0 (per namespace), so bwrap shares it
  (no ``--unshare-net``) with all its user-namespace flags and the forwarder binds the
  port with no capability (design §13 item 51).

Each failure but the cgroup's ends the spawn (the exec never happens): a pane does not
run with less than it was promised.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import platform
import resource
import signal
import socket
import struct
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
CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
# struct ifreq: the name, then the flags (a short) of its union.
IFREQ_FLAGS = "16sH22x"
UNPRIVILEGED_PORT_START = "/proc/sys/net/ipv4/ip_unprivileged_port_start"


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


def enter_new_network(libc: ctypes.CDLL | None = None) -> None:
    """Move the calling process into a new network namespace with ``lo`` up and every
    port unprivileged in it.

    Raises:
        OSError: the kernel refused one of the three steps (not root in the init user
            namespace, no network namespaces): the pane does not start.
    """
    call = libc if libc is not None else ctypes.CDLL(None, use_errno=True)
    if call.unshare(CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"cannot make the pane's network namespace: {os.strerror(code)}")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        asked = fcntl.ioctl(sock.fileno(), SIOCGIFFLAGS, struct.pack(IFREQ_FLAGS, b"lo", 0))
        flags = struct.unpack(IFREQ_FLAGS, asked)[1]
        fcntl.ioctl(sock.fileno(), SIOCSIFFLAGS, struct.pack(IFREQ_FLAGS, b"lo", flags | IFF_UP))
    with open(UNPRIVILEGED_PORT_START, "w") as sysctl:
        sysctl.write("0")


def child_setup(
    limits: ProgramLimits, cgroup: PidsCgroup | None, *, ignore: Sequence[int] = TERMINAL_SIGNALS
) -> Callable[[], None]:
    """The function the forked child runs before it execs the sandbox."""
    libc = ctypes.CDLL(None, use_errno=True)

    def setup() -> None:
        for sig in ignore:
            signal.signal(sig, signal.SIG_IGN)
        if limits.own_network:
            enter_new_network(libc)
        join_new_session_keyring(libc)
        if limits.memory_bytes > 0:
            resource.setrlimit(resource.RLIMIT_DATA, (limits.memory_bytes, limits.memory_bytes))
        if cgroup is not None:
            cgroup.join()

    return setup
