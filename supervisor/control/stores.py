"""The coordination layer's stores under the state dir, and their locks.

``$STATE/leases/{controller,reviewer,writer,adopted}/<id>.json``,
``$STATE/receipts/<id>.json``, ``$STATE/verifications/<id>.json`` and
``$STATE/locks/<store>.lock`` (see :mod:`supervisor.store.locks`). One object holds
them so every operation takes its locks from the same ``StoreLocks`` in one order.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from supervisor.control.records import RECORD_VERSION, ControllerLease, PaneLease, Receipt
from supervisor.store.locks import StoreLocks
from supervisor.store.records import RecordStore


class VerificationRecord(msgspec.Struct, forbid_unknown_fields=True):
    """A content-free record of one verification run (digests, exit code, duration)."""

    version: int
    verification_id: str
    lease_id: str
    controller_id: str
    recipe: str
    state: str
    base_commit: str
    worktree_sha256: str
    started_at: float
    duration_s: float | None = None
    exit_code: int | None = None
    stdout_sha256: str | None = None
    stderr_sha256: str | None = None
    reason: str | None = None
    # The worktree's HEAD when the run began (the base is what the recipe came from).
    head: str | None = None


class ControlStores:
    """Every coordination store of one state dir, with their locks."""

    def __init__(self, state_dir: Path, *, lock_wait_s: float) -> None:
        leases = state_dir / "leases"
        self.locks = StoreLocks(state_dir / "locks", wait_s=lock_wait_s)
        self.controller = RecordStore(
            leases / "controller", ControllerLease, RECORD_VERSION, "lease_id"
        )
        self.pane_leases = {
            kind: RecordStore(leases / kind, PaneLease, RECORD_VERSION, "lease_id")
            for kind in ("reviewer", "writer", "adopted")
        }
        self.receipts = RecordStore(state_dir / "receipts", Receipt, RECORD_VERSION, "receipt_id")
        self.verifications = RecordStore(
            state_dir / "verifications", VerificationRecord, RECORD_VERSION, "verification_id"
        )

    def all_stores(self) -> list[RecordStore[msgspec.Struct]]:
        """Every store (for status reports)."""
        stores: list[RecordStore[msgspec.Struct]] = [self.controller]  # type: ignore[list-item]
        stores.extend(self.pane_leases.values())  # type: ignore[arg-type]
        stores.append(self.receipts)  # type: ignore[arg-type]
        stores.append(self.verifications)  # type: ignore[arg-type]
        return stores
