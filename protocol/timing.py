"""The periods both processes must agree on, in one place.

Heartbeats go both ways; a worker that hears nothing from its supervisor for
``ORPHAN_AFTER_S`` is orphaned and, after the orphan grace, kills its pane's tree and
exits. A supervisor that hears nothing from a worker for the heartbeat loss period
kills it. Killing a tree is SIGHUP + SIGTERM, ``KILL_GRACE_S``, then SIGKILL.
"""

HEARTBEAT_S = 1.0
ORPHAN_AFTER_S = 5.0
DEFAULT_ORPHAN_GRACE_S = 120.0
DEFAULT_HEARTBEAT_LOSS_S = 15.0
KILL_GRACE_S = 2.0
# Status records a pane keeps (worker and supervisor alike): a restarted supervisor gets
# them with the worker's Hello, so a cursor taken before the restart still finds them.
STATUS_HISTORY_RECORDS = 512
