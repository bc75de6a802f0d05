"""The audit log: one JSON line per mutating tool call, content-free.

Each record is ``{ts, client, tool, pane, outcome, code}``: who did what to which
pane and whether it worked, never prompt text, screen content or a token. The
file is opened with ``O_APPEND`` (each record is one ``write``, so concurrent
appenders cannot interleave inside a line), created with mode 0600, and each
record is fsynced before the call returns. ``reopen`` (on SIGHUP) starts a new
file at the configured path, so an external rotation is: rename the file, send
SIGHUP, and new records land in a fresh file while the renamed one is complete.

The log is used from the event loop thread only; fsync blocks the loop for the
duration of one disk flush, which is the price of a record that survives a crash
of the service right after the call it describes.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

log = logging.getLogger(__name__)

AUDIT_FILE_MODE = 0o600


def _timestamp() -> str:
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"


class AuditLog:
    """An append-only JSON Lines file that can be reopened for rotation."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = self._open()

    def _open(self) -> int:
        fd = os.open(
            self.path,
            os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW,
            AUDIT_FILE_MODE,
        )
        try:
            # A pre-existing file keeps its mode through O_CREAT; the records are
            # private, so tighten it rather than append to a readable file.
            os.fchmod(fd, AUDIT_FILE_MODE)
        except OSError:
            os.close(fd)
            raise
        return fd

    def record(
        self, client: str, tool: str, pane: str | None, outcome: str, code: str | None
    ) -> None:
        """Append and fsync one record; a write failure is logged, never raised.

        The call it describes has already happened, so failing it now would only
        hide its result from the client; the service log says the record is missing.
        """
        line = json.dumps(
            {
                "ts": _timestamp(),
                "client": client,
                "tool": tool,
                "pane": pane,
                "outcome": outcome,
                "code": code,
            },
            ensure_ascii=True,
            separators=(",", ":"),
        )
        data = (line + "\n").encode("ascii")
        try:
            if self._fd is None:
                self._fd = self._open()
            written = os.write(self._fd, data)
            if written != len(data):
                raise OSError(f"short write ({written} of {len(data)} bytes)")
            os.fsync(self._fd)
        except OSError as exc:
            log.error(
                "audit record not written: %s",
                exc,
                extra={"client": client, "tool": tool, "pane": pane, "op": "audit"},
            )

    def reopen(self) -> None:
        """Open the configured path afresh (after a rotation) and close the old file.

        If the new open fails the old descriptor is kept, so records still land
        somewhere; the failure is logged.
        """
        try:
            fd = self._open()
        except OSError as exc:
            log.error(
                "audit file not reopened, keeping the old one: %s", exc, extra={"op": "audit"}
            )
            return
        old, self._fd = self._fd, fd
        if old is not None:
            os.close(old)
        log.info("audit file reopened", extra={"op": "audit"})

    def close(self) -> None:
        """Close the file; a later record reopens it."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
