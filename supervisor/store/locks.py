"""Per-store locks that say who holds them, so a crash leaves evidence, not a deadlock.

A store's lock is the file ``<locks dir>/<store>.lock``, created exclusively and
holding the holder's pid, the start time of that process (clock ticks since boot), the
boot id, the host name and a random lock id. Its state is one of:

- ``absent``: no lock file;
- ``active``: held by a live process on this host (same pid, start time and boot id);
- ``stale``: written on this host by a process that is gone (no such pid, another
  start time — a reused pid —, or another boot);
- ``indeterminate``: written on another host, or unreadable: it is never taken on a
  guess; an operator must look.

Taking a lock waits (bounded by ``wait_s``) while it is active, removes and takes a
stale one, and gives up with ``store_busy`` on an indeterminate one or at the deadline.
Inside the supervisor an ``asyncio.Lock`` per store orders callers first, so the file
is only contended across processes (a crash test's writer, a second tool). Operations
that need several stores take them in ``STORE_ORDER``, always, so two of them can never
wait on each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import msgspec

from protocol.errors import ErrorCode, PanewardenError
from protocol.safe_files import FileReadError, read_regular_file
from supervisor.procfs import process_start_ticks
from supervisor.store.statedir import ensure_private_dir

STORE_ORDER = ("controller", "reviewer", "writer", "adopted", "receipts", "verifications")
DEFAULT_WAIT_S = 5.0
LOCK_LIMIT_BYTES = 4096
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


class LockState(enum.StrEnum):
    """What a lock file says about its holder."""

    ABSENT = "absent"
    ACTIVE = "active"
    STALE = "stale"
    INDETERMINATE = "indeterminate"


class LockInfo(msgspec.Struct, frozen=True):
    """The content of a lock file."""

    pid: int
    start_ticks: int
    boot_id: str
    host: str
    lock_id: str
    acquired_at: float


def boot_id() -> str:
    """This boot's id (changes at every reboot)."""
    try:
        return read_regular_file(BOOT_ID, limit_bytes=64).decode().strip()
    except FileReadError:
        return "unknown"


def own_lock_info() -> LockInfo:
    """A lock record naming this very process."""
    pid = os.getpid()
    return LockInfo(
        pid=pid,
        start_ticks=process_start_ticks(pid) or 0,
        boot_id=boot_id(),
        host=socket.gethostname(),
        lock_id=secrets.token_hex(8),
        acquired_at=time.time(),
    )


def read_lock(path: Path) -> LockInfo | LockState | None:
    """The lock file's record; None when absent; INDETERMINATE when unreadable."""
    try:
        data = read_regular_file(path, limit_bytes=LOCK_LIMIT_BYTES, follow_symlinks=False)
    except FileReadError as exc:
        return None if exc.missing else LockState.INDETERMINATE
    try:
        return msgspec.json.decode(data, type=LockInfo)
    except msgspec.MsgspecError:
        return LockState.INDETERMINATE


def classify(path: Path) -> LockState:
    """The state of the lock at ``path``; see the module docstring."""
    info = read_lock(path)
    if info is None:
        return LockState.ABSENT
    if isinstance(info, LockState):
        return info
    return _state_of(info)


def _state_of(info: LockInfo) -> LockState:
    if info.host != socket.gethostname():
        return LockState.INDETERMINATE
    if info.boot_id != boot_id():
        return LockState.STALE
    ticks = process_start_ticks(info.pid)
    if ticks is None or ticks != info.start_ticks:
        return LockState.STALE
    return LockState.ACTIVE


