"""What a lane's pane may write, as kernel binds: the ``LaneGrant`` of its sandbox.

- A reviewer: nothing in its directory (``cwd_writable=False``).
- A writer: its worktree read-only but for its owned scopes, and what ``git add`` and
  ``git commit`` on its own branch write, found with a real repository inside bwrap:

  - its own worktree admin dir ``<common dir>/worktrees/<id>`` (index and its lock,
    HEAD, ``logs/HEAD``, COMMIT_EDITMSG), which holds its private object directory
    (:mod:`supervisor.lanes.repo.objects`): bound over ``<common dir>/objects`` inside, with
    the shared store read-only within it, so no object of the repository can be
    replaced under its id;
  - its branch's ref directory and reflog directory: an update writes ``<ref>.lock``
    beside the ref and renames it over the ref, and appends to
    ``logs/refs/heads/<branch>``; a bind of the ref file alone cannot take a rename, so
    the ref's *directory* is bound. That directory must be the branch's alone: a branch
    directly under ``refs/heads`` is refused (``refs/heads`` itself is never writable,
    or a lane could write a loose ref shadowing a packed ``main``), and so is a
    directory holding any other ref, loose or packed. Both directories are made before
    the bind (after ``git pack-refs`` they may be gone), so a bind never falls back to a
    parent directory.

  The common dir is bound visible (read-only) first: it may lie under ``/tmp``, which the
  sandbox replaces. ``objects``, ``packed-refs``, ``config``, ``hooks``, other branches'
  refs and other worktrees' admin dirs stay read-only; so does the worktree's ``.git``
  file.

A scope that does not exist yet cannot be bound (a bind needs its source): its deepest
existing ancestor inside the worktree is bound instead, and every entry in it that is not
an owned scope, nor on the way to one, read-only again. A scope that resolves outside the
worktree (through a symbolic link) is refused. This is blocking file work: off the loop.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from protocol.errors import ErrorCode, PanewardenError
from supervisor.confinement.pane import LaneGrant
from supervisor.lanes.repo import objects
from supervisor.lanes.repo.refs import branch_ref
from supervisor.lanes.scopes import overlaps

REVIEWER_GRANT = LaneGrant(cwd_writable=False)
# A directory walked for read-only re-binds lists at most this many entries.
MAX_REBOUND = 4096


def writer_grant(
    worktree: str, git_dir: str, common_dir: str, branch: str, owned: Sequence[str]
) -> LaneGrant:
    """The grant of a writer lane on ``branch`` in ``worktree`` (real paths).

    Raises:
        PanewardenError: ``invalid_argument`` for a scope outside the worktree;
            ``git_precondition`` when a Git path a commit needs is missing or the
            directories hold too many entries to bind.
    """
    writable: list[str] = []
    read_only: list[str] = []
    for scope in owned:
        path = os.path.join(worktree, scope)
        real = os.path.realpath(path)
        if not _inside(real, worktree):
            raise PanewardenError(
                ErrorCode.INVALID_ARGUMENT,
                f"owned scope {scope!r} resolves outside the worktree ({real})",
            )
        if os.path.lexists(path):
            writable.append(real)
            continue
        opened = _existing_ancestor(path, worktree)
        writable.append(opened)
        read_only += _rebind_except(opened, worktree, owned)
    dotgit = os.path.join(worktree, ".git")
    if os.path.lexists(dotgit):
        read_only.append(dotgit)
    ref = branch_ref(branch)
    if os.path.dirname(ref) == "refs/heads" or not ref.startswith("refs/heads/"):
        raise PanewardenError(
            ErrorCode.INVALID_ARGUMENT,
            "a writer's branch must be in a directory of its own (`lane-a/work`, not "
            "`lane-a`): refs/heads itself is never writable to a lane",
        )
    if not os.path.isdir(git_dir):
        raise PanewardenError(ErrorCode.GIT_PRECONDITION, f"{git_dir} is not a directory")
    private = objects.prepare(git_dir)
    writable.append(git_dir)
    _refuse_shared_ref_dir(common_dir, ref)
    for root in (common_dir, os.path.join(common_dir, "logs")):
        own = os.path.join(root, ref)
        opened = _own_ref_dir(own)
        writable.append(opened)
        read_only += _rebind_refs(opened, own)
    return LaneGrant(
        cwd_writable=False,
        visible=(common_dir,),
        writable=tuple(dict.fromkeys(writable)),
        read_only=tuple(dict.fromkeys(read_only)),
        moved=objects.mounts(private, common_dir),
    )


def _own_ref_dir(own: str) -> str:
    """The directory of the lane's ref (or reflog) ``own`` under ``root``, made when
    missing; never through a link."""
    directory = os.path.dirname(own)
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
    except OSError as exc:
        raise PanewardenError(
            ErrorCode.GIT_PRECONDITION, f"cannot make {directory}: {exc.strerror}"
        ) from None
    if os.path.realpath(directory) != directory:
        raise PanewardenError(
            ErrorCode.GIT_PRECONDITION, f"{directory} resolves elsewhere (a symbolic link)"
        )
    return directory


def _refuse_shared_ref_dir(common_dir: str, ref: str) -> None:
    """Refuse a lane whose ref directory holds another ref, loose or packed: the lane
    could write a loose ref there that shadows it."""
    prefix = os.path.dirname(ref) + "/"
    directory = os.path.join(common_dir, prefix)
    for where, _dirs, files in os.walk(directory):
        for name in files:
            found = os.path.relpath(os.path.join(where, name), common_dir)
            if found not in (ref, ref + ".lock"):
                raise _shared(found, ref)
    try:
        with open(os.path.join(common_dir, "packed-refs"), "rb") as handle:
            lines = handle.read().decode(errors="surrogateescape").splitlines()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise PanewardenError(
            ErrorCode.GIT_PRECONDITION, f"cannot read packed-refs: {exc.strerror}"
        ) from None
    for line in lines:
        fields = line.split(" ", 1)
        if len(fields) == 2 and fields[1].startswith(prefix) and fields[1] != ref:
            raise _shared(fields[1], ref)


def _shared(found: str, ref: str) -> PanewardenError:
    return PanewardenError(
        ErrorCode.GIT_PRECONDITION,
        f"{found} lies in the directory of the lane's branch {ref}; a writer's branch "
        "must be the only ref in its directory",
    )


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _existing_ancestor(path: str, root: str) -> str:
    """The deepest existing directory on the way from ``root`` to ``path``."""
    current = os.path.dirname(path)
    while current != root and not os.path.isdir(current) and _inside(current, root):
        current = os.path.dirname(current)
    return current if _inside(current, root) else root


def _entries(directory: str) -> list[str]:
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        raise PanewardenError(
            ErrorCode.GIT_PRECONDITION, f"cannot list {directory}: {exc.strerror}"
        ) from None
    if len(names) > MAX_REBOUND:
        raise PanewardenError(
            ErrorCode.GIT_PRECONDITION,
            f"{directory} holds more than {MAX_REBOUND} entries; a lane cannot be confined to it",
        )
    return [os.path.join(directory, name) for name in names]


def _rebind_except(directory: str, worktree: str, owned: Sequence[str]) -> list[str]:
    """Every entry below ``directory`` that is neither an owned scope nor on the way to
    one (those ways are walked)."""
    found: list[str] = []
    for entry in _entries(directory):
        rel = os.path.relpath(entry, worktree)
        if any(overlaps(rel, scope) and len(rel) >= len(scope) for scope in owned):
            continue  # the scope itself, or inside it: writable
        if any(overlaps(rel, scope) for scope in owned) and os.path.isdir(entry):
            found += _rebind_except(entry, worktree, owned)  # on the way to a scope
        else:
            found.append(entry)
    return found


def _rebind_refs(directory: str, own: str) -> list[str]:
    """Every entry below ``directory`` but the lane's own ref (or reflog) and its lock,
    walking only the directories on the way to it."""
    found: list[str] = []
    for entry in _entries(directory):
        if entry in (own, own + ".lock"):
            continue
        if _inside(own, entry) and os.path.isdir(entry):
            found += _rebind_refs(entry, own)
        else:
            found.append(entry)
    return found
