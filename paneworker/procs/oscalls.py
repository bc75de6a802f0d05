"""Syscall seam for the pane worker's reaper: signals, waits, prctl and /proc reads.

Every operating-system call the reaper makes goes through one ``OsCalls`` instance so
that fault-injection tests can subclass it and make a single call fail with ``ESRCH``,
``EPERM`` or ``EAGAIN``. The methods are deliberately thin: they report failures as
``OSError`` with the errno the kernel gave, and a process that no longer exists always
surfaces as ``ProcessLookupError`` (``ESRCH``), whichever call noticed it. Callers
create their own instance; there is no shared default.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import signal
from collections.abc import Callable
from typing import cast

from protocol.procstat import ProcStat, parse_stat

PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37

PROC = "/proc"


@functools.cache
def _libc_prctl() -> Callable[..., int]:
    """libc's ``prctl``, looked up once per process (a forked worker reuses its template's)."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return cast(Callable[..., int], prctl)


def _gone(pid: int) -> ProcessLookupError:
    return ProcessLookupError(errno.ESRCH, os.strerror(errno.ESRCH), f"{PROC}/{pid}")


class OsCalls:
    """The real Linux implementation; subclass and override one method to inject faults."""

    def kill(self, pid: int, sig: int) -> None:
        """``kill(2)``; only a fallback when pidfds are unavailable."""
        os.kill(pid, sig)

    def killpg(self, pgid: int, sig: int) -> None:
        """``killpg(3)``."""
        os.killpg(pgid, sig)

    def pidfd_open(self, pid: int) -> int:
        """``pidfd_open(2)``: a handle on this very process that survives pid reuse."""
        return os.pidfd_open(pid)

    def pidfd_send_signal(self, pidfd: int, sig: int) -> None:
        """``pidfd_send_signal(2)``; ``ProcessLookupError`` if the process has exited."""
        signal.pidfd_send_signal(pidfd, sig)

    def close(self, fd: int) -> None:
        """``close(2)``."""
        os.close(fd)

    def waitpid(self, pid: int, options: int) -> tuple[int, int]:
        """``waitpid(2)``: ``(pid, raw wait status)``, ``(0, 0)`` if none is ready."""
        return os.waitpid(pid, options)

    def prctl_set_child_subreaper(self) -> None:
        """Make this process adopt the orphans of its descendants.

        Raises:
            OSError: prctl failed; errno is the kernel's.
        """
        self._prctl(PR_SET_CHILD_SUBREAPER, 1)

    def set_process_name(self, name: str) -> None:
        """Name this process (``comm``: ``ps -o comm``, ``/proc/PID/stat``; 15 bytes kept)."""
        buf = ctypes.create_string_buffer(name.encode()[:15])
        self._prctl(PR_SET_NAME, ctypes.addressof(buf))

    def prctl_get_child_subreaper(self) -> bool:
        """Whether this process is a child subreaper."""
        flag = ctypes.c_int(0)
        self._prctl(PR_GET_CHILD_SUBREAPER, ctypes.addressof(flag))
        return flag.value != 0

    def _prctl(self, option: int, arg2: int) -> None:
        prctl = _libc_prctl()
        if prctl(option, arg2, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl({option}): {os.strerror(err)}")

    def read_children(self, pid: int) -> list[int]:
        """Children of every thread of ``pid`` (adopted orphans included).

        Raises:
            ProcessLookupError: the process is gone.
        """
        task_dir = f"{PROC}/{pid}/task"
        try:
            tids = os.listdir(task_dir)
        except (FileNotFoundError, ProcessLookupError):
            raise _gone(pid) from None
        children: list[int] = []
        for tid in tids:
            try:
                with open(f"{task_dir}/{tid}/children", "rb") as f:
                    data = f.read()
            except (FileNotFoundError, ProcessLookupError):
                # This thread exited during the walk; the other threads still count.
                continue
            children.extend(int(field) for field in data.split())
        return children

    def proc_stat(self, pid: int) -> ProcStat:
        """Parsed ``/proc/PID/stat``.

        Raises:
            ProcessLookupError: the process is gone.
        """
        try:
            with open(f"{PROC}/{pid}/stat", encoding="utf-8", errors="replace") as f:
                text = f.read()
        except (FileNotFoundError, ProcessLookupError):
            raise _gone(pid) from None
        if not text:
            # A process being torn down can show an empty file for an instant.
            raise _gone(pid)
        return parse_stat(pid, text)

    def task_states(self, pid: int) -> list[str]:
        """The state letter of every thread of ``pid``.

        Raises:
            ProcessLookupError: the process is gone.
        """
        task_dir = f"{PROC}/{pid}/task"
        try:
            tids = os.listdir(task_dir)
        except (FileNotFoundError, ProcessLookupError):
            raise _gone(pid) from None
        states: list[str] = []
        for tid in tids:
            try:
                with open(f"{task_dir}/{tid}/stat", encoding="utf-8", errors="replace") as f:
                    text = f.read()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if text:
                states.append(parse_stat(int(tid), text).state)
        return states

    def list_pids(self) -> list[int]:
        """Every pid in ``/proc``: a full-host scan, only for closing a pane."""
        return [int(name) for name in os.listdir(PROC) if name.isdigit()]
