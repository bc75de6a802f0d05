"""A lease-record writer SIGKILLed at random points of 1,000 writes: every record is
the old version or the new one, never torn; temp files are swept at the next open; a
lock the dead writer held is stale and taken; the store stays usable.

Seed the kill points with ``PANEWARDEN_TEST_SEED``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.control.records import RECORD_VERSION, ControllerLease
from supervisor.store.locks import LockState, classify
from supervisor.store.records import RecordStore
from tests.conftest import REPO
from tests.control.lease_writer import key_of, write_number
from tests.faults import seeded_rng

WRITES = 1000
KEYS = 7
# A kill lands this many acknowledged writes (at most) after a writer started.
MAX_WRITES_PER_LIFE = 60
MAX_LIVES = 200


def writer(store: Path, locks: Path, first: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.control.lease_writer",
            str(store),
            str(locks),
            str(first),
            str(WRITES),
            str(KEYS),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def check(store_dir: Path, acked: dict[str, int], in_flight: int | None, where: str) -> int:
    """Reopen the store; every record is its key's last acknowledged write or the write
    that was in flight. Returns how many temp files the open swept."""
    temps = list(store_dir.glob(".*.tmp"))
    store = RecordStore(store_dir, ControllerLease, RECORD_VERSION, "lease_id")
    assert store.swept == len(temps), where
    assert list(store_dir.glob(".*.tmp")) == [], f"{where}: temp files left after the open"
    records, quarantined = store.load_all()
    assert quarantined == [], f"{where}: quarantined {quarantined}"
    for key, lease in records.items():
        n = write_number(lease, KEYS)
        assert n is not None, f"{where}: record {key} is torn: {lease}"
        allowed = {
            acked.get(key),
            in_flight if in_flight is not None and key_of(in_flight, KEYS) == key else None,
        }
        assert n in allowed - {None}, f"{where}: {key} holds write {n}, expected one of {allowed}"
    assert set(records) >= set(acked), f"{where}: a record was lost"
    return store.swept


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_writer_sigkilled_during_1000_lease_writes(tmp_path: Path) -> None:
    rng, seed = seeded_rng("test_writer_sigkilled_during_1000_lease_writes")
    store_dir, locks = tmp_path / "leases" / "controller", tmp_path / "locks"
    acked: dict[str, int] = {}
    done, kills, swept = 0, 0, 0
    for life in range(MAX_LIVES):
        if done >= WRITES:
            break
        where = f"seed {seed}, life {life}, after write {done - 1}"
        proc = writer(store_dir, locks, done)
        target = done + rng.randint(1, MAX_WRITES_PER_LIFE)
        assert proc.stdout is not None and proc.stderr is not None
        last = done - 1
        try:
            for line in proc.stdout:
                last = int(line)
                acked[key_of(last, KEYS)] = last
                if last + 1 >= target:
                    proc.kill()  # the writer is somewhere in its next write
                    break
            rest = proc.stdout.read()  # writes acknowledged before the kill landed
        finally:
            proc.kill()
            code = proc.wait(timeout=30)
            err = proc.stderr.read()
            proc.stdout.close()
            proc.stderr.close()
        for line in rest.split():
            last = int(line)
            acked[key_of(last, KEYS)] = last
        assert code in (0, -9), f"{where}: writer exited {code}: {err[-2000:]}"
        kills += code == -9
        in_flight = last + 1 if code == -9 and last + 1 < WRITES else None
        swept += check(store_dir, acked, in_flight, where)
        # The dead writer's lock, if it held one, is stale now: the next writer takes it.
        assert classify(locks / "controller.lock") in (LockState.ABSENT, LockState.STALE), where
        done = last + 1
    assert done == WRITES, f"seed {seed}: only {done} writes in {MAX_LIVES} lives"
    final = RecordStore(store_dir, ControllerLease, RECORD_VERSION, "lease_id").load_all()[0]
    assert {k: write_number(v, KEYS) for k, v in final.items()} == acked
    print(f"seed {seed}: {kills} kills, {swept} temp files swept")
    assert kills >= 10, f"seed {seed}: only {kills} kills"
