"""The periods both processes must agree on, in one place.

Heartbeats go both ways, every ``HEARTBEAT_S`` (5 s: an idle pane must cost nothing, and
a worker's death is noticed at once through its pidfd, not through silence). A worker
that hears nothing from its supervisor for ``ORPHAN_AFTER_BEATS`` periods is orphaned
and, after the orphan grace, kills its pane's tree and exits. A supervisor that hears
nothing from a worker for the heartbeat loss period kills it; that period is at least
``HEARTBEAT_LOSS_BEATS`` heartbeats, so an operator who shortens it shortens the
heartbeat with it (``heartbeat_period``). Killing a tree is SIGHUP + SIGTERM,
``KILL_GRACE_S``, then SIGKILL.
"""

HEARTBEAT_S = 5.0
# Silence, in heartbeat periods, after which a worker counts itself orphaned: one late
# or lost beat on a loaded machine must not orphan anyone.
ORPHAN_AFTER_BEATS = 3
ORPHAN_AFTER_S = ORPHAN_AFTER_BEATS * HEARTBEAT_S  # orphan_after(HEARTBEAT_S)
# The heartbeat loss period spans at least this many heartbeats.
HEARTBEAT_LOSS_BEATS = 4
DEFAULT_HEARTBEAT_LOSS_S = HEARTBEAT_LOSS_BEATS * HEARTBEAT_S
DEFAULT_ORPHAN_GRACE_S = 120.0
KILL_GRACE_S = 2.0
# Status records a pane keeps (worker and supervisor alike): a restarted supervisor gets
# them with the worker's Hello, so a cursor taken before the restart still finds them.
STATUS_HISTORY_RECORDS = 512
# How long a worker waits after Enter for the program to show it took a prompt before it
# answers ``delivery_ambiguous``: a CLI on a loaded machine takes seconds to open its turn
# (OpenCode: 3 s from its cleared input box to working, 4 CPU hogs on 2 cores).
SUBMIT_ACK_TIMEOUT_S = 20.0
# How long the supervisor waits for the worker's answer to a ``WriteInput``: the worker's
# own bounds (typing 10 s, the echo 3 s, then ``SUBMIT_ACK_TIMEOUT_S``) with room to spare.
WRITE_INPUT_REPLY_S = SUBMIT_ACK_TIMEOUT_S + 25.0


def heartbeat_period(heartbeat_loss_s: float) -> float:
    """The heartbeat period for a heartbeat loss period: ``HEARTBEAT_S``, or shorter so
    that the loss period still spans ``HEARTBEAT_LOSS_BEATS`` heartbeats."""
    return min(HEARTBEAT_S, heartbeat_loss_s / HEARTBEAT_LOSS_BEATS)


def orphan_after(heartbeat_s: float) -> float:
    """How long a worker waits for word from its supervisor before it is orphaned."""
    return ORPHAN_AFTER_BEATS * heartbeat_s
