"""The supervisor's state directory: layout, the single-supervisor lock, atomic writes.

Layout (docs/design.md §8): ``$STATE`` (0700) holds ``supervisor.lock``, ``run/endpoint``
(the path of the ZeroMQ ipc socket) and the record stores. The ipc socket itself
lives in a short runtime directory because ipc paths are limited to 107 bytes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import tempfile
from pathlib import Path

from protocol.errors import ErrorCode, PanewardenError

IPC_PATH_MAX = 107


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` and make it mode 0700; refuse a non-directory.

    Every state directory is made here. Each missing parent is created 0700 as well
    (``mkdir(parents=True)`` gives parents the umask's mode: ``$STATE/leases/`` was 0755
    under its 0700 ``reviewer/``); parents that already exist are left as they are.
    """
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:
            pass  # made by someone else in the meantime: checked below like any other
        else:
            os.chmod(directory, 0o700)  # the umask narrowed mkdir's mode; never widened
    if not path.is_dir():
        raise PanewardenError(ErrorCode.CONFIG_INVALID, f"{path} is not a directory")
    os.chmod(path, 0o700)
    return path


def atomic_write(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Write ``data`` to ``path`` via temp file, fsync, rename and directory fsync."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def sweep_temp_files(directory: Path) -> int:
    """Remove temp files a crash left behind in ``directory``; returns how many."""
    removed = 0
    for entry in directory.glob(".*.tmp"):
        try:
            entry.unlink()
            removed += 1
        except FileNotFoundError:
            continue
    return removed


class SupervisorLock:
    """An exclusive ``flock`` on ``$STATE/supervisor.lock``; one supervisor per state dir."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "supervisor.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise PanewardenError(config_invalid) naming the holder."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EACCES):
                raise PanewardenError(
                    ErrorCode.CONFIG_INVALID,
                    f"another supervisor (pid {holder}) already serves {self.path.parent}; "
                    "to share panes between clients, run `panewarden serve --http` once and "
                    "register `panewarden stdio-proxy` with each client (or give each "
                    "server its own PANEWARDEN_STATE_DIR)",
                ) from None
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Release the lock (the kernel also drops it when the process dies)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def runtime_socket_path(state_dir: Path, environ: dict[str, str] | None = None) -> Path:
    """A short ipc socket path unique to ``state_dir``, in a 0700 runtime directory."""
    env = environ if environ is not None else dict(os.environ)
    digest = hashlib.sha256(str(state_dir).encode()).hexdigest()[:16]
    candidates = []
    if env.get("XDG_RUNTIME_DIR"):
        candidates.append(Path(env["XDG_RUNTIME_DIR"]) / "panewarden")
    candidates.append(Path(tempfile.gettempdir()) / f"panewarden-{os.getuid()}")
    for base in candidates:
        path = base / digest / "supervisor.ipc"
        if len(str(path)) <= IPC_PATH_MAX - len("ipc://"):
            return path
    raise PanewardenError(ErrorCode.CONFIG_INVALID, "no runtime directory short enough for ipc")
