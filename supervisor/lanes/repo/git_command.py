"""The one place that builds a panewarden Git command: its argv and its environment.

Git runs programs a repository names (filters, hooks, fsmonitor, external diffs,
textconv, credential helpers, ``core.sshCommand``, pagers), and a writer agent can name
them itself: it can write the repository's config and commit a ``.gitattributes``.
Nothing here may run one, nor write any index. Every command is therefore:

- ``git --no-pager --no-optional-locks -C DIR …`` with ``cwd=/``; ``status`` and ``diff``
  with ``--ignore-submodules=dirty`` (and its config twin below): Git never runs in a
  submodule;
- ``GIT_DIR``, ``GIT_WORK_TREE`` and ``GIT_COMMON_DIR`` as the supervisor resolved them
  from the worktree's files (:mod:`supervisor.lanes.repo.git_dirs`);
- an environment with nothing inherited but ``PATH`` (an allowlist: no ``PANEWARDEN_*``
  variable, no token path): no system or global config
  (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL=/dev/null``, ``HOME``), no system
  attributes, no prompt, ``GIT_OPTIONAL_LOCKS=0``;
- ``FIXED_CONFIG``, given as command-scope config (``GIT_CONFIG_COUNT``/``KEY``/``VALUE``,
  read after the repository's own config, so it wins; keys are never parsed from
  ``key=value`` text, so no subsection name can smuggle a value in);
- every filter driver the repository's config defines, neutralised: Git 2.39 has no
  way to ignore an in-tree ``.gitattributes`` (``GIT_ATTR_SOURCE`` is 2.40), so the
  driver side goes instead: ``clean``, ``smudge`` and ``process`` empty (Git runs no
  command for an empty one) and ``required`` false. The names come from ``git config
  --list``, which runs nothing;
- the same for every filter driver a submodule's config defines (``git status`` and
  ``git diff`` look into each checked-out submodule by running Git there, which reads
  that config; the settings above reach it through the environment): the git dirs under
  the common dir's ``modules/`` (absorbed submodules, nested ones included) and the
  ``.git`` of every gitlink in the index (an embedded repository);
- for a command that reads the index (status, diff, ls-files): ``GIT_INDEX_FILE``
  naming a private copy, with the original's mtime (Git's racy-entry check compares
  entries with the index file's mtime), in a private temp dir removed afterwards.
  Porcelain ``git diff`` refreshes and rewrites the index it reads, whatever
  ``--no-optional-locks`` says; with the copy the real index is never written.

Without its filter, a file selected by a filter driver whose stat data in the index is
stale is compared by its raw bytes: it reads as modified when the filter would have
changed it (see docs/operations.md, "Git isolation").
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import stat
import tempfile
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence

from protocol.errors import ErrorCode, PanewardenError

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
GLOBAL_OPTIONS = ("--no-pager", "--no-optional-locks")
# Settings that keep every program the repository could name from running.
FIXED_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.untrackedCache", "false"),
    # A split index would have a refresh write a new shared index into the git dir.
    ("core.splitIndex", "false"),
    ("core.attributesFile", "/dev/null"),
    ("core.pager", "cat"),
    ("core.askPass", ""),
    ("core.sshCommand", ""),
    ("credential.helper", ""),
    ("diff.external", ""),
    # Never look into a submodule: Git would run there, under a config nobody listed.
    # ``dirty``, not ``all``: a gitlink's recorded commit still shows (it is content of
    # the lane's tree), its checkout's files never are read.
    ("diff.ignoreSubmodules", "dirty"),
    ("submodule.recurse", "false"),
    ("status.submoduleSummary", "false"),
    ("diff.submodule", "short"),
    ("fetch.recurseSubmodules", "false"),
    ("core.gitProxy", ""),
    ("gpg.program", ""),
    ("core.editor", "true"),
    ("sequence.editor", "true"),
    # No transport at all: a lazy fetch of a partial clone fails instead of connecting.
    ("protocol.allow", "never"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
)
FILTER_NEUTRAL: tuple[tuple[str, str], ...] = (
    ("clean", ""),
    ("smudge", ""),
    ("process", ""),
    ("required", "false"),
)
# Lists the keys of every config the command will see (the repository's, its includes).
LIST_CONFIG_ARGS = ("config", "--null", "--name-only", "--list")
# Every index entry, NUL-terminated, with its mode: the gitlinks (submodules) among them.
LIST_INDEX_ARGS = ("ls-files", "--stage", "--full-name", "-z")
GITLINK_MODE = b"160000"
# Parts of a git dir that never hold a submodule's git dir (not walked).
NOT_MODULES = frozenset({"objects", "refs", "logs", "hooks", "info", "lfs", "worktrees"})
MAX_SUBMODULES = 256
GITFILE_LIMIT = 4096
COPY_CHUNK = 1024 * 1024


def argv(directory: str, args: Sequence[str]) -> list[str]:
    """The argv of one command run at ``directory``."""
    return ["git", *GLOBAL_OPTIONS, "-C", directory, *args]


def argv_for_git_dir(git_dir: str, args: Sequence[str]) -> list[str]:
    """The argv of one command about the repository at ``git_dir`` (no worktree)."""
    return ["git", *GLOBAL_OPTIONS, f"--git-dir={git_dir}", *args]


def gitlinks(listing: bytes) -> list[str]:
    """The paths of the gitlinks in ``LIST_INDEX_ARGS`` output."""
    found = []
    for entry in listing.split(b"\0"):
        meta, tab, path = entry.partition(b"\t")
        if tab and meta.split(b" ", 1)[0] == GITLINK_MODE:
            found.append(os.fsdecode(path))
    return found


def submodule_git_dirs(top: str, common_dir: str, links: Iterable[str]) -> list[str]:
    """The git dirs of the submodules below ``top``: see the module docstring.

    Returns:
        Real paths, sorted, at most ``MAX_SUBMODULES``.

    Raises:
        ValueError: when there are more.
    """
    found: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(os.path.join(common_dir, "modules")):
        if "HEAD" in filenames and "config" in filenames:
            found.add(os.path.realpath(dirpath))
            dirnames[:] = [d for d in dirnames if d not in NOT_MODULES]
        if len(found) > MAX_SUBMODULES:
            break
    for link in links:
        git_dir = _git_dir_of(os.path.join(top, link, ".git"))
        if git_dir is not None:
            found.add(git_dir)
    if len(found) > MAX_SUBMODULES:
        raise ValueError(f"more than {MAX_SUBMODULES} submodules")
    return sorted(found)


def _git_dir_of(dotgit: str) -> str | None:
    """The git dir a ``.git`` entry names: itself (a directory) or a ``gitdir:`` file."""
    try:
        fd = os.open(dotgit, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            return os.path.realpath(dotgit)
        if not stat.S_ISREG(info.st_mode):
            return None
        first = os.read(fd, GITFILE_LIMIT).split(b"\n", 1)[0]
    finally:
        os.close(fd)
    if not first.startswith(b"gitdir: "):
        return None
    named = os.fsdecode(first[len(b"gitdir: ") :].rstrip(b"\r"))
    real = os.path.realpath(os.path.join(os.path.dirname(dotgit), named))
    return real if os.path.isdir(real) else None


def filter_drivers(config_keys: Iterable[str]) -> list[str]:
    """The filter driver names (``filter.<name>.<key>``) among config keys, sorted."""
    names: set[str] = set()
    for key in config_keys:
        section, dot, rest = key.partition(".")
        if section.lower() != "filter" or not dot or "." not in rest:
            continue
        names.add(rest.rpartition(".")[0])
    return sorted(names)


def parse_config_keys(listing: bytes) -> list[str]:
    """The keys printed by ``LIST_CONFIG_ARGS`` (NUL-terminated)."""
    return [k.decode(errors="surrogateescape") for k in listing.split(b"\0") if k]


def environment(
    environ: Mapping[str, str],
    drivers: Iterable[str] = (),
    index_file: str | None = None,
    pinned: tuple[str, str, str] | None = None,
) -> dict[str, str]:
    """The environment of one command: see the module docstring. ``pinned`` is
    (worktree top, git dir, common dir) as the supervisor resolved them
    (:mod:`supervisor.lanes.repo.git_dirs`): Git reads those, whatever the worktree's
    ``commondir`` says by the time it runs."""
    config = list(FIXED_CONFIG)
    for name in drivers:
        config.extend((f"filter.{name}.{key}", value) for key, value in FILTER_NEUTRAL)
    env = {
        "PATH": environ.get("PATH") or DEFAULT_PATH,
        "LANG": "C",
        "LC_ALL": "C",
        "HOME": "/nonexistent",
        "XDG_CONFIG_HOME": "/nonexistent",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_OPTIONAL_LOCKS": "0",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_PAGER": "cat",
        "PAGER": "cat",
        "GIT_CONFIG_COUNT": str(len(config)),
    }
    for i, (key, value) in enumerate(config):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    if index_file is not None:
        env["GIT_INDEX_FILE"] = index_file
    if pinned is not None:
        env["GIT_WORK_TREE"], env["GIT_DIR"], env["GIT_COMMON_DIR"] = pinned
    return env


@contextlib.asynccontextmanager
async def private_index(git_dir: str) -> AsyncIterator[str]:
    """A private copy of ``git_dir``'s index (same bytes, same mtime); yields its path.

    When the repository has no index file yet the path names nothing (Git reads an
    empty index, as it would from the real one). The copy is removed on exit, even on
    cancellation. Copying a large index takes a while: off the event loop.

    Raises:
        PanewardenError: ``git_precondition`` when the index is not a regular file or
            cannot be read.
    """
    tmp = tempfile.mkdtemp(prefix="panewarden-index-")
    try:
        copy = os.path.join(tmp, "index")
        await asyncio.to_thread(_copy_index, os.path.join(git_dir, "index"), copy)
        yield copy
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # one or two small files


def _copy_index(source: str, copy: str) -> None:
    try:
        _copy_file(source, copy)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise PanewardenError(
            ErrorCode.GIT_PRECONDITION, f"cannot copy the index {source}: {exc.strerror or exc}"
        ) from None


def _copy_file(source: str, copy: str) -> None:
    src = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(src)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        dst = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            while chunk := os.read(src, COPY_CHUNK):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(dst, view) :]
        finally:
            os.close(dst)
    finally:
        os.close(src)
    os.utime(copy, ns=(info.st_atime_ns, info.st_mtime_ns))
