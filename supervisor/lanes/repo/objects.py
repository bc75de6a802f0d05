"""A writer's private object directory, and the verified import of its objects.

A writer never writes the repository's shared object store. Inside its sandbox
``<common dir>/objects`` is its own directory, ``<worktree admin dir>/panewarden-objects``
(bound there writable), and the shared store is bound read-only inside it at
``panewarden-shared``, which that directory's ``info/alternates`` names (a relative path,
so it means the same inside and out). Git inside reads every object of the repository
and writes new ones to the lane's directory; no variable is needed, so no other
repository the agent uses is touched, and an object of the shared store can never be
replaced under its id: it is not there to write. Nothing the lane wrote is seen by any
other checkout before it is verified.

The supervisor's own Git on the lane's worktree reads the private directory as an
alternate *after* the shared store (:func:`alternate_env`): the shared copy of an id always
wins.

At ``writer_release`` (:func:`import_new`) every object reachable from the lane's head
and not in the shared store is read back, re-hashed (an object whose content does not
hash to its id is refused, ``object_invalid``), packed and indexed into the shared store by
``git index-pack --strict`` (which hashes again and runs Git's fsck checks: a tree naming
``.git``, a broken link). Its Git runs as the supervisor's managed helpers, with the
fixed environment of :mod:`supervisor.lanes.repo.git_command`, on the common dir alone (no
worktree, no index: nothing there runs a filter or a hook).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from protocol.errors import ErrorCode, PanewardenError
from supervisor.lanes.repo import git_command
from supervisor.workers.subprocesses import ChildRunner

PRIVATE_DIR = "panewarden-objects"
# Where the shared store is bound (read-only) inside the private dir, in the sandbox.
SHARED_MOUNT = "panewarden-shared"
IMPORT_TIMEOUT_S = 120.0
# The bytes of new objects one release may import (their content, uncompressed).
MAX_IMPORT_BYTES = 256 * 1024 * 1024
MESSAGE_LIMIT = 300


def private_dir(git_dir: str) -> str:
    """The private object directory of the worktree whose admin dir is ``git_dir``."""
    return os.path.join(git_dir, PRIVATE_DIR)


def prepare(git_dir: str) -> str:
    """Make the private object directory (kept when it exists: a lane closed by force
    leaves its objects there for the next lane on the worktree); returns its path.

    Raises:
        PanewardenError: ``git_precondition`` when it cannot be made or is not a
            plain directory.
    """
    path = private_dir(git_dir)
    try:
        for part in ("info", "pack", SHARED_MOUNT):
            os.makedirs(os.path.join(path, part), mode=0o755, exist_ok=True)
        if os.path.islink(path) or not os.path.isdir(path):
            raise PanewardenError(ErrorCode.GIT_PRECONDITION, f"{path} is not a directory")
        # Written anew each start: the last lane may have rewritten it.
        alternates = os.path.join(path, "info", "alternates")
        with open(alternates + ".tmp", "w") as handle:
            handle.write(SHARED_MOUNT + "\n")
        os.replace(alternates + ".tmp", alternates)
    except OSError as exc:
        raise PanewardenError(
            ErrorCode.GIT_PRECONDITION, f"cannot make {path}: {exc.strerror}"
        ) from None
    return path


def mounts(private: str, common_dir: str) -> tuple[tuple[str, str, bool], ...]:
    """The sandbox binds of a writer: its private dir over the shared store, then the
    shared store read-only inside it."""
    shared = os.path.join(common_dir, "objects")
    return ((private, shared, True), (shared, os.path.join(shared, SHARED_MOUNT), False))


def alternate_env(git_dir: str) -> dict[str, str]:
    """For the supervisor's Git on the worktree whose (resolved) admin dir is
    ``git_dir``: the lane's private objects as an alternate when it has them."""
    path = private_dir(git_dir)
    if os.path.islink(path) or not os.path.isdir(path):
        return {}
    return {"GIT_ALTERNATE_OBJECT_DIRECTORIES": _quoted(path)}


def _quoted(path: str) -> str:
    """One entry of an alternates list: Git splits on ``:`` unless it is quoted."""
    if ":" not in path and not path.startswith('"'):
        return path
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'


# Feeds a file to a Git command's stdin: the managed runner (safe from the supervisor's
# leftover sweep) takes no more than a few KiB of stdin itself.
STDIN_FROM_FILE = ("sh", "-c", 'exec "$@" <"$0"')


