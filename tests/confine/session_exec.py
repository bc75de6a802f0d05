"""Start a program as a user's login session would: in a session keyring of its own
holding a secret, with the usual soft limit of 1,024 open files.

``session_exec.py DESCRIPTION PAYLOAD -- PROGRAM ARGS...``: joins a new anonymous session
keyring, adds a ``user`` key ``DESCRIPTION`` holding ``PAYLOAD`` with the ``add_key``
system call, lowers the soft ``RLIMIT_NOFILE`` to 1,024 (CI machines often have far
more), then execs the program, which inherits both. The caller's own keyrings and
limits are untouched, and the key goes with the last process of that session.
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys

# x86_64 system call numbers; keyctl's JOIN_SESSION_KEYRING (linux/keyctl.h).
SYS_ADD_KEY = 248
SYS_KEYCTL = 250
KEYCTL_JOIN_SESSION_KEYRING = 1
KEY_SPEC_SESSION_KEYRING = -3
# The soft open-files limit of a default Linux login session.
SESSION_NOFILE = 1024


def _syscall(*args: object) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    result = int(libc.syscall(*args))
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result


def main() -> None:
    description, payload, separator, *program = sys.argv[1:]
    assert separator == "--" and program, __doc__
    _syscall(ctypes.c_long(SYS_KEYCTL), ctypes.c_long(KEYCTL_JOIN_SESSION_KEYRING), None)
    data = payload.encode()
    _syscall(
        ctypes.c_long(SYS_ADD_KEY),
        ctypes.c_char_p(b"user"),
        ctypes.c_char_p(description.encode()),
        ctypes.c_char_p(data),
        ctypes.c_size_t(len(data)),
        ctypes.c_long(KEY_SPEC_SESSION_KEYRING),
    )
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(SESSION_NOFILE, hard), hard))
    os.execv(program[0], program)


if __name__ == "__main__":
    main()