class FileLock:
    """One store's lock file, taken and released by this process."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._held: LockInfo | None = None

    def try_take(self) -> LockState:
        """Take the lock if it is free or stale; returns ABSENT when taken now, else the
        state that keeps it (ACTIVE or INDETERMINATE)."""
        mine = own_lock_info()
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            except FileExistsError:
                state = classify(self.path)
                if state is LockState.STALE:
                    self._remove_if_unchanged(state)
                    continue
                if state is LockState.ABSENT:
                    continue  # released between our open and our look
                return state
            try:
                os.write(fd, msgspec.json.encode(mine))
            finally:
                os.close(fd)
            self._held = mine
            return LockState.ABSENT
        return LockState.ACTIVE

    def _remove_if_unchanged(self, seen: LockState) -> None:
        # Only the stale record we looked at is removed, never one written since.
        info = read_lock(self.path)
        if isinstance(info, LockInfo) and _state_of(info) is seen:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)

    def release(self) -> None:
        """Remove the lock file if it is still ours."""
        if self._held is None:
            return
        info = read_lock(self.path)
        if isinstance(info, LockInfo) and info.lock_id == self._held.lock_id:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
        self._held = None


def _busy(store: str, state: LockState, wait_s: float) -> PanewardenError:
    why = (
        "held by another host or unreadable; inspect it before removing it"
        if state is LockState.INDETERMINATE
        else f"still held after {wait_s:.0f}s"
    )
    return PanewardenError(ErrorCode.STORE_BUSY, f"the {store} store's lock is {why}")


class StoreLocks:
    """The locks of every store under one directory; see the module docstring."""

    def __init__(
        self,
        locks_dir: Path,
        *,
        wait_s: float = DEFAULT_WAIT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.dir = ensure_private_dir(locks_dir)
        self.wait_s = wait_s
        self._clock = clock
        self._local = {name: asyncio.Lock() for name in STORE_ORDER}

    def file_lock(self, store: str) -> FileLock:
        """The lock file of ``store``."""
        if store not in STORE_ORDER:
            raise ValueError(f"unknown store {store!r}")
        return FileLock(self.dir / f"{store}.lock")

    def states(self) -> dict[str, str]:
        """Each store's lock state (no pid, lock id or host: for status reports)."""
        return {name: classify(self.dir / f"{name}.lock").value for name in STORE_ORDER}

    @contextlib.asynccontextmanager
    async def hold(self, *stores: str) -> AsyncIterator[None]:
        """Hold the locks of ``stores`` (in ``STORE_ORDER``) for the body.

        Raises:
            PanewardenError: ``store_busy`` when a lock stays held past ``wait_s`` (or is
                indeterminate).
        """
        ordered = sorted(set(stores), key=STORE_ORDER.index)
        deadline = self._clock() + self.wait_s
        async with contextlib.AsyncExitStack() as stack:
            for store in ordered:
                remaining = deadline - self._clock()
                try:
                    await asyncio.wait_for(self._local[store].acquire(), max(remaining, 0.001))
                except TimeoutError:
                    raise _busy(store, LockState.ACTIVE, self.wait_s) from None
                stack.callback(self._local[store].release)
                lock = self.file_lock(store)
                await self._take_file(store, lock, deadline)
                stack.callback(lock.release)
            yield

    async def _take_file(self, store: str, lock: FileLock, deadline: float) -> None:
        delay = 0.005
        while True:
            state = lock.try_take()
            if state is LockState.ABSENT:
                return
            if state is LockState.INDETERMINATE or self._clock() >= deadline:
                raise _busy(store, state, self.wait_s)
            await asyncio.sleep(min(delay, max(deadline - self._clock(), 0.0)))
            delay = min(delay * 2, 0.1)


@contextlib.contextmanager
def hold_sync(locks_dir: Path, store: str, wait_s: float = DEFAULT_WAIT_S) -> Iterator[None]:
    """Hold one store's lock from a plain (non-async) process; ``store_busy`` on timeout."""
    lock = FileLock(ensure_private_dir(locks_dir) / f"{store}.lock")
    deadline = time.monotonic() + wait_s
    delay = 0.005
    while True:
        state = lock.try_take()
        if state is LockState.ABSENT:
            break
        if state is LockState.INDETERMINATE or time.monotonic() >= deadline:
            raise _busy(store, state, wait_s)
        time.sleep(delay)  # a bounded poll: another process holds the lock
        delay = min(delay * 2, 0.1)
    try:
        yield
    finally:
        lock.release()
