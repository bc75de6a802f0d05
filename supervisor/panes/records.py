"""Durable pane registry: ``$STATE/panes/<name>.json``, one record per live pane.

A record lets a restarted supervisor find the workers that outlived the old one
and re-adopt them once each proves it holds its secret (only the secret's hash is
stored). Records are msgspec JSON with a ``version`` field, mode 0600, written
atomically; a corrupt record is quarantined (renamed ``*.corrupt``) and reported,
and never blocks the others.
"""

from __future__ import annotations

import logging
from pathlib import Path

import msgspec

from protocol.safe_files import FileReadError, read_regular_file
from supervisor.store.statedir import atomic_write, ensure_private_dir, sweep_temp_files

log = logging.getLogger(__name__)

RECORD_VERSION = 1
# A pane record is a few hundred bytes; anything far larger is not one of ours.
RECORD_LIMIT_BYTES = 64 * 1024


class PaneRecord(msgspec.Struct, forbid_unknown_fields=True):
    """What a new supervisor needs to re-adopt a pane's worker."""

    version: int
    name: str
    instance: str
    secret_sha256: str
    worker_pid: int
    worker_start_ticks: int
    profile: str
    agent: str
    cwd: str
    started_at: float
    pid: int | None
    # False for panes started with a caller argv: they never get the profile's watchdog.
    watchdog: bool = False


class PaneRecords:
    """The ``panes/`` store."""

    def __init__(self, state_dir: Path) -> None:
        self.dir = ensure_private_dir(state_dir / "panes")

    def save(self, record: PaneRecord) -> None:
        """Write (or replace) a pane's record atomically."""
        atomic_write(self.dir / f"{record.name}.json", msgspec.json.encode(record))

    def delete(self, name: str) -> None:
        """Forget a pane's record."""
        (self.dir / f"{name}.json").unlink(missing_ok=True)

    def load_all(self) -> tuple[list[PaneRecord], list[str]]:
        """Every valid record, and the names of files quarantined as corrupt."""
        sweep_temp_files(self.dir)
        records: list[PaneRecord] = []
        quarantined: list[str] = []
        for path in sorted(self.dir.glob("*.json")):
            try:
                data = read_regular_file(
                    path, limit_bytes=RECORD_LIMIT_BYTES, follow_symlinks=False
                )
                record = msgspec.json.decode(data, type=PaneRecord)
                if record.version != RECORD_VERSION or f"{record.name}.json" != path.name:
                    raise ValueError("unexpected version or name")
            except FileReadError as exc:
                problem = exc.reason
            except (ValueError, msgspec.MsgspecError) as exc:
                problem = str(exc)
            else:
                records.append(record)
                continue
            # A FIFO, a link to a device, a huge or garbled file: set aside, never read.
            path.rename(path.with_suffix(".json.corrupt"))
            log.error("quarantined pane record %s: %s", path.name, problem)
            quarantined.append(path.name)
        return records, quarantined