@dataclass(frozen=True)
class Store:
    """A lane's two object stores: the shared one (its common dir's) and its own."""

    common_dir: str
    private: str
    environ: Mapping[str, str]
    runner: ChildRunner

    def _env(self, lane_view: bool) -> dict[str, str]:
        env = git_command.environment(self.environ)
        if lane_view:
            env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = _quoted(self.private)
        return env

    async def _git(
        self, args: Sequence[str], *, lane_view: bool, data: bytes | None = None
    ) -> bytes:
        argv = git_command.argv_for_git_dir(self.common_dir, args)
        with tempfile.TemporaryDirectory(prefix="pw-import-") as scratch:
            if data is not None:
                fed = os.path.join(scratch, "stdin")
                await asyncio.to_thread(_write, fed, data)
                argv = [*STDIN_FROM_FILE, fed, *argv]
            try:
                done = await self.runner(
                    argv,
                    cwd="/",
                    env=self._env(lane_view),
                    timeout_s=IMPORT_TIMEOUT_S,
                    output_limit=MAX_IMPORT_BYTES * 2,
                )
            except PanewardenError as exc:
                raise _refused(f"git {args[0]}: {exc.message}") from None
        if done.timed_out:
            raise _refused(f"git {args[0]} took longer than {IMPORT_TIMEOUT_S:.0f}s")
        if done.truncated:
            raise _invalid(f"git {args[0]}: the lane's new objects are too large to import")
        if done.returncode != 0:
            lines = done.stderr.decode(errors="replace").strip().splitlines()
            why = lines[0] if lines else f"exit status {done.returncode}"
            raise _refused(f"git {args[0]}: {why}")
        return done.stdout

    async def new_objects(self, head: str, base: str) -> list[str]:
        """The ids reachable from ``head`` (not from ``base`` when the shared store has
        it) that the shared store does not have."""
        shared_base = await self._missing([base]) == []
        args = ["rev-list", "--objects", head, *(["--not", base] if shared_base else [])]
        listed = await self._git(args, lane_view=True)
        ids = [line.split(b" ", 1)[0].decode() for line in listed.splitlines() if line]
        return await self._missing(list(dict.fromkeys(ids)))

    async def _missing(self, ids: list[str]) -> list[str]:
        if not ids:
            return []
        data = "".join(f"{oid}\n" for oid in ids).encode()
        out = await self._git(
            ["cat-file", "--batch-check=%(objectname)"], lane_view=False, data=data
        )
        return [
            line.split(b" ", 1)[0].decode()
            for line in out.splitlines()
            if line.endswith(b" missing")
        ]

    async def check(self, ids: list[str]) -> int:
        """Re-hash each of ``ids`` as the lane's store holds it; their total size.

        Raises:
            PanewardenError: ``object_invalid`` for one whose content does not hash to its
                id (or is over the import bound).
        """
        if not ids:
            return 0
        data = "".join(f"{oid}\n" for oid in ids).encode()
        out = await self._git(["cat-file", "--batch"], lane_view=True, data=data)
        return await asyncio.to_thread(_check_batch, ids, out)

    async def import_objects(self, ids: list[str]) -> None:
        """Pack ``ids`` from the lane's view and index them into the shared store
        (``index-pack --strict``); then check each is there."""
        if not ids:
            return
        data = "".join(f"{oid}\n" for oid in ids).encode()
        pack = await self._git(["pack-objects", "--stdout", "-q"], lane_view=True, data=data)
        # Indexed in a scratch dir of the common dir (read-only to the lane, on the same
        # file system as objects/), and moved into objects/pack only once accepted: a
        # refused pack leaves nothing behind in the shared store.
        scratch = await asyncio.to_thread(
            tempfile.mkdtemp, prefix="panewarden-import-", dir=self.common_dir
        )
        try:
            packed = os.path.join(scratch, "lane.pack")
            await asyncio.to_thread(_write, packed, pack)
            index = os.path.join(scratch, "lane.idx")
            try:
                out = await self._git(
                    ["index-pack", "--strict", "-o", index, packed], lane_view=False
                )
            except PanewardenError as exc:
                raise _invalid(
                    f"the shared store refused the lane's objects: {exc.message}"
                ) from None
            name = out.decode(errors="replace").split()[-1] if out.split() else ""
            await asyncio.to_thread(self._install, packed, index, name)
        finally:
            await asyncio.to_thread(shutil.rmtree, scratch, True)
        left = await self._missing(ids)
        if left:
            raise _invalid(f"object {left[0]} did not reach the shared store")

    def _install(self, packed: str, index: str, name: str) -> None:
        """Move an accepted pack and its index into ``objects/pack`` (the pack first: Git
        finds a pack by its index)."""
        if not name or any(c not in "0123456789abcdef" for c in name):
            raise _refused(f"git index-pack named the pack {name!r}")
        target = os.path.join(self.common_dir, "objects", "pack", f"pack-{name}")
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            for source, suffix in ((packed, ".pack"), (index, ".idx")):
                os.chmod(source, 0o444)
                os.replace(source, target + suffix)
        except OSError as exc:
            raise _refused(f"cannot install the lane's pack: {exc.strerror}") from None


def _write(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _check_batch(ids: list[str], out: bytes) -> int:
    """Re-hash ``cat-file --batch`` output for ``ids``; the total content size."""
    total, at = 0, 0
    for oid in ids:
        header_end = out.find(b"\n", at)
        fields = out[at:header_end].split(b" ") if header_end >= 0 else []
        if len(fields) != 3 or fields[0].decode(errors="replace") != oid:
            raise _invalid(f"object {oid} cannot be read from the lane's store")
        kind, size = fields[1], int(fields[2])
        body = out[header_end + 1 : header_end + 1 + size]
        at = header_end + 1 + size + 1
        total += size
        if total > MAX_IMPORT_BYTES:
            raise _invalid(f"the lane's new objects are over {MAX_IMPORT_BYTES} bytes")
        algorithm = hashlib.sha1 if len(oid) == 40 else hashlib.sha256
        actual = algorithm(kind + b" " + str(size).encode() + b"\0" + body).hexdigest()
        if actual != oid:
            raise _invalid(f"object {oid} in the lane's store holds content of id {actual}")
    return total


async def verify_new(store: Store, head: str, base: str) -> list[str]:
    """The lane's new objects, each re-hashed (see :meth:`Store.check`)."""
    ids = await store.new_objects(head, base)
    await store.check(ids)
    return ids


async def import_new(store: Store, head: str, base: str) -> int:
    """Verify and import every new object reachable from ``head``; how many."""
    ids = await verify_new(store, head, base)
    await store.import_objects(ids)
    return len(ids)


def _refused(message: str) -> PanewardenError:
    return PanewardenError(ErrorCode.GIT_PRECONDITION, message[:MESSAGE_LIMIT])


def _invalid(message: str) -> PanewardenError:
    return PanewardenError(ErrorCode.OBJECT_INVALID, message[:MESSAGE_LIMIT])
