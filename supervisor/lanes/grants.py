"""What a lane's pane may write, as kernel binds: the ``LaneGrant`` of its sandbox.

- A reviewer: nothing in its directory (``cwd_writable=False``).
- A writer: its worktree read-only but for its owned scopes, and what ``git add`` and
  ``git commit`` on its own branch write, found with a real repository inside bwrap:

  - ``<common dir>/objects`` (new loose objects, their fan-out directories);
  - its own worktree admin dir ``<common dir>/worktrees/<id>`` (index and its lock,
    HEAD, ``logs/HEAD``, COMMIT_EDITMSG);
  - its branch's loose ref and reflog: an update writes ``<ref>.lock`` beside the ref
    and renames it over the ref, and appends to ``logs/refs/heads/<branch>``; a bind of
    the ref file alone cannot take a rename, so the ref's *directory* (and the reflog's)
    is bound, with every other entry already in it bound read-only again. With the branch
    in a directory of its own (``lane/alpha/work``) that is exactly the lane's ref; for a
    branch directly under ``refs/heads`` it is ``refs/heads`` with every existing branch
    read-only: a new branch name can still be created there (docs/operations.md).

  The common dir is bound visible (read-only) first: it may lie under ``/tmp``, which the
  sandbox replaces. ``packed-refs``, ``config``, ``hooks``, other branches' refs and other
  worktrees' admin dirs stay read-only; so does the worktree's ``.git`` file.

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
from supervisor.lanes.refs import branch_ref
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
    for needed in (os.path.join(common_dir, "objects"), git_dir):
        if not os.path.isdir(needed):
            raise PanewardenError(ErrorCode.GIT_PRECONDITION, f"{needed} is not a directory")
        writable.append(needed)
    for root in (common_dir, os.path.join(common_dir, "logs")):
        own = os.path.join(root, ref)
        top = os.path.join(root, "refs", "heads")
        if not os.path.isdir(top):
            continue  # no reflogs at all: Git creates none on a commit either
        opened = _existing_ancestor(own, top)
        writable.append(opened)
        read_only += _rebind_refs(opened, own)
    return LaneGrant(
        cwd_writable=False,
        visible=(common_dir,),
        writable=tuple(dict.fromkeys(writable)),
        read_only=tuple(dict.fromkeys(read_only)),
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
