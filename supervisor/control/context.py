"""What every coordination operation works with, in one object.

The stores and their locks, the controller leases (fence checks), the pane leases, and
the pane core they govern: the registry (which panes exist), the lifecycle (start,
close) and the driver (input, reads, waits). Handoffs, the inventory and every lane take
this one context instead of the same six arguments each.
"""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.control.controllers import ControllerAuthority
from supervisor.control.pane_leases import PaneLeases
from supervisor.control.stores import ControlStores
from supervisor.panes.driving import PaneDriver
from supervisor.panes.lifecycle import PaneLifecycle
from supervisor.panes.registry import PaneRegistry


@dataclass(frozen=True)
class ControlContext:
    """The coordination layer's shared parts; see the module docstring."""

    stores: ControlStores
    authority: ControllerAuthority
    leases: PaneLeases
    registry: PaneRegistry
    lifecycle: PaneLifecycle
    driver: PaneDriver
