"""Durable pane registry: ``$STATE/panes/<name>.json``, one record per live pane.

A record lets a restarted supervisor find the workers that outlived the old one and
re-adopt them once each proves it holds its secret (only the secret's hash is
stored). The records live in a ``RecordStore`` (atomic writes, mode 0600, temp files
swept and unreadable records quarantined at start; see :mod:`supervisor.store.records`).
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from supervisor.store.records import RecordStore

RECORD_VERSION = 1


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
    # Its program runs in a sandbox: reported as `confined` after a restart too.
    confined: bool = False
    # A confined pane's network and what it reaches (get_status), as when it started.
    network: str = ""
    network_exposes: str = ""


class PaneRecords:
    """The ``panes/`` store, keyed by pane name."""

    def __init__(self, state_dir: Path) -> None:
        self._store = RecordStore(state_dir / "panes", PaneRecord, RECORD_VERSION, "name")
        self.dir = self._store.dir

    def save(self, record: PaneRecord) -> None:
        """Write (or replace) a pane's record atomically."""
        self._store.save(record.name, record)

    def delete(self, name: str) -> None:
        """Forget a pane's record."""
        self._store.delete(name)

    def load_all(self) -> tuple[list[PaneRecord], list[str]]:
        """Every valid record, and the names of files quarantined as corrupt."""
        records, quarantined = self._store.load_all()
        return list(records.values()), quarantined
