"""A plain process writing controller-lease records, for the crash-safety test.

``python -m tests.control.lease_writer STORE LOCKS FIRST LAST KEYS`` writes write
number ``n`` for ``n`` in ``FIRST..LAST-1`` to key ``n % KEYS``, each under the
controller store's lock, and prints ``n`` once the write returned. Each record
describes its write number in three fields, so a record mixing two writes shows.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from supervisor.control.records import RECORD_VERSION, ControllerLease
from supervisor.store.locks import hold_sync
from supervisor.store.records import RecordStore


def key_of(n: int, keys: int) -> str:
    return f"ctl-{n % keys:032x}"


def record(n: int, keys: int) -> ControllerLease:
    """Write number ``n``: its generation, authority ref and digest all say ``n``."""
    return ControllerLease(
        version=RECORD_VERSION,
        lease_id=key_of(n, keys),
        controller_id=f"writer-{n % keys}",
        identity="stdio:stdio",
        generation=n,
        fence_sha256=hashlib.sha256(f"fence {n}".encode()).hexdigest(),
        state="active",
        authority_ref=f"write {n}",
        authority_sha256=hashlib.sha256(f"write {n}".encode()).hexdigest(),
        ttl_s=900,
        created_at=float(n),
        renewed_at=float(n),
        expires_at=float(n + 900),
    )


def write_number(lease: ControllerLease, keys: int) -> int | None:
    """The write a record is, or None if its fields disagree (a torn or mixed record)."""
    return lease.generation if lease == record(lease.generation, keys) else None


def main() -> int:
    store_dir, locks_dir = Path(sys.argv[1]), Path(sys.argv[2])
    first, last, keys = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    store = RecordStore(store_dir, ControllerLease, RECORD_VERSION, "lease_id")
    for n in range(first, last):
        with hold_sync(locks_dir, "controller", wait_s=30):
            store.save(key_of(n, keys), record(n, keys))
        print(n, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
