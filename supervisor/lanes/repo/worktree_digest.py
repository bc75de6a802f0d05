"""The content digest of a writer's worktree, taken without running repository code.

``worktree_sha256`` is the SHA-256 of, in order:

1. the format tag ``panewarden-worktree-v2\\n``;
2. ``diff <size> <sha256>\\n``: the size and SHA-256 of ``git diff --binary --full-index
   --no-color --no-ext-diff --no-textconv <base> --`` run at the worktree's top (every
   change to tracked files since the accepted base commit, committed or not);
3. for each untracked, not ignored file (``git ls-files --others --exclude-standard``),
   sorted bytewise by path: ``<kind> <path length> <path> <size> <sha256>\\n``, where
   kind is ``file``, ``exec`` (any execute bit), ``link`` (the digest is over the link's
   target, which is never followed) or ``other`` (size 0, empty digest), and the SHA-256
   is over the file's bytes;
4. ``ignored <count>\\n``, then for each file Git ignores under the lane's owned scopes
   (``git ls-files --others --ignored --exclude-standard -z -- <scopes>``), sorted
   bytewise, an entry of the same form. A lane can make what it writes ignored (a
   ``.gitignore`` of ``*`` in a new directory), and a recipe would import it all the
   same: what the lane can write is in the digest, ignored or not. Outside the owned
   scopes the lane writes nothing, so ignored files there (a recipe's outputs, a venv)
   are not part of it.

Every length is given before what it measures, so two different worktrees cannot
produce the same byte stream (no untracked entry's kind is ``ignored``).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass

from protocol.errors import ErrorCode, PanewardenError
from supervisor.lanes.repo.git import Git

FORMAT_TAG = b"panewarden-worktree-v2\n"
# A worktree whose untracked files hold more than this is refused (the digest reads all).
UNTRACKED_LIMIT_BYTES = 1024**3
READ_CHUNK = 1024 * 1024
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


@dataclass(frozen=True)
class WorktreeDigest:
    """A worktree's digest and what went into it (sizes and counts only)."""

    sha256: str
    diff_bytes: int
    untracked_files: int
    untracked_bytes: int
    ignored: tuple[str, ...] = ()
    ignored_bytes: int = 0


async def worktree_digest(
    git: Git, worktree: str, base_commit: str, scopes: Sequence[str] = ()
) -> WorktreeDigest:
    """The digest of ``worktree`` against ``base_commit``, with the ignored files under
    ``scopes`` (the lane's owned ones); see the module docstring.

    Raises:
        PanewardenError: ``git_precondition`` when Git fails, or the untracked and
            ignored files are larger than ``UNTRACKED_LIMIT_BYTES``.
    """
    diff = await git.diff_from(worktree, base_commit)
    names = await git.untracked(worktree)
    ignored = await git.ignored(worktree, scopes)
    head = hashlib.sha256(FORMAT_TAG)
    head.update(b"diff %d %s\n" % (diff.size, diff.sha256.encode()))
    # Reading files can take a while: off the event loop.
    total = await asyncio.to_thread(_hash_untracked, head, worktree, names, 0)
    head.update(b"ignored %d\n" % len(ignored))
    both = await asyncio.to_thread(_hash_untracked, head, worktree, ignored, total)
    return WorktreeDigest(
        head.hexdigest(), diff.size, len(names), total, tuple(ignored), both - total
    )


def _hash_untracked(into: hashlib._Hash, worktree: str, names: list[str], total: int) -> int:
    """Hash each entry into ``into``; the bytes read, added to ``total``."""
    for name in names:
        raw = os.fsencode(name)
        kind, size, sha256 = _entry(os.path.join(worktree, name))
        total += size
        if total > UNTRACKED_LIMIT_BYTES:
            raise PanewardenError(
                ErrorCode.GIT_PRECONDITION,
                f"the untracked and ignored files of {worktree} hold more than "
                f"{UNTRACKED_LIMIT_BYTES} "
                "bytes; ignore or remove what is not part of the work",
            )
        into.update(b"%s %d %s %d %s\n" % (kind, len(raw), raw, size, sha256.encode()))
    return total


def _entry(path: str) -> tuple[bytes, int, str]:
    """(kind, size, sha256) of one untracked path, never following a link."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return b"other", 0, EMPTY_SHA256
    if stat.S_ISLNK(info.st_mode):
        target = os.readlink(os.fsencode(path))
        return b"link", len(target), hashlib.sha256(target).hexdigest()
    if not stat.S_ISREG(info.st_mode):
        return b"other", 0, EMPTY_SHA256
    kind = b"exec" if info.st_mode & 0o111 else b"file"
    digest = hashlib.sha256()
    size = 0
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return b"other", 0, EMPTY_SHA256
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b"other", 0, EMPTY_SHA256
        while chunk := os.read(fd, READ_CHUNK):
            digest.update(chunk)
            size += len(chunk)
            if size > UNTRACKED_LIMIT_BYTES:
                break
    finally:
        os.close(fd)
    return kind, size, digest.hexdigest()
