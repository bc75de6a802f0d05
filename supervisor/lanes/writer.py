"""Writer lanes: one agent pane per linked Git worktree, on scopes nobody else holds.

``start`` runs under the controller and writer locks, after the fence check. It admits a
writer only on exact Git evidence, read (never written) through :mod:`supervisor.lanes.repo.git`:

- ``worktree`` is absolute and is the top of a *linked* worktree (the primary checkout
  and independent clones are refused);
- the checked-out branch is ``branch``, HEAD is ``expected_head``, ``base_commit`` is an
  ancestor of HEAD (or HEAD), and the SHA-256 of the exact ``git status --porcelain=v1
  --untracked-files=all`` bytes is ``expected_status_sha256``;
- ``branch`` is not one of the (non-empty) ``protected_branches``.

It then refuses (``scope_conflict``) a lane that would share anything with a retained
writer lease of the same repository (same git common dir): the same branch or worktree,
an owned scope overlapping their owned or locked scopes, or a locked scope overlapping
their owned scopes; and a worktree where a pane already runs. Only then is a
``provisioning`` lease written with the evidence, the pane started in the worktree
already tagged with the lease — confined, writing only its owned scopes and its own
branch (:mod:`supervisor.lanes.grants`), unless the profiles file says
``allow_unconfined_writers`` — and the lease made ``active`` (``confined`` recorded).
A failed start leaves ``failed_closed`` and no pane; a supervisor killed mid-start
leaves the lease retained, blocking conflicting writers until ``lease_reconcile`` ends it.

``release`` re-reads Git (HEAD and status digest must be the expected ones, else
``git_precondition`` and the pane is untouched), then imports the lane's new objects
(those reachable from HEAD that the shared store lacks, each re-hashed: one that does not
hash to its id is ``object_invalid``, the pane untouched) into the shared store
(:mod:`supervisor.lanes.repo.objects`), then captures and closes the pane in one worker step
at ``expected_seq``; the lease becomes ``released`` with the release HEAD, status digest,
the caller's checkpoint and the count imported. A close refused after the import leaves
the objects imported (verified, harmless) and the lane running. The worktree and branch
are left as they are.

``close`` ends a lane by force, for a lane whose evidence cannot be read (an index it
overwrote, a worktree it broke) or a release that cannot finish: under the controller
lease (fence checked), its pane is killed whatever it is doing, nothing is checked or
imported, and the lease becomes ``abandoned`` with the caller's reason. The branch and
the private objects are left as they are.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import msgspec

from protocol.errors import ErrorCode, PanewardenError
from supervisor.confinement.nesting import refuse_inside_writable
from supervisor.control.context import ControlContext
from supervisor.control.controllers import Credentials
from supervisor.control.fences import new_id
from supervisor.control.records import RECORD_VERSION, RETAINED_STATES, PaneLease, WriterTerms
from supervisor.lanes.closing import begin_close, finish_close
from supervisor.lanes.grants import writer_grant
from supervisor.lanes.provisioning import start_leased_pane
from supervisor.lanes.recipes import capture
from supervisor.lanes.repo import objects
from supervisor.lanes.repo.git import Git
from supervisor.lanes.repo.refs import BRANCH_PREFIX, branch_ref, protected_refs, short_branch
from supervisor.lanes.scopes import first_overlap, normalise_scopes
from supervisor.profiles.policy import ProfileSet
from supervisor.workers.subprocesses import ChildRunner

# States from which a release may (again) be asked for.
RELEASABLE = frozenset({"active", "release_failed"})


@dataclass(frozen=True)
class WriterRequest:
    """What ``writer_start`` is asked to admit."""

    name: str
    profile: str
    purpose: str
    ticket_ref: str
    authority_ref: str
    authority_sha256: str
    worktree: str
    branch: str
    base_commit: str
    expected_head: str
    expected_status_sha256: str
    owned_scopes: list[str]
    locked_scopes: list[str]
    protected_branches: list[str]


@dataclass(frozen=True)
class ReleaseRequest:
    """What ``writer_release`` is asked to check and record."""

    lease_id: str
    expected_seq: int
    expected_head: str
    expected_status_sha256: str
    checkpoint_ref: str
    checkpoint_sha256: str


def _precondition(message: str) -> PanewardenError:
    return PanewardenError(ErrorCode.GIT_PRECONDITION, message)


def _conflict(message: str) -> PanewardenError:
    return PanewardenError(ErrorCode.SCOPE_CONFLICT, message)


def _real_directory(path: str) -> str:
    real = os.path.realpath(path)
    if not os.path.isdir(real):
        raise _precondition(f"worktree {path} is not a directory")
    return real


class WriterLanes:
    """writer_start, writer_list, writer_release, writer_close."""

    def __init__(
        self,
        ctx: ControlContext,
        git: Git,
        profiles: Callable[[], ProfileSet],
        runner: ChildRunner,
        environ: Mapping[str, str],
    ) -> None:
        self._ctx = ctx
        self._git = git
        # The profiles in force (a reload replaces them): allow_unconfined_writers.
        self._profiles = profiles
        # The object import's Git: the managed helpers, the service's PATH.
        self._runner = runner
        self._environ = dict(environ)

    def leases(self) -> list[PaneLease]:
        """Every writer lease, oldest first."""
        return self._ctx.leases.all("writer")

    # ------------------------------------------------------------ start

    async def start(self, identity: str, creds: Credentials, req: WriterRequest) -> PaneLease:
        """Admit and start a writer lane; returns its active lease (see the module doc)."""
        owned = normalise_scopes(req.owned_scopes)
        locked = normalise_scopes(req.locked_scopes)
        inner = first_overlap(owned, locked)
        if inner is not None:
            raise PanewardenError(
                ErrorCode.INVALID_ARGUMENT,
                f"owned scope {inner[0]!r} overlaps this lane's own locked scope {inner[1]!r}",
            )
        if not os.path.isabs(req.worktree):
            raise PanewardenError(ErrorCode.INVALID_ARGUMENT, "worktree must be an absolute path")
        async with self._ctx.stores.locks.hold("controller", "writer"):
            self._ctx.authority.check(identity, creds)
            terms, git_dir = await self._admit(req, owned, locked)
            self._check_conflicts(terms, req.name)
            grant = await asyncio.to_thread(
                writer_grant, terms.worktree, git_dir, terms.repository, terms.branch, owned
            )
            # Again after reading Git: the lease must still be live for the write.
            ctl = self._ctx.authority.check(identity, creds)
            now = self._ctx.leases.now()
            lease = PaneLease(
                version=RECORD_VERSION,
                lease_id=new_id("wrt"),
                lease_type="writer",
                controller_id=ctl.controller_id,
                name=req.name,
                state="provisioning",
                created_at=now,
                updated_at=now,
                purpose=req.purpose,
                profile=req.profile,
                cwd=terms.worktree,
                authority_ref=req.authority_ref,
                authority_sha256=req.authority_sha256,
                writer=terms,
            )
            # Written before the pane exists: a crash from here on leaves a retained
            # lease that blocks every conflicting writer until it is reconciled.
            self._ctx.stores.pane_leases["writer"].save(lease.lease_id, lease)
            self._ctx.leases.claim(lease)
        # A writer's pane is confined (its scopes and its own branch are all it may
        # write) unless the profiles file allows otherwise.
        required = not self._profiles().allow_unconfined_writers
        return await start_leased_pane(
            self._ctx,
            lease,
            lambda tag, on_spawn: self._ctx.lifecycle.start_pane(
                req.name,
                req.profile,
                cwd=terms.worktree,
                lease=tag,
                on_spawn=on_spawn,
                grant=grant,
                require_confined=required,
            ),
        )

    async def _admit(
        self, req: WriterRequest, owned: list[str], locked: list[str]
    ) -> tuple[WriterTerms, str]:
        """Read Git and check the evidence; the terms to record and the worktree's git
        dir (its admin dir under the common dir)."""
        worktree = _real_directory(req.worktree)
        layout = await self._git.layout(worktree)
        if layout.toplevel != worktree:
            raise _precondition(f"{req.worktree} is not the top of a worktree ({layout.toplevel})")
        if not layout.linked:
            raise _precondition(
                f"{req.worktree} is a repository's primary checkout or an independent clone; "
                "writers work only in linked worktrees (git worktree add)"
            )
        ref = await self._git.head_ref(worktree)
        if ref is None:
            raise _precondition(f"HEAD is detached in {req.worktree}; check out {req.branch!r}")
        if not ref.startswith(BRANCH_PREFIX):
            raise _precondition(f"HEAD in {req.worktree} names {ref!r}, which is not a branch")
        branch = short_branch(ref)
        # Full ref names on both sides: `heads/x` and `refs/heads/x` are `x` too.
        if ref != branch_ref(req.branch):
            raise _precondition(f"{req.worktree} has {ref!r} checked out, not {req.branch!r}")
        if ref in protected_refs(req.protected_branches):
            raise _precondition(f"branch {ref!r} is protected; writers never work on it")
        head = await self._git.head(worktree)
        if head != req.expected_head:
            raise _precondition(f"HEAD is {head}, not the expected {req.expected_head}")
        if not await self._git.is_ancestor(worktree, req.base_commit, head):
            raise _precondition(f"base commit {req.base_commit} is not an ancestor of HEAD")
        status = await self._git.status(worktree)
        if status.sha256 != req.expected_status_sha256:
            raise _precondition(
                "the SHA-256 of `git status --porcelain=v1 --untracked-files=all` is "
                f"{status.sha256}, not the expected one"
            )
        # What verify will run: the recipes as the base commit has them now, recorded.
        recipes = await capture(self._git, worktree, req.base_commit)
        terms = WriterTerms(
            repository=layout.common_dir,
            worktree=worktree,
            branch=branch,
            base_commit=req.base_commit,
            head=head,
            status_sha256=status.sha256,
            owned_scopes=owned,
            locked_scopes=locked,
            protected_branches=list(req.protected_branches),
            ticket_ref=req.ticket_ref,
            base_recipes=recipes,
            recipes_captured=True,
        )
        return terms, layout.git_dir

    def _check_conflicts(self, terms: WriterTerms, name: str) -> None:
        for lease in self.leases():
            other = lease.writer
            if lease.state not in RETAINED_STATES or other is None:
                continue
            if other.repository != terms.repository:
                continue
            who = f"writer lease {lease.lease_id} ({lease.state})"
            if other.branch == terms.branch:
                raise _conflict(f"{who} already holds branch {terms.branch!r}")
            if other.worktree == terms.worktree:
                raise _conflict(f"{who} already holds worktree {terms.worktree}")
            hit = first_overlap(terms.owned_scopes, [*other.owned_scopes, *other.locked_scopes])
            if hit is not None:
                raise _conflict(f"owned scope {hit[0]!r} overlaps {hit[1]!r} held by {who}")
            hit = first_overlap(terms.locked_scopes, other.owned_scopes)
            if hit is not None:
                raise _conflict(f"locked scope {hit[0]!r} overlaps {hit[1]!r} owned by {who}")
        # Starting panes included: the registry records where a start runs in the same
        # step as it checks the writer worktrees (this lease's too, once it is saved).
        refuse_inside_writable(
            terms.worktree, self._ctx.registry.every_worker_pane(), None, "the worktree"
        )
        inside = self._ctx.registry.panes_inside(terms.worktree)
        if inside:
            raise _conflict(f"pane {inside[0]!r} already runs in {terms.worktree}")
        if self._ctx.leases.retained_for(name) is not None:
            raise PanewardenError(
                ErrorCode.PANE_EXISTS, f"a retained lease already names pane {name!r}"
            )

    # ------------------------------------------------------------ release

    async def release(self, identity: str, creds: Credentials, req: ReleaseRequest) -> PaneLease:
        """Check Git, then capture and close the pane at ``expected_seq``; ``released``."""
        async with self._ctx.stores.locks.hold("controller", "writer"):
            ctl = self._ctx.authority.check(identity, creds)
            lease = self._ctx.leases.get("writer", req.lease_id)
            if lease.controller_id != ctl.controller_id:
                raise PanewardenError(
                    ErrorCode.LEASE_CONFLICT, f"writer lease {req.lease_id} is another controller's"
                )
            if lease.state not in RELEASABLE or lease.writer is None:
                raise PanewardenError(
                    ErrorCode.LEASE_STATE, f"writer lease {req.lease_id} is {lease.state}"
                )
            terms = lease.writer
            head, status_sha256, git_dir = await self._evidence(terms)
            if head != req.expected_head:
                raise _precondition(f"HEAD is {head}, not the expected {req.expected_head}")
            if status_sha256 != req.expected_status_sha256:
                raise _precondition(
                    f"the status digest is {status_sha256}, not the expected one; "
                    "the worktree changed since you looked"
                )
            # Imported while the pane still runs, so a refusal closes nothing and no crash
            # can leave a released lane whose objects never arrived. The lane may change
            # its store meanwhile: index-pack hashes what it is given, so a swapped object
            # lands under its own id, never under the one checked (then `object_invalid`).
            store = self._store(terms, git_dir)
            count = await objects.import_new(store, head, terms.base_commit)
            released_terms = msgspec.structs.replace(
                terms,
                release_head=head,
                release_status_sha256=status_sha256,
                imported_objects=count,
            )
            self._ctx.authority.check(identity, creds)  # still live after reading Git
            job = begin_close(
                self._ctx.leases,
                lease,
                req.expected_seq,
                "released",
                interim="releasing",
                checkpoint_ref=req.checkpoint_ref,
                checkpoint_sha256=req.checkpoint_sha256,
                writer=released_terms,
            )
        try:
            return await finish_close(self._ctx.leases, self._ctx.lifecycle, self._ctx.driver, job)
        except PanewardenError as exc:
            current = self._ctx.leases.get("writer", lease.lease_id)
            if current.state == "releasing":
                # The pane went away under the close: the release did not finish.
                self._ctx.leases.save(current, state="release_failed", failure=exc.code.value)
            raise

    def _store(self, terms: WriterTerms, git_dir: str) -> objects.Store:
        private = objects.private_dir(git_dir)
        return objects.Store(terms.repository, private, self._environ, self._runner)

    # ------------------------------------------------------------ forced close

    async def close(
        self, identity: str, creds: Credentials, lease_id: str, reason: str
    ) -> PaneLease:
        """End a writer lane by force: kill its pane, record ``abandoned`` (module doc)."""
        async with self._ctx.stores.locks.hold("controller", "writer"):
            ctl = self._ctx.authority.check(identity, creds)
            lease = self._ctx.leases.get("writer", lease_id)
            if lease.controller_id != ctl.controller_id:
                raise PanewardenError(
                    ErrorCode.LEASE_CONFLICT, f"writer lease {lease_id} is another controller's"
                )
            if lease.state not in RETAINED_STATES or lease.writer is None:
                raise PanewardenError(
                    ErrorCode.LEASE_STATE, f"writer lease {lease_id} is {lease.state}"
                )
            if self._ctx.leases.claimed(lease_id):
                raise PanewardenError(
                    ErrorCode.PANE_BUSY, f"lease {lease_id} is being started or closed"
                )
            terms = lease.writer
            pane = self._ctx.leases.pane_of(lease)
            # Claimed and `closing` first: a crash mid-kill is finished at the restart.
            lease = self._ctx.leases.save(lease, state="closing")
            self._ctx.leases.claim(lease)
        try:
            if pane is not None:
                await self._ctx.lifecycle.remove(pane)
            return self._ctx.leases.save(
                lease,
                state="abandoned",
                failure="forced",
                writer=msgspec.structs.replace(terms, close_reason=reason),
            )
        finally:
            self._ctx.leases.unclaim(lease_id)

    async def _evidence(self, terms: WriterTerms) -> tuple[str, str, str]:
        """HEAD, status digest and git dir of a lane's worktree, on its branch, now."""
        layout = await self._git.layout(terms.worktree)
        if layout.common_dir != terms.repository or layout.toplevel != terms.worktree:
            raise _precondition(f"{terms.worktree} is no longer the lane's worktree")
        branch = await self._git.branch(terms.worktree)
        if branch != terms.branch:
            raise _precondition(
                f"{terms.worktree} has {branch!r} checked out, not {terms.branch!r}"
            )
        head = await self._git.head(terms.worktree)
        status = await self._git.status(terms.worktree)
        return head, status.sha256, layout.git_dir
