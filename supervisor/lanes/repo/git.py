"""Reading Git, and only reading it: the one module that runs ``git`` in the supervisor.

Every command is a fixed argv and environment built by :mod:`supervisor.lanes.repo.git_command`
(no program the repository names runs; a command that reads the index reads a private
copy of it), with a timeout. Each query first lists the repository's config keys (and,
for a command that looks into submodules, each submodule's), to neutralise every filter
driver they define. It runs through a ``ChildRunner`` (the
supervisor's managed helpers), which is also the seam where tests inject failures. Any
failure is ``git_precondition`` with Git's first line of complaint; no command here ever
changes a repository, a worktree, an index or a ref.

A *linked worktree* is one whose git dir differs from the repository's common dir: the
primary checkout and an independent clone have them equal and are refused as writer
lanes. The repository's identity is the realpath of its common dir.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from protocol.errors import ErrorCode, PanewardenError
from supervisor.confinement.policy import bwrap_argv
from supervisor.lanes import sandbox
from supervisor.lanes.repo import git_command, git_dirs, objects
from supervisor.lanes.repo.git_dirs import GitDirs
from supervisor.lanes.repo.refs import short_branch
from supervisor.workers.subprocesses import ChildResult, ChildRunner

GIT_TIMEOUT_S = 30.0
# Small answers (refs, paths); larger outputs say how much they may be.
SMALL_OUTPUT = 64 * 1024
LIST_OUTPUT = 16 * 1024 * 1024
MESSAGE_LIMIT = 300
LAYOUT_ARGS = (
    "rev-parse", "--path-format=absolute", "--show-toplevel", "--git-dir", "--git-common-dir",
)  # fmt: skip


@dataclass(frozen=True)
class Layout:
    """Where a directory sits in Git: its worktree top, git dir and common dir."""

    toplevel: str
    git_dir: str
    common_dir: str

    @property
    def linked(self) -> bool:
        """True for a linked worktree (not the primary checkout, not a clone)."""
        return self.git_dir != self.common_dir


@dataclass(frozen=True)
class Digest:
    """A command's output as a SHA-256 and a size (its bytes are not kept)."""

    sha256: str
    size: int


def _real_layout(toplevel: str, git_dir: str, common_dir: str) -> Layout:
    real = os.path.realpath
    return Layout(toplevel=real(toplevel), git_dir=real(git_dir), common_dir=real(common_dir))


def _failure(what: str, result: ChildResult) -> PanewardenError:
    if result.timed_out:
        why = f"took longer than {GIT_TIMEOUT_S:.0f}s"
    else:
        lines = result.stderr.decode(errors="replace").strip().splitlines()
        why = lines[0] if lines else f"exit status {result.returncode}"
    return PanewardenError(ErrorCode.GIT_PRECONDITION, f"git {what}: {why}"[:MESSAGE_LIMIT])


