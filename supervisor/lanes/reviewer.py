"""Reviewer lanes: a pane started from a profile under a controller's lease.

``start``: under the controller and reviewer locks, after the fence check, a
``provisioning`` lease is written first (naming the pane) and claimed; the pane is then
started — without the store locks, so a slow start holds up no other call — already
tagged with the lease, and the lease records the worker's instance before the pane is
visible, then turns ``active``. A start that fails leaves the lease
``failed_closed`` and nothing running. A leased pane refuses plain ``send_input`` and
``remove_pane``; it takes prompts through ``relay``/``handoff`` and is closed by
``close`` (capture + close in one worker step at ``expected_seq``) or ``cleanup``.

A pane that starts reviewers over ``panewarden ctl`` gains nothing by them: at most
``MAX_REVIEWERS_PER_PANE`` of its reviewer leases are retained at once, a confined
starter's reviewers are confined and no wider than its own sandbox
(:mod:`supervisor.lanes.width`), and they end with it (:mod:`supervisor.lanes.starters`).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from protocol.agents.table import SPECS, spec_for
from protocol.errors import ErrorCode, PanewardenError
from supervisor.control.context import ControlContext
from supervisor.control.controllers import Credentials, pane_identity, pane_of_identity
from supervisor.control.fences import new_id
from supervisor.control.records import RECORD_VERSION, RETAINED_STATES, PaneLease
from supervisor.lanes.closing import BUSY_STATES, CloseJob, begin_close, finish_close
from supervisor.lanes.grants import REVIEWER_GRANT
from supervisor.lanes.provisioning import OnSpawn, start_leased_pane
from supervisor.lanes.width import excess
from supervisor.panes.pane import LeaseTag, Pane
from supervisor.profiles.confinement import ConfineSettings

# Reviewer leases one pane may hold retained at once (each is a pane under max_panes).
MAX_REVIEWERS_PER_PANE = 4


@dataclass
class CleanupReport:
    """What ``cleanup`` closed (or would close) and what it kept, with why."""

    dry_run: bool
    closed: list[str] = field(default_factory=list)
    preserved: list[dict[str, str]] = field(default_factory=list)

    def as_result(self) -> dict[str, Any]:
        """The tool result shape."""
        return {"dry_run": self.dry_run, "closed": self.closed, "preserved": self.preserved}


class ReviewerLanes:
    """reviewer_start, reviewer_list, reviewer_close, reviewer_cleanup."""

    def __init__(
        self, ctx: ControlContext, after_start: Callable[[str], Awaitable[None]] | None = None
    ) -> None:
        self._ctx = ctx
        # Heard with the starter's identity once a pane-started reviewer is up: a
        # starter that ended meanwhile takes it along (supervisor.lanes.starters).
        self._after_start = after_start

    def leases(self) -> list[PaneLease]:
        """Every reviewer lease, oldest first."""
        return self._ctx.leases.all("reviewer")

    async def start(
        self,
        identity: str,
        creds: Credentials,
        name: str,
        profile: str,
        cwd: str,
        purpose: str,
        model: str | None = None,
        effort: str | None = None,
    ) -> PaneLease:
        """Start a leased reviewer pane; returns its active lease."""
        # A confined pane that became a controller (`panewarden ctl`) starts only
        # confined panes, no wider than its own sandbox: its agent must not get out of
        # its sandbox through a profile that runs unconfined or wider.
        caller = pane_of_identity(identity)
        caller_pane = self._ctx.registry.panes.get(caller) if caller is not None else None
        from_confined = caller_pane is not None and caller_pane.confined
        within = None if caller_pane is None or not from_confined else self._within(caller_pane)
        async with self._ctx.stores.locks.hold("controller", "reviewer"):
            ctl = self._ctx.authority.check(identity, creds)
            if self._ctx.leases.retained_for(name) is not None:
                raise PanewardenError(
                    ErrorCode.PANE_EXISTS, f"a retained lease already names pane {name!r}"
                )
            started_by = identity if caller is not None else None
            if started_by is not None:
                self._below_cap(started_by)
            now = self._ctx.leases.now()
            lease = PaneLease(
                version=RECORD_VERSION,
                lease_id=new_id("rev"),
                lease_type="reviewer",
                controller_id=ctl.controller_id,
                name=name,
                state="provisioning",
                created_at=now,
                updated_at=now,
                purpose=purpose,
                profile=profile,
                cwd=cwd,
                started_by=started_by,
            )
            self._ctx.stores.pane_leases["reviewer"].save(lease.lease_id, lease)
            self._ctx.leases.claim(lease)

        async def launch(tag: LeaseTag, on_spawn: OnSpawn) -> Pane:
            extra = self._model_args(profile, model, effort)
            # Confined (as its profile or PANEWARDEN_CONFINE says), it writes nothing in
            # the directory it reviews.
            return await self._ctx.lifecycle.start_pane(
                name,
                profile,
                cwd=cwd,
                extra_args=extra,
                lease=tag,
                on_spawn=on_spawn,
                grant=REVIEWER_GRANT,
                require_confined=from_confined,
                within=within,
            )

        started = await start_leased_pane(self._ctx, lease, launch)
        if started_by is not None and self._after_start is not None:
            await self._after_start(started_by)
        return started

    def _below_cap(self, started_by: str) -> None:
        """Refuse a start beyond the cap of ``started_by``'s tree: a pane's reviewers
        may start reviewers too, and all of them count against the pane that began it."""
        retained = [
            lease
            for lease in self.leases()
            if lease.started_by is not None and lease.state in RETAINED_STATES
        ]
        parent = {
            pane_identity(lease.name, lease.instance): lease.started_by
            for lease in retained
            if lease.instance is not None and lease.started_by is not None
        }

        def root(identity: str) -> str:
            seen = {identity}
            while identity in parent and parent[identity] not in seen:
                identity = parent[identity]
                seen.add(identity)
            return identity

        top = root(started_by)
        held = [lease for lease in retained if root(lease.started_by or "") == top]
        if len(held) >= MAX_REVIEWERS_PER_PANE:
            raise PanewardenError(
                ErrorCode.PANE_LIMIT,
                f"a pane and the reviewers it started hold at most {MAX_REVIEWERS_PER_PANE} "
                "reviewer leases at once; close one first",
            )

    def _within(self, starter: Pane) -> Callable[[ConfineSettings], None]:
        """The check a reviewer's confinement must pass: no wider than ``starter``'s."""
        outer = starter.confinement
        if outer is None:
            # Re-adopted after a restart: its profile's settings now, if it still has one.
            outer = self._ctx.lifecycle.confinement_of(starter.profile)
        home = os.path.expanduser("~")

        def check(inner: ConfineSettings) -> None:
            reason = excess(inner, outer, home)
            if reason is not None:
                raise PanewardenError(
                    ErrorCode.FORBIDDEN,
                    f"a pane's reviewer is no wider than the pane: the profile's {reason}",
                )

        return check

    def _model_args(self, profile: str, model: str | None, effort: str | None) -> list[str] | None:
        if model is None and effort is None:
            return None
        agent = self._ctx.lifecycle.agent_of(profile)
        flags = spec_for(agent).model_flags
        if flags is None:
            offered = sorted(s.name for s in SPECS.values() if s.model_flags is not None)
            raise PanewardenError(
                ErrorCode.INVALID_ARGUMENT,
                f"model and effort are only chosen for agent kinds {offered}, not {agent!r}",
            )
        args: list[str] = []
        for flag, value in zip(flags, (model, effort), strict=True):
            if value is not None:
                # Each one must still be in the profile's extra_args allow-list.
                args += [flag, value]
        return args

    async def close(
        self, identity: str, creds: Credentials, lease_id: str, expected_seq: int
    ) -> PaneLease:
        """Capture and close the reviewer's pane at ``expected_seq``; the lease closes."""
        async with self._ctx.stores.locks.hold("controller", "reviewer"):
            ctl = self._ctx.authority.check(identity, creds)
            lease = self._own(ctl.controller_id, lease_id)
            # `closing`: a close a crash interrupted, finished now.
            if lease.state not in ("active", "provisioning", "closing"):
                raise PanewardenError(
                    ErrorCode.LEASE_STATE, f"reviewer lease {lease_id} is {lease.state}"
                )
            job = begin_close(self._ctx.leases, lease, expected_seq, "closed")
        return await finish_close(self._ctx.leases, self._ctx.lifecycle, self._ctx.driver, job)

    async def cleanup(self, identity: str, creds: Credentials, dry_run: bool) -> CleanupReport:
        """Close every settled reviewer pane of this controller; keep (and say why) the
        working, blocked, gone or mismatched ones."""
        report = CleanupReport(dry_run)
        jobs: list[CloseJob] = []
        async with self._ctx.stores.locks.hold("controller", "reviewer"):
            ctl = self._ctx.authority.check(identity, creds)
            for lease in self.leases():
                if lease.controller_id != ctl.controller_id or lease.state not in RETAINED_STATES:
                    continue
                pane = self._ctx.leases.pane_of(lease)
                reason = _kept_because(lease, pane)
                if reason is not None:
                    report.preserved.append({"lease_id": lease.lease_id, "reason": reason})
                    continue
                assert pane is not None
                if dry_run:
                    report.closed.append(lease.lease_id)
                    continue
                try:
                    jobs.append(begin_close(self._ctx.leases, lease, pane.status.seq, "closed"))
                except PanewardenError as exc:
                    report.preserved.append({"lease_id": lease.lease_id, "reason": exc.code.value})
        try:
            for job in jobs:
                try:
                    await finish_close(self._ctx.leases, self._ctx.lifecycle, self._ctx.driver, job)
                except PanewardenError as exc:
                    report.preserved.append(
                        {"lease_id": job.lease.lease_id, "reason": exc.code.value}
                    )
                    continue
                report.closed.append(job.lease.lease_id)
        finally:
            for job in jobs:
                self._ctx.leases.unclaim(job.lease.lease_id)
        return report

    def _own(self, controller_id: str, lease_id: str) -> PaneLease:
        lease = self._ctx.leases.get("reviewer", lease_id)
        if lease.controller_id != controller_id:
            raise PanewardenError(
                ErrorCode.LEASE_CONFLICT, f"reviewer lease {lease_id} is another controller's"
            )
        return lease


def _kept_because(lease: PaneLease, pane: Pane | None) -> str | None:
    if lease.state != "active":
        return f"lease is {lease.state}"
    if pane is None or pane.status.lifecycle == "lost":
        return "pane gone or re-created (reconcile the lease)"
    if pane.status.lifecycle == "running" and pane.status.state in BUSY_STATES:
        return f"pane is {pane.status.state}"
    return None
