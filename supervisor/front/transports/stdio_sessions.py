"""Private state for stdio servers that are not the shared service.

A client such as Claude Code or Codex starts its own ``panewarden serve --stdio``; two
such clients under one HOME must not collide on the default state directory (one
supervisor per state dir). Without ``PANEWARDEN_STATE_DIR`` a stdio server therefore
gets a session directory of its own, ``<default state dir>/stdio/<pid>-<random>``,
removed when it stops (kept with ``--keep-panes``). Directories of sessions that died
are swept by the next stdio server: a session's ``supervisor.lock`` is held for its
whole life, so a lock that can be taken marks a dead session. Panes of a dead session
are never adopted by another one (their workers end themselves after the orphan grace).

With ``PANEWARDEN_STATE_DIR`` set, or for the HTTP service, the state dir is shared
and a second supervisor is refused with the advice to use the HTTP service.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import secrets
import shutil
import time
from pathlib import Path

from supervisor.store.statedir import ensure_private_dir

log = logging.getLogger(__name__)

SESSIONS_DIR = "stdio"
# A session directory without a lock file younger than this may be one being created.
YOUNG_S = 60.0


def new_session_dir(shared_state: Path) -> Path:
    """A fresh private state directory for one stdio server (stale ones swept first)."""
    sessions = ensure_private_dir(shared_state / SESSIONS_DIR)
    sweep_dead_sessions(sessions)
    path = sessions / f"{os.getpid()}-{secrets.token_hex(4)}"
    return ensure_private_dir(path)


def remove_session_dir(path: Path) -> None:
    """Remove a stopped session's directory (its lock was released)."""
    shutil.rmtree(path, ignore_errors=True)


def sweep_dead_sessions(sessions: Path) -> int:
    """Remove the directories of sessions whose supervisor is gone; returns how many."""
    removed = 0
    for entry in sessions.iterdir():
        if not entry.is_dir() or entry.is_symlink():
            continue
        if _dead(entry):
            shutil.rmtree(entry, ignore_errors=True)
            removed += 1
    if removed:
        log.info("swept %d stdio session directories left by dead servers", removed)
    return removed


def _dead(session: Path) -> bool:
    lock = session / "supervisor.lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        with contextlib.suppress(OSError):
            return time.time() - session.stat().st_mtime > YOUNG_S
        return False
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # held: that session is alive
    finally:
        os.close(fd)
    return True
