"""Verification of a writer's worktree: a content digest, and recipes run in a sandbox.

``snapshot`` reads the lane's Git evidence (branch, HEAD, status digest) and its
worktree digest (:mod:`supervisor.lanes.repo.worktree_digest`, the ignored files under the
lane's owned scopes included and named); it runs no repository code and needs no
controller. Both it and ``verify`` first check that the worktree's git dirs, read from
its files, are still the lane's (the recorded repository's common dir, one of its admin
dirs): a lane that rewrote its ``commondir`` gets ``git_precondition``, never a HEAD
read from somewhere else. The caller may pass the HEAD and status digest it expects
(``git_precondition`` when they differ).

``verify`` runs one recipe from the repository's recipes file *as it is at the lane's
accepted base commit* (:mod:`supervisor.lanes.recipes`) in the sandbox
(:mod:`supervisor.lanes.sandbox`: the panes' builder, the service's own paths and the
user's keys hidden). Admission is checked under the controller and writer
locks (the fence, the lane's lease is this controller's and ``active`` or ``released``,
its pane is not working or blocked, no other verification of the lane is running);
the run itself holds no lock. The worktree digest must equal
``expected_worktree_sha256`` before the run (else the record is ``preflight_failed``
and nothing runs) and is taken again after it (a change is ``invalidated``, whatever the
exit status). The time bound is the smallest of the recipe's ``timeout_s``, the
caller's, and what is left of the controller lease. Every run leaves a content-free
record: state, exit status, duration, output digests, a reason.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import msgspec

from protocol.errors import ErrorCode, PanewardenError
from supervisor.confinement.pane import PaneConfiner
from supervisor.confinement.policy import bwrap_argv
from supervisor.control.context import ControlContext
from supervisor.control.controllers import Credentials
from supervisor.control.fences import new_id
from supervisor.control.records import RECORD_VERSION, PaneLease, WriterTerms
from supervisor.control.stores import VerificationRecord
from supervisor.lanes import sandbox
from supervisor.lanes.closing import BUSY_STATES
from supervisor.lanes.recipes import Recipe, recipe_captured, recipe_writable
from supervisor.lanes.repo.git import Git
from supervisor.lanes.repo.worktree_digest import WorktreeDigest, worktree_digest
from supervisor.workers.subprocesses import ChildRunner

VERIFIABLE = frozenset({"active", "released"})
# A snapshot names at most this many of the ignored files in its digest (all are counted).
IGNORED_PATHS_SHOWN = 64


@dataclass(frozen=True)
class VerifyRequest:
    """What ``verify`` is asked to run."""

    lease_id: str
    expected_worktree_sha256: str
    recipe: str
    timeout_s: float | None


class Verifications:
    """verification_snapshot, verify, verification_list."""

    def __init__(
        self,
        ctx: ControlContext,
        git: Git,
        runner: ChildRunner,
        environ: Mapping[str, str],
        confiner: PaneConfiner,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``confiner``: the panes' one, for its host check (made at service start), the
        service's paths it hides and its unreadable stand-in file."""
        self._ctx = ctx
        self._git = git
        self._runner = runner
        self._environ = environ
        self._confiner = confiner
        self._clock = clock
        # Lanes with a verification under way: one at a time per lane.
        self._running: set[str] = set()

    def records(self) -> list[VerificationRecord]:
        """Every verification record, oldest first."""
        found = self._ctx.stores.verifications.load_all()[0].values()
        return sorted(found, key=lambda r: (r.started_at, r.verification_id))

    def _terms(self, lease: PaneLease) -> WriterTerms:
        if lease.writer is None:
            raise PanewardenError(ErrorCode.LEASE_STATE, f"lease {lease.lease_id} has no worktree")
        return lease.writer

    # ------------------------------------------------------------ snapshot

    async def snapshot(
        self,
        lease_id: str,
        expected_head: str | None = None,
        expected_status_sha256: str | None = None,
    ) -> dict[str, Any]:
        """The lane's Git evidence and worktree digest, as they are now."""
        lease = self._ctx.leases.get("writer", lease_id)
        terms = self._terms(lease)
        await self._check_layout(terms)
        head = await self._git.head(terms.worktree)
        if expected_head is not None and head != expected_head:
            raise PanewardenError(
                ErrorCode.GIT_PRECONDITION, f"HEAD is {head}, not the expected {expected_head}"
            )
        status = await self._git.status(terms.worktree)
        if expected_status_sha256 is not None and status.sha256 != expected_status_sha256:
            raise PanewardenError(
                ErrorCode.GIT_PRECONDITION,
                f"the status digest is {status.sha256}, not the expected one",
            )
        digest = await self._digest(terms)
        pane = self._ctx.leases.pane_of(lease)
        return {
            "lease_id": lease.lease_id,
            "lease_state": lease.state,
            "worktree": terms.worktree,
            "branch": await self._git.branch(terms.worktree),
            "base_commit": terms.base_commit,
            "head": head,
            "status_sha256": status.sha256,
            "worktree_sha256": digest.sha256,
            "diff_bytes": digest.diff_bytes,
            "untracked_files": digest.untracked_files,
            "untracked_bytes": digest.untracked_bytes,
            "ignored_files": len(digest.ignored),
            "ignored_bytes": digest.ignored_bytes,
            "ignored_paths": list(digest.ignored[:IGNORED_PATHS_SHOWN]),
            "pane_state": None if pane is None else pane.status.state,
        }

    async def _check_layout(self, terms: WriterTerms) -> None:
        """The worktree's git dirs, read from its files, are still the lane's: its top,
        an admin dir of the recorded repository's, and that repository's common dir (a
        rewritten ``commondir`` or ``gitdir`` is refused, never read through)."""
        layout = await self._git.layout(terms.worktree)
        admin_dirs = os.path.join(terms.repository, "worktrees")
        if layout.toplevel != terms.worktree or layout.common_dir != terms.repository:
            raise PanewardenError(
                ErrorCode.GIT_PRECONDITION,
                f"{terms.worktree} is no longer the lane's worktree: its common dir is "
                f"{layout.common_dir}, not {terms.repository}",
            )
        if os.path.dirname(layout.git_dir) != admin_dirs:
            raise PanewardenError(
                ErrorCode.GIT_PRECONDITION,
                f"the git dir of {terms.worktree} is {layout.git_dir}, not under {admin_dirs}",
            )

    async def _digest(self, terms: WriterTerms) -> WorktreeDigest:
        return await worktree_digest(
            self._git, terms.worktree, terms.base_commit, terms.owned_scopes
        )

    # ------------------------------------------------------------ verify

    async def verify(
        self, identity: str, creds: Credentials, req: VerifyRequest
    ) -> VerificationRecord:
        """Run one recipe of the lane in the sandbox; returns its record."""
        async with self._ctx.stores.locks.hold("controller", "writer"):
            ctl = self._ctx.authority.check(identity, creds)
            lease = self._ctx.leases.get("writer", req.lease_id)
            if lease.controller_id != ctl.controller_id:
                raise PanewardenError(
                    ErrorCode.LEASE_CONFLICT, f"writer lease {req.lease_id} is another controller's"
                )
            if lease.state not in VERIFIABLE:
                raise PanewardenError(
                    ErrorCode.LEASE_STATE, f"writer lease {req.lease_id} is {lease.state}"
                )
            pane = self._ctx.leases.pane_of(lease)
            if pane is not None and pane.status.state in BUSY_STATES:
                raise PanewardenError(
                    ErrorCode.PANE_BUSY,
                    f"the lane's pane is {pane.status.state}; verify once it is idle or done",
                )
            if req.lease_id in self._running:
                raise PanewardenError(
                    ErrorCode.LEASE_STATE, f"a verification of lane {req.lease_id} is running"
                )
            self._running.add(req.lease_id)
        try:
            return await self._run(identity, creds, lease, self._terms(lease), req)
        finally:
            self._running.discard(req.lease_id)

    async def _run(
        self,
        identity: str,
        creds: Credentials,
        lease: PaneLease,
        terms: WriterTerms,
        req: VerifyRequest,
    ) -> VerificationRecord:
        recipe = recipe_captured(terms, req.recipe)
        # The host check made at service start, the one that decides whether panes are
        # confined: one answer to "can this host build the sandbox".
        support = self._confiner.support
        bwrap = support.bwrap
        if bwrap is None:
            raise PanewardenError(ErrorCode.SANDBOX_UNAVAILABLE, support.detail)
        unreadable = self._confiner.unreadable_file()
        started = self._clock()
        record = VerificationRecord(
            version=RECORD_VERSION,
            verification_id=new_id("vrf"),
            lease_id=lease.lease_id,
            controller_id=lease.controller_id,
            recipe=req.recipe,
            state="preflight_failed",
            base_commit=terms.base_commit,
            worktree_sha256=req.expected_worktree_sha256,
            started_at=started,
        )
        await self._check_layout(terms)
        head = await self._git.head(terms.worktree)
        before = await self._digest(terms)
        problem = self._preflight(terms, recipe, before.sha256, req.expected_worktree_sha256)
        writable: list[str] = []
        if problem is None:
            try:
                writable = _make_writable(terms.worktree, recipe_writable(recipe))
            except OSError as exc:
                problem = f"cannot create a writable path: {exc.strerror or exc}"
        if problem is not None:
            elapsed = round(self._clock() - started, 3)
            return await self._save(record, head=head, duration_s=elapsed, reason=problem)
        async with self._ctx.stores.locks.hold("controller"):
            # The fence, once more, right before the recipe runs; the run ends with the
            # controller lease at the latest.
            ctl = self._ctx.authority.check(identity, creds)
            left_s = ctl.expires_at - self._clock()
        limit_s = min(recipe.timeout_s, req.timeout_s or recipe.timeout_s, left_s)
        policy = sandbox.recipe_policy(
            worktree=terms.worktree,
            read_only=[terms.repository],
            writable=writable,
            home=self._environ.get("HOME") or "/",
            service_paths=self._confiner.service_paths,
            unreadable_file=unreadable,
        )
        result = await self._runner(
            bwrap_argv(bwrap, replace(policy, isolate_user=support.isolate_user), recipe.argv),
            cwd="/",
            env={"PATH": sandbox.SANDBOX_PATH},
            timeout_s=max(limit_s, 0.001),
            output_limit=0,
        )
        after = await self._digest(terms)
        if after.sha256 != before.sha256:
            state, reason = (
                "invalidated",
                f"the worktree changed during the run (now {after.sha256})",
            )
        elif result.timed_out:
            state, reason = "timed_out", f"stopped after {limit_s:.1f}s"
        elif result.returncode == 0:
            state, reason = "passed", None
        else:
            state, reason = "failed", f"exit status {result.returncode}"
        return await self._save(
            record,
            state=state,
            head=head,
            duration_s=round(result.duration_s, 3),
            exit_code=None if result.timed_out or result.returncode < 0 else result.returncode,
            stdout_sha256=result.stdout_sha256,
            stderr_sha256=result.stderr_sha256,
            reason=reason,
        )

    def _preflight(
        self, terms: WriterTerms, recipe: Recipe, actual: str, expected: str
    ) -> str | None:
        """Why the recipe must not run, or None."""
        if actual != expected:
            return f"the worktree digest is {actual}, not the expected one"
        for rel in recipe_writable(recipe):
            # A writable path must not lead out of the worktree through a link.
            path = terms.worktree
            for part in rel.split("/"):
                path = os.path.join(path, part)
                try:
                    mode = os.lstat(path).st_mode
                except FileNotFoundError:
                    break
                if stat.S_ISLNK(mode):
                    return f"writable path {rel!r} goes through a symbolic link"
        return None

    async def _save(self, record: VerificationRecord, **changes: Any) -> VerificationRecord:
        done = msgspec.structs.replace(record, **changes)
        async with self._ctx.stores.locks.hold("verifications"):
            self._ctx.stores.verifications.save(done.verification_id, done)
        return done


def _make_writable(worktree: str, paths: list[str]) -> list[str]:
    """The absolute writable paths; a missing one is created as an empty directory (Git
    does not see empty directories, so the worktree digest stays as it was)."""
    absolute = [os.path.join(worktree, rel) for rel in paths]
    for path in absolute:
        if not os.path.lexists(path):
            os.makedirs(path, exist_ok=True)
    return absolute