class Git:
    """Read-only Git queries for one host; see the module docstring."""

    def __init__(
        self,
        runner: ChildRunner,
        environ: Mapping[str, str],
        *,
        timeout_s: float = GIT_TIMEOUT_S,
        sandbox_of: Callable[[], sandbox.GitSandbox | None] = lambda: None,
    ) -> None:
        """``sandbox_of``: the Git sandbox of this host, asked at each command (the host
        check is made at service start); None runs Git unsandboxed."""
        self._runner = runner
        self._environ = dict(environ)
        self._timeout_s = timeout_s
        self._sandbox_of = sandbox_of

    async def _run(
        self,
        directory: str,
        *args: str,
        limit: int = SMALL_OUTPUT,
        ok: tuple[int, ...] = (0,),
        reads_index: bool = False,
    ) -> ChildResult:
        # Where Git lives, read from the files (a rewritten commondir or a symlinked
        # .git is refused here, not followed by Git); Git is then pinned to it.
        dirs = await asyncio.to_thread(git_dirs.resolve, directory)
        pinned = (dirs.toplevel, dirs.git_dir, dirs.common_dir)
        if reads_index:
            # Git never looks into a submodule here; a .git it could follow all the same
            # (an embedded repository, a link) is refused rather than trusted.
            await asyncio.to_thread(git_dirs.nested_git_entries, dirs)
        # The listings run nothing and write nothing: they name the filter drivers to
        # neutralise (the submodules' too, should Git ever look into them).
        bare = git_command.environment(self._environ, pinned=pinned)
        keys = await self._config_keys(git_command.argv(directory, ()), bare, directory, dirs)
        if not reads_index:
            drivers = git_command.filter_drivers(keys)
            env = git_command.environment(self._environ, drivers, pinned=pinned)
            return await self._exec(directory, args, env, dirs, limit=limit, ok=ok)
        keys += await self._submodule_config_keys(directory, dirs, bare)
        drivers = git_command.filter_drivers(keys)
        async with git_command.private_index(dirs.git_dir) as index:
            env = git_command.environment(self._environ, drivers, index, pinned)
            return await self._exec(
                directory, args, env, dirs, limit=limit, ok=ok, writable=os.path.dirname(index)
            )

    async def _submodule_config_keys(
        self, directory: str, dirs: GitDirs, env: dict[str, str]
    ) -> list[str]:
        index = await self._exec(
            directory, git_command.LIST_INDEX_ARGS, env, dirs, limit=LIST_OUTPUT
        )
        if index.truncated:
            raise PanewardenError(
                ErrorCode.GIT_PRECONDITION, f"the index of {directory} is over {LIST_OUTPUT} bytes"
            )
        links = git_command.gitlinks(index.stdout)
        try:
            git_dirs_found = await asyncio.to_thread(
                git_command.submodule_git_dirs, dirs.toplevel, dirs.common_dir, links
            )
        except ValueError as exc:
            raise PanewardenError(ErrorCode.GIT_PRECONDITION, f"{directory}: {exc}") from None
        # A submodule's own git dir, not the worktree's: nothing pinned.
        plain = git_command.environment(self._environ)
        keys: list[str] = []
        for git_dir in git_dirs_found:
            prefix = git_command.argv_for_git_dir(git_dir, ())
            keys += await self._config_keys(prefix, plain, git_dir, dirs)
        return keys

    async def _config_keys(
        self, prefix: list[str], env: dict[str, str], where: str, dirs: GitDirs
    ) -> list[str]:
        argv = [*prefix, *git_command.LIST_CONFIG_ARGS]
        listing = await self._spawn(argv, env, dirs, LIST_OUTPUT, (0,), f"config in {where}")
        if listing.truncated:
            raise PanewardenError(
                ErrorCode.GIT_PRECONDITION, f"the Git config of {where} is too large"
            )
        return git_command.parse_config_keys(listing.stdout)

    async def _exec(
        self,
        directory: str,
        args: tuple[str, ...],
        env: dict[str, str],
        dirs: GitDirs,
        *,
        limit: int = SMALL_OUTPUT,
        ok: tuple[int, ...] = (0,),
        writable: str | None = None,
    ) -> ChildResult:
        argv = git_command.argv(directory, args)
        # A writer lane's own objects, read after the shared store's (lanes.objects).
        env = {**env, **objects.alternate_env(dirs.git_dir)}
        what = f"{args[0]} in {directory}"
        return await self._spawn(argv, env, dirs, limit, ok, what, writable)

    async def _spawn(
        self,
        argv: list[str],
        env: dict[str, str],
        dirs: GitDirs,
        limit: int,
        ok: tuple[int, ...],
        what: str,
        writable: str | None = None,
    ) -> ChildResult:
        """Run one built argv, in the sandbox when the host has one; ``what`` (the
        command, where) names it in a failure."""
        box = self._sandbox_of()
        child_env = env
        if box is not None:
            policy = sandbox.git_policy(
                box,
                read_only=git_dirs.visible_paths(dirs),
                writable=() if writable is None else (writable,),
                env=env,
            )
            argv = bwrap_argv(box.bwrap, policy, argv)
            child_env = {"PATH": env["PATH"]}
        try:
            result = await self._runner(
                argv, cwd="/", env=child_env, timeout_s=self._timeout_s, output_limit=limit
            )
        except PanewardenError as exc:
            raise PanewardenError(ErrorCode.GIT_PRECONDITION, exc.message) from None
        if result.timed_out or result.returncode not in ok:
            raise _failure(what, result)
        return result

    async def _line(self, directory: str, *args: str) -> str:
        result = await self._run(directory, *args)
        return result.stdout.decode(errors="surrogateescape").rstrip("\n")

    async def layout(self, directory: str) -> Layout:
        """The worktree top, git dir and common dir of ``directory`` (absolute, real)."""
        lines = (await self._line(directory, *LAYOUT_ARGS)).split("\n")
        if len(lines) != 3 or not all(lines):
            raise PanewardenError(
                ErrorCode.GIT_PRECONDITION, f"{directory} is not inside a Git worktree"
            )
        return _real_layout(*lines)

    async def head_ref(self, directory: str) -> str | None:
        """The full ref HEAD names (``refs/heads/…``); None when HEAD is detached."""
        result = await self._run(directory, "symbolic-ref", "--quiet", "HEAD", ok=(0, 1))
        if result.returncode == 1:
            return None
        return result.stdout.decode(errors="surrogateescape").rstrip("\n")

    async def branch(self, directory: str) -> str | None:
        """The checked-out branch's name (``refs/heads/`` dropped); None when detached."""
        ref = await self.head_ref(directory)
        return None if ref is None else short_branch(ref)

    async def head(self, directory: str) -> str:
        """The full id of the commit HEAD names."""
        return await self._line(directory, "rev-parse", "--verify", "HEAD^{commit}")

    async def is_ancestor(self, directory: str, ancestor: str, descendant: str) -> bool:
        """True when commit ``ancestor`` is ``descendant`` or one of its ancestors."""
        result = await self._run(
            directory, "merge-base", "--is-ancestor", ancestor, descendant, ok=(0, 1)
        )
        return result.returncode == 0

    async def status(self, directory: str) -> Digest:
        """SHA-256 of the exact ``status --porcelain=v1 --untracked-files=all
        --ignore-submodules=dirty`` bytes."""
        result = await self._run(
            directory,
            "status",
            "--porcelain=v1",
            "--untracked-files=all",
            "--ignore-submodules=dirty",
            limit=0,
            reads_index=True,
        )
        return Digest(result.stdout_sha256, result.stdout_size)

    async def diff_from(self, directory: str, base: str) -> Digest:
        """SHA-256 of ``diff --binary`` from commit ``base`` to the worktree's files."""
        result = await self._run(
            directory,
            "diff",
            "--binary",
            "--full-index",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "--ignore-submodules=dirty",
            base,
            "--",
            limit=0,
            reads_index=True,
        )
        return Digest(result.stdout_sha256, result.stdout_size)

    async def untracked(self, directory: str) -> list[str]:
        """Untracked, not ignored files (worktree-relative paths), sorted bytewise."""
        result = await self._run(
            directory,
            "ls-files",
            "--others",
            "--exclude-standard",
            "-z",
            limit=LIST_OUTPUT,
            reads_index=True,
        )
        if result.truncated:
            raise PanewardenError(
                ErrorCode.GIT_PRECONDITION,
                f"more untracked files in {directory} than {LIST_OUTPUT} bytes of names",
            )
        names = [n for n in result.stdout.split(b"\0") if n]
        return [n.decode(errors="surrogateescape") for n in sorted(names)]

    async def ignored(self, directory: str, scopes: Sequence[str]) -> list[str]:
        """Files Git ignores under ``scopes`` (worktree-relative literal paths),
        sorted bytewise; none without scopes."""
        if not scopes:
            return []
        pathspecs = [f":(literal){scope}" for scope in scopes]
        result = await self._run(
            directory,
            "ls-files",
            "--others",
            "--ignored",
            "--exclude-standard",
            "-z",
            "--",
            *pathspecs,
            limit=LIST_OUTPUT,
            reads_index=True,
        )
        if result.truncated:
            raise PanewardenError(
                ErrorCode.GIT_PRECONDITION,
                f"more ignored files in {directory} than {LIST_OUTPUT} bytes of names",
            )
        names = [n for n in result.stdout.split(b"\0") if n]
        return [n.decode(errors="surrogateescape") for n in sorted(names)]

    async def show(self, directory: str, commit: str, path: str, limit: int) -> bytes | None:
        """The bytes of ``path`` as it is at ``commit``; None when it is not there.

        Raises:
            PanewardenError: ``git_precondition`` when larger than ``limit``, or on any
                other failure (an unknown commit among them).
        """
        result = await self._run(directory, "cat-file", "-e", f"{commit}:{path}", ok=(0, 1, 128))
        if result.returncode != 0:
            await self._run(directory, "cat-file", "-e", f"{commit}^{{commit}}")
            return None
        # cat-file, not show: the blob's bytes, never through a textconv filter.
        shown = await self._run(directory, "cat-file", "blob", f"{commit}:{path}", limit=limit)
        if shown.truncated:
            raise PanewardenError(
                ErrorCode.GIT_PRECONDITION, f"{path} at {commit[:12]} is larger than {limit} bytes"
            )
        return shown.stdout
