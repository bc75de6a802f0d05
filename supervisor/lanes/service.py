"""The lanes, wired over the coordination authority and the pane core."""

from __future__ import annotations

from supervisor.control.service import ControlService
from supervisor.lanes.adopted import AdoptedPanes
from supervisor.lanes.reviewer import ReviewerLanes


class LaneService:
    """Reviewer lanes and adopted panes (writer lanes and verification join them)."""

    def __init__(self, control: ControlService) -> None:
        panes = control.panes
        self.reviewers = ReviewerLanes(
            control.stores, control.authority, control.leases, panes.lifecycle
        )
        self.adopted = AdoptedPanes(
            control.stores, control.authority, control.leases, panes.registry, panes.lifecycle
        )
