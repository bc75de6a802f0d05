"""A probe of the kernel's side of a confined pane, run as its program (``probe.py``'s
protocol: ``checks.json`` in its cwd in, ``results.json`` out, then it waits on stdin).

Besides ``probe.py``'s actions it opens files for writing (and never writes), reads keys
through ``keyctl``, forks until refused, allocates, fills ``/tmp`` and reports limits.
Standard library only: it runs inside the sandbox (and from a copy under ``/tmp``).
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import resource
import sys
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe  # type: ignore[import-not-found]

MIB = 1024 * 1024
KEYCTL = {"x86_64": 250, "aarch64": 219}
KEYCTL_READ = 11
KEYCTL_SEARCH = 10
KEY_SPEC_SESSION_KEYRING = -3


def _open_write(path: str) -> object:
    # Opened for writing and closed: nothing is ever written.
    fd = os.open(path, os.O_WRONLY)
    os.close(fd)
    return "opened"


def _keyctl(*args: object) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    done = int(libc.syscall(KEYCTL[platform.machine()], *args))
    if done < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return done


def _key_read(serial: str) -> object:
    buf = ctypes.create_string_buffer(256)
    size = _keyctl(KEYCTL_READ, ctypes.c_long(int(serial)), buf, ctypes.c_size_t(256))
    return buf.raw[:size].decode(errors="replace")


def _key_search(description: str) -> object:
    serial = _keyctl(
        KEYCTL_SEARCH,
        ctypes.c_long(KEY_SPEC_SESSION_KEYRING),
        b"user",
        description.encode(),
        ctypes.c_long(0),
    )
    return _key_read(str(serial))


def _fork_many(count: str) -> object:
    """Children started (each waits on a pipe) until ``count`` or a refusal."""
    read_end, write_end = os.pipe()
    started: list[int] = []
    try:
        for _ in range(int(count)):
            try:
                pid = os.fork()
            except BlockingIOError:
                break
            if pid == 0:
                os.close(write_end)
                os.read(read_end, 1)
                os._exit(0)
            started.append(pid)
    finally:
        os.close(write_end)
        os.close(read_end)
        for pid in started:
            os.waitpid(pid, 0)
    return len(started)


def _alloc(mb: str) -> object:
    try:
        block = bytearray(int(mb) * MIB)
    except MemoryError:
        raise OSError(errno.ENOMEM, "MemoryError") from None
    return len(block) // MIB


def _fill_tmp(mb: str) -> object:
    """MiB written to a file in /tmp before ENOSPC (or ``mb``); the file is removed."""
    path = "/tmp/fill"
    written = 0
    chunk = b"\0" * MIB
    try:
        with open(path, "wb") as handle:
            for _ in range(int(mb)):
                handle.write(chunk)
                handle.flush()
                written += 1
    except OSError as exc:
        return f"{written} {errno.errorcode.get(exc.errno or 0, '?')}"
    finally:
        if os.path.exists(path):
            os.unlink(path)
    return f"{written} full"


def _statvfs(path: str) -> object:
    done = os.statvfs(path)
    return done.f_blocks * done.f_frsize // MIB


def _rlimit_data(_arg: str) -> object:
    return resource.getrlimit(resource.RLIMIT_DATA)[0]


def _env_file(name: str) -> object:
    with open(os.environ[name], "rb") as handle:
        return len(handle.read())


ACTIONS: dict[str, Callable[[str], object]] = {
    **probe.ACTIONS,
    "open_write": _open_write,
    "key_read": _key_read,
    "key_search": _key_search,
    "fork_many": _fork_many,
    "alloc": _alloc,
    "fill_tmp": _fill_tmp,
    "statvfs": _statvfs,
    "rlimit_data": _rlimit_data,
    "env_file": _env_file,
}


def main() -> None:
    with open("checks.json") as handle:
        checks = json.load(handle)
    results: dict[str, str] = {}
    for name, (kind, arg) in checks.items():
        results[name] = probe._outcome(ACTIONS[kind], str(arg))
    with open("results.json.tmp", "w") as handle:
        json.dump(results, handle)
    os.replace("results.json.tmp", "results.json")
    print("probe done", flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()
