"""The lanes, wired over the coordination authority and the pane core."""

from __future__ import annotations

from supervisor.control.service import ControlService
from supervisor.lanes import sandbox
from supervisor.lanes.adopted import AdoptedPanes
from supervisor.lanes.repo.git import Git
from supervisor.lanes.reviewer import ReviewerLanes
from supervisor.lanes.starters import StarterBound
from supervisor.lanes.verification import Verifications
from supervisor.lanes.writer import WriterLanes


class LaneService:
    """Reviewer lanes, adopted panes, writer lanes and their verification."""

    def __init__(self, control: ControlService) -> None:
        panes = control.panes
        environ = panes.config.environ
        # Git and Bubblewrap run as the pane core's managed helpers (safe from its sweep).
        # Git on a lane's worktree runs in Bubblewrap where the host has it.
        self.git = Git(
            panes.children.run,
            environ,
            sandbox_of=lambda: sandbox.git_sandbox(panes.confiner, environ),
        )
        ctx = control.context
        self.starters = StarterBound(ctx)
        self.starters.watch()
        self.reviewers = ReviewerLanes(ctx, self.starters.end_if_gone)
        self.adopted = AdoptedPanes(ctx)
        self.writers = WriterLanes(
            ctx, self.git, lambda: panes.profiles, panes.children.run, environ
        )
        self.verifications = Verifications(
            ctx, self.git, panes.children.run, environ, panes.confiner
        )
