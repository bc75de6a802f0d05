"""The one place that builds a panewarden Git command: its argv and its environment.

Git runs programs a repository names (filters, hooks, fsmonitor, external diffs,
textconv, credential helpers, ``core.sshCommand``, pagers), and a writer agent can name
them itself: it can write the repository's config and commit a ``.gitattributes``.
Nothing here may run one, nor write any index. Every command is therefore:

- ``git --no-pager --no-optional-locks -C DIR …`` with ``cwd=/``;
- an environment with nothing inherited but ``PATH``: no system or global config
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
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence

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
COPY_CHUNK = 1024 * 1024


def argv(directory: str, args: Sequence[str]) -> list[str]:
    """The argv of one command run at ``directory``."""
    return ["git", *GLOBAL_OPTIONS, "-C", directory, *args]


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
) -> dict[str, str]:
    """The environment of one command: see the module docstring."""
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
    return env


@contextlib.asynccontextmanager
async def private_index(git_dir: str) -> AsyncIterator[str]:
    """A private copy of ``git_dir``'s index (same bytes, same mtime); yields its path.

    When the repository has no index file yet the path names nothing (Git reads an
    empty index, as it would from the real one). The copy is removed on exit, even on
    cancellation. Copying a large index takes a while: off the event loop.
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
        src = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        info = os.fstat(src)
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
