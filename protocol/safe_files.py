"""The one way panewarden reads a file: bounded, non-blocking, regular files only.

Both processes read files others can plant things at: operator files (profiles,
tokens, clients, ``file:`` credentials, todo files, screen-rule overrides) and the
service's own records under the state dir. A FIFO would block an open or a read
forever, ``/dev/zero`` would never end, and a huge file would be read whole. So every
read here opens non-blocking (and without following a final symlink where asked),
checks the opened descriptor (the file checked is the file read) is a regular file
within the size limit, and reads at most ``limit_bytes + 1`` bytes.
"""

from __future__ import annotations

import errno
import os
import stat


class FileReadError(Exception):
    """A file could not be read safely; ``reason`` says why in a few words."""

    def __init__(self, reason: str, *, missing: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.missing = missing


def read_regular_file(
    path: str | os.PathLike[str],
    *,
    limit_bytes: int,
    follow_symlinks: bool = True,
    private: bool = False,
) -> bytes:
    """Read a whole regular file of at most ``limit_bytes`` bytes.

    ``follow_symlinks=False`` refuses a symlink at ``path`` (records the service wrote
    itself are never links). ``private=True`` also requires the file to be owned by
    this user with mode exactly 0600 (files holding secrets).

    Raises:
        FileReadError: missing (``missing`` set), unreadable, not a regular file, a
            symlink where refused, too large, or not private where required.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_symlinks:
            raise FileReadError("a symbolic link") from None
        missing = exc.errno == errno.ENOENT
        raise FileReadError(_reason(exc), missing=missing) from None
    except ValueError:  # NUL inside the path
        raise FileReadError("invalid path") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileReadError("not a regular file")
        if private:
            mode = stat.S_IMODE(info.st_mode)
            if mode != 0o600:
                raise FileReadError(f"mode {mode:04o}; it must be 0600")
            if info.st_uid != os.getuid():
                raise FileReadError("not owned by this user")
        if info.st_size > limit_bytes:
            raise FileReadError(f"larger than {limit_bytes} bytes")
        chunks: list[bytes] = []
        size = 0
        while size <= limit_bytes:
            chunk = os.read(fd, limit_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit_bytes:
            raise FileReadError(f"larger than {limit_bytes} bytes")
        return b"".join(chunks)
    except OSError as exc:
        raise FileReadError(_reason(exc)) from None
    finally:
        os.close(fd)


def _reason(exc: OSError) -> str:
    return os.strerror(exc.errno or errno.EIO).lower()
