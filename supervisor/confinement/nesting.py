"""No pane or writer worktree is admitted where a running confined pane writes.

A confined pane's read-only re-binds of other panes' cwds (``PaneConfiner.build``) are
computed when it starts: a pane started later below its writable cwd, or a writer
worktree admitted later below it, would be writable to it. The cause is closed at
admission: a start (``PaneLifecycle.start_pane``) or a writer admission
(``WriterLanes``) whose directory lies strictly inside a path a running confined pane
may write (and not inside one of that pane's read-only re-binds) is refused with
``scope_conflict``, unless both are the same lease's. The same directory as that
pane's cwd is not "inside": two panes started in one directory share it knowingly.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Protocol

from protocol.errors import ErrorCode, PanewardenError
from supervisor.confinement.policy import under


class _Lease(Protocol):
    @property
    def lease_id(self) -> str: ...


class _Status(Protocol):
    @property
    def lifecycle(self) -> str: ...


class WritingPane(Protocol):
    """What the check reads of a pane (``supervisor.panes.pane.Pane``)."""

    @property
    def name(self) -> str: ...
    @property
    def lease(self) -> _Lease | None: ...
    @property
    def removed(self) -> bool: ...
    @property
    def status(self) -> _Status: ...
    @property
    def sandbox_writable(self) -> tuple[str, ...]: ...
    @property
    def sandbox_read_only(self) -> tuple[str, ...]: ...


def refuse_inside_writable(
    directory: str, panes: Iterable[WritingPane], lease_id: str | None, what: str
) -> None:
    """Raise when ``directory`` lies strictly inside what one of ``panes`` writes.

    Raises:
        PanewardenError: ``scope_conflict``.
    """
    real = os.path.realpath(directory)
    for pane in panes:
        # An exited program's sandbox is gone with it (its PID namespace's last process);
        # a lost worker's may still run.
        if pane.removed or pane.status.lifecycle == "exited" or not pane.sandbox_writable:
            continue
        if lease_id is not None and pane.lease is not None and pane.lease.lease_id == lease_id:
            continue
        for top in pane.sandbox_writable:
            if real == top or not under(real, [top]) or under(real, pane.sandbox_read_only):
                continue
            raise PanewardenError(
                ErrorCode.SCOPE_CONFLICT,
                f"{what} {real} lies inside {top}, which confined pane {pane.name!r} "
                "writes; start it elsewhere or after that pane is removed",
            )
