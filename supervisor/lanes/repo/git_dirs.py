"""Where a worktree's Git lives, found by reading its files, never by asking Git.

A writer lane can write its own worktree admin dir (``<common>/worktrees/<name>``), so
the ``commondir`` and ``gitdir`` files there are the lane's to rewrite, and it can make
any directory it owns a repository. Git follows whatever those files and ``.git``
entries name, so the supervisor resolves them itself first, refuses what it will not
follow, and then hands Git the answer (``GIT_DIR``, ``GIT_WORK_TREE``,
``GIT_COMMON_DIR``), so Git reads exactly the dirs that were checked and bound into its
sandbox.

``resolve`` finds the worktree top (the nearest ancestor holding a ``.git`` entry),
refuses a ``.git`` that is a symbolic link, reads a gitfile's ``gitdir:`` line, and for
a linked worktree reads ``commondir`` and checks that ``gitdir`` names this worktree's
``.git`` again (a lane pointing its admin dir at another worktree or repository is
refused, not followed).

``nested_git_entries`` walks a worktree (bounded, never following links) for ``.git``
entries below its top: a symbolic link, a directory (an embedded repository) or a
gitfile naming anything but an absorbed submodule's git dir under the common dir's or
the worktree's git dir's ``modules/`` are refused. Git run there could read a config nobody listed.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from protocol.errors import ErrorCode, PanewardenError

DOTGIT = ".git"
GITFILE_LIMIT = 4096
# Entries a worktree walk looks at before it refuses (a bound on the time it takes).
MAX_WALK_ENTRIES = 500_000
ALTERNATES_LIMIT = 64 * 1024


@dataclass(frozen=True)
class GitDirs:
    """A worktree's top, git dir and common dir: real paths, read from the files."""

    toplevel: str
    git_dir: str
    common_dir: str


def _precondition(message: str) -> PanewardenError:
    return PanewardenError(ErrorCode.GIT_PRECONDITION, message)


def resolve(directory: str) -> GitDirs:
    """The Git dirs of the worktree holding ``directory``; see the module docstring.

    Raises:
        PanewardenError: ``git_precondition`` when there is none, or its ``.git``,
            ``commondir`` or ``gitdir`` is refused.
    """
    top = os.path.realpath(directory)
    while not os.path.lexists(os.path.join(top, DOTGIT)):
        parent = os.path.dirname(top)
        if parent == top:
            raise _precondition(f"{directory} is not inside a Git worktree")
        top = parent
    dotgit = os.path.join(top, DOTGIT)
    try:
        info = os.lstat(dotgit)
    except OSError as exc:
        raise _precondition(f"cannot read {dotgit}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(info.st_mode):
        raise _precondition(f"{dotgit} is a symbolic link; Git dirs are never followed there")
    if stat.S_ISDIR(info.st_mode):
        return GitDirs(toplevel=top, git_dir=dotgit, common_dir=dotgit)
    git_dir = gitfile_target(dotgit)
    if git_dir is None:
        raise _precondition(f"{dotgit} is neither a git dir nor a gitfile")
    named = _small_file(os.path.join(git_dir, "commondir"))
    if named is None:
        return GitDirs(toplevel=top, git_dir=git_dir, common_dir=git_dir)
    common_dir = os.path.realpath(os.path.join(git_dir, named))
    if not os.path.isdir(common_dir):
        raise _precondition(f"the commondir of {git_dir} names no directory")
    back = _small_file(os.path.join(git_dir, "gitdir"))
    if back is None or os.path.realpath(os.path.join(git_dir, back)) != dotgit:
        raise _precondition(f"the git dir {git_dir} does not belong to the worktree {top}")
    return GitDirs(toplevel=top, git_dir=git_dir, common_dir=common_dir)


def gitfile_target(path: str) -> str | None:
    """The real git dir a gitfile's ``gitdir:`` line names; None when ``path`` is not a
    regular file holding one, or it names no directory."""
    first = _small_file(path)
    if first is None or not first.startswith("gitdir: "):
        return None
    real = os.path.realpath(os.path.join(os.path.dirname(path), first[len("gitdir: ") :]))
    return real if os.path.isdir(real) else None


def _small_file(path: str) -> str | None:
    """The first line of a regular file (links not followed); None when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        first = os.read(fd, GITFILE_LIMIT).split(b"\n", 1)[0].rstrip(b"\r")
    finally:
        os.close(fd)
    return os.fsdecode(first)


def nested_git_entries(dirs: GitDirs, limit: int = MAX_WALK_ENTRIES) -> None:
    """Refuse the worktree when a ``.git`` below its top could steer Git.

    Raises:
        PanewardenError: ``git_precondition`` naming the first such path, or when the
            worktree holds more than ``limit`` entries.
    """
    # Git keeps a linked worktree's submodules under its own git dir.
    modules = tuple(
        os.path.join(where, "modules") + os.sep for where in (dirs.common_dir, dirs.git_dir)
    )
    seen = 0
    for dirpath, dirnames, filenames in os.walk(dirs.toplevel, onerror=None):
        seen += len(dirnames) + len(filenames)
        if seen > limit:
            raise _precondition(
                f"{dirs.toplevel} holds more than {limit} files and directories; "
                "the service does not check a worktree that large"
            )
        if dirpath == dirs.toplevel:
            # The worktree's own .git (checked by resolve) is never walked.
            dirnames[:] = [d for d in dirnames if d != DOTGIT]
            continue
        if DOTGIT not in dirnames and DOTGIT not in filenames:
            continue
        path = os.path.join(dirpath, DOTGIT)
        try:
            mode = os.lstat(path).st_mode
        except OSError as exc:
            raise _precondition(f"cannot read {path}: {exc.strerror or exc}") from None
        if stat.S_ISLNK(mode):
            raise _precondition(f"{path} is a symbolic link to a git dir; refused")
        if stat.S_ISDIR(mode):
            raise _precondition(f"{path} is an embedded repository; refused")
        target = gitfile_target(path)
        if target is None or not target.startswith(modules):
            raise _precondition(f"{path} names a git dir outside the modules/ of {dirs.git_dir}")
        dirnames[:] = [d for d in dirnames if d != DOTGIT]


def visible_paths(dirs: GitDirs) -> list[str]:
    """What Git must read in its sandbox: the worktree, its git dir, its common dir and
    the object stores the common dir's and the git dir's ``objects/info/alternates``
    name (a writer's private object dir borrows the shared one, or the reverse)."""
    paths = [dirs.toplevel, dirs.git_dir, dirs.common_dir]
    for git_dir in dict.fromkeys((dirs.git_dir, dirs.common_dir)):
        objects = os.path.join(git_dir, "objects")
        try:
            with open(os.path.join(objects, "info", "alternates"), "rb") as handle:
                lines = handle.read(ALTERNATES_LIMIT).splitlines()
        except OSError:
            continue
        for line in lines:
            if line and not line.startswith(b"#"):
                named = os.path.join(objects, os.fsdecode(line.strip()))
                paths.append(os.path.realpath(named))
    return [path for path in dict.fromkeys(paths) if os.path.isdir(path)]
