"""Store locks and records with real files and real processes, directly and through the
service (coordination scenarios 31-33).

A lock is ``stale`` when its process is gone (a dead pid, a reused pid with another
start time, another boot) and is then taken; ``active`` while its live holder runs;
``indeterminate`` when written on another host or unreadable, and never taken. A corrupt
record is quarantined and reported; the others still load. ``service_status`` shows
each store's lock state and nothing about the holder.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TypedDict, Unpack

import msgspec
import pytest

from protocol.errors import ErrorCode, PanewardenError
from supervisor.control.records import RECORD_VERSION, ControllerLease
from supervisor.procfs import process_start_ticks
from supervisor.store.locks import FileLock, LockInfo, LockState, boot_id, classify, hold_sync
from supervisor.store.records import RecordStore
from supervisor.store.statedir import atomic_write
from tests.conftest import REPO
from tests.control.conftest import Coord, stdio_service
from tests.control.support import AUTHORITY_SHA, acquire, leaked
from tests.faults import seeded_rng

HOLD = """
import sys
from pathlib import Path
from supervisor.store.locks import hold_sync
with hold_sync(Path(sys.argv[1]), sys.argv[2], wait_s=30):
    print("held", flush=True)
    sys.stdin.read()
"""
TAKE_AND_DIE = """
import os, sys
from pathlib import Path
from supervisor.store.locks import FileLock, LockState
assert FileLock(Path(sys.argv[1])).try_take() is LockState.ABSENT
os._exit(0)
"""
OTHER_HOST = "build-host.elsewhere.invalid"


class Pipes(TypedDict, total=False):
    """The Popen keywords the tests pass to ``python``."""

    stdin: int
    stdout: int
    stderr: int


def python(code: str, *args: str, **popen: Unpack[Pipes]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=REPO, text=True, **popen)


@contextlib.contextmanager
def holder(locks_dir: Path, store: str) -> Iterator[subprocess.Popen[str]]:
    """A live process holding ``store``'s lock until the block ends (then reaped)."""
    proc = python(HOLD, str(locks_dir), store, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)
        assert proc.stdout is not None and proc.stdin is not None
        proc.stdout.close()
        proc.stdin.close()


def dead_holder(path: Path) -> int:
    """A process that took the lock at ``path`` and died holding it (reaped); its pid."""
    proc = python(TAKE_AND_DIE, str(path))
    assert proc.wait(timeout=30) == 0
    return proc.pid


def write_lock(path: Path, **fields: object) -> LockInfo:
    """A lock file naming this process, with ``fields`` changed."""
    pid = os.getpid()
    info = LockInfo(
        pid=pid,
        start_ticks=process_start_ticks(pid) or 0,
        boot_id=boot_id(),
        host=socket.gethostname(),
        lock_id="0123456789abcdef",
        acquired_at=time.time(),
    )
    info = msgspec.structs.replace(info, **fields)
    atomic_write(path, msgspec.json.encode(info))
    return info


def lock_id(path: Path) -> str:
    return str(json.loads(path.read_text())["lock_id"])


# ---------------------------------------------------------------- locks, directly


def test_lock_states_of_real_processes(tmp_path: Path) -> None:
    # Scenario 31, at the store level.
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o700)
    path = locks / "controller.lock"
    assert classify(path) is LockState.ABSENT

    # A dead pid on this host: stale, and taken.
    dead = dead_holder(path)
    assert json.loads(path.read_text())["pid"] == dead
    assert classify(path) is LockState.STALE
    mine = FileLock(path)
    assert mine.try_take() is LockState.ABSENT
    assert json.loads(path.read_text())["pid"] == os.getpid()
    assert classify(path) is LockState.ACTIVE
    mine.release()
    assert classify(path) is LockState.ABSENT

    # A live holder: active, waited for (bounded), never taken.
    with holder(locks, "controller") as proc:
        held = json.loads(path.read_text())
        assert held["pid"] == proc.pid and classify(path) is LockState.ACTIVE
        started = time.monotonic()
        with pytest.raises(PanewardenError) as busy, hold_sync(locks, "controller", wait_s=0.3):
            pass
        assert busy.value.code is ErrorCode.STORE_BUSY
        assert time.monotonic() - started >= 0.3
        assert json.loads(path.read_text()) == held

        # The same pid with another start time (a reused pid): stale, and taken.
        other = process_start_ticks(proc.pid)
        assert other is not None
        write_lock(path, pid=proc.pid, start_ticks=other + 1)
        assert classify(path) is LockState.STALE
        with hold_sync(locks, "controller", wait_s=1):
            assert json.loads(path.read_text())["pid"] == os.getpid()
        assert classify(path) is LockState.ABSENT

    # A live pid of another boot: stale.
    write_lock(path, boot_id="00000000-0000-0000-0000-000000000000")
    assert classify(path) is LockState.STALE
    with hold_sync(locks, "controller", wait_s=1):
        pass

    # Another host's, or unreadable: indeterminate, refused at once and left as it is.
    for content in (None, b"{not json", b""):
        if content is None:
            write_lock(path, host=OTHER_HOST)
        else:
            path.write_bytes(content)
        before = path.read_bytes()
        assert classify(path) is LockState.INDETERMINATE
        assert FileLock(path).try_take() is LockState.INDETERMINATE
        started = time.monotonic()
        with pytest.raises(PanewardenError) as busy, hold_sync(locks, "controller", wait_s=10):
            pass
        assert busy.value.code is ErrorCode.STORE_BUSY
        assert time.monotonic() - started < 5, "an indeterminate lock was waited for"
        assert path.read_bytes() == before
    path.unlink()
    os.symlink(locks / "elsewhere", path)
    assert classify(path) is LockState.INDETERMINATE


def test_a_lock_of_an_exited_but_unreaped_holder_is_stale(tmp_path: Path) -> None:
    # The holder exited; its parent has not reaped it yet (a zombie keeps its pid and
    # start time): it is gone all the same, and its lock must not block for ever.
    path = tmp_path / "locks" / "controller.lock"
    path.parent.mkdir(mode=0o700)
    proc = python(TAKE_AND_DIE, str(path))
    try:
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        assert Path(f"/proc/{proc.pid}/stat").exists(), "reaped too early"
        assert classify(path) is LockState.STALE
        with hold_sync(path.parent, "controller", wait_s=1):
            assert json.loads(path.read_text())["pid"] == os.getpid()
    finally:
        proc.wait(timeout=10)


def test_a_holder_killed_while_holding_leaves_a_lock_the_next_process_takes(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    with holder(locks, "receipts") as proc:
        path = locks / "receipts.lock"
        assert json.loads(path.read_text())["pid"] == proc.pid
        proc.kill()
        proc.wait(timeout=10)
        assert classify(path) is LockState.STALE
        with hold_sync(locks, "receipts", wait_s=1):
            assert classify(path) is LockState.ACTIVE
    assert classify(locks / "receipts.lock") is LockState.ABSENT


ORDER = """
import asyncio, sys
from pathlib import Path
from supervisor.store.locks import StoreLocks

async def main() -> None:
    locks = StoreLocks(Path(sys.argv[1]), wait_s=30)
    stores = sys.argv[2].split(",")
    for _ in range(int(sys.argv[3])):
        async with locks.hold(*stores):
            pass

asyncio.run(main())
"""


MUTEX = """
import os, random, sys
from pathlib import Path
from supervisor.store.locks import hold_sync

locks, log, rounds, seed = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(seed)
me = os.getpid()
fd = os.open(log, os.O_WRONLY | os.O_APPEND)
for _ in range(rounds):
    with hold_sync(locks, "controller", wait_s=30):
        os.write(fd, f"+{me}\\n".encode())
        if rng.random() < 0.04:
            os._exit(3)  # dies holding the lock: the next taker must find it stale
        os.write(fd, f"-{me}\\n".encode())
"""


@pytest.mark.slow
def test_contending_processes_never_hold_a_lock_at_once(tmp_path: Path) -> None:
    # Processes take one store's lock in turn, some dying while they hold it. Each holder
    # logs its entry and exit: an entry may follow only an exit, or the entry of a
    # holder that died. Never a spurious `store_busy` (a lock file caught half written).
    rng, seed = seeded_rng("test_contending_processes_never_hold_a_lock_at_once")
    locks, log = tmp_path / "locks", tmp_path / "log"
    log.write_text("")
    procs: list[subprocess.Popen[str]] = []
    try:
        for wave in range(3):
            batch = [
                python(
                    MUTEX,
                    str(locks),
                    str(log),
                    "60",
                    str(rng.randrange(2**32)),
                    stderr=subprocess.PIPE,
                )
                for _ in range(4)
            ]
            procs += batch
            for proc in batch:
                _, err = proc.communicate(timeout=120)
                assert proc.returncode in (0, 3), f"seed {seed}, wave {wave}: {err[-2000:]}"
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=10)
    died = {str(p.pid) for p in procs if p.returncode == 3}
    holder: str | None = None
    for line in log.read_text().split():
        who = line[1:]
        if line.startswith("+"):
            assert holder is None or holder in died, (
                f"seed {seed}: {who} entered while {holder} held"
            )
            holder = who
        else:
            assert holder == who, f"seed {seed}: {who} left a lock held by {holder}"
            holder = None
    assert died, f"seed {seed}: no holder died; the test proved less than it should"


def test_processes_asking_for_stores_in_opposite_orders_never_deadlock(tmp_path: Path) -> None:
    # Two processes, one asking for (receipts, controller), the other for (controller,
    # receipts): both take them in the one store order, so both finish.
    locks = tmp_path / "locks"
    procs = [
        python(ORDER, str(locks), stores, "150")
        for stores in ("receipts,adopted,controller", "controller,adopted,receipts")
    ]
    try:
        assert [p.wait(timeout=90) for p in procs] == [0, 0]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=10)
    assert list(locks.glob("*.lock")) == [] and list(locks.glob("*.tmp")) == []


# ---------------------------------------------------------------- records, directly


def lease(key: str, generation: int = 1) -> ControllerLease:
    return ControllerLease(
        version=RECORD_VERSION,
        lease_id=key,
        controller_id="c",
        identity="stdio:stdio",
        generation=generation,
        fence_sha256="0" * 64,
        state="active",
        authority_ref="r",
        authority_sha256=AUTHORITY_SHA,
        ttl_s=900,
        created_at=1.0,
        renewed_at=1.0,
        expires_at=901.0,
    )


def store(directory: Path) -> RecordStore[ControllerLease]:
    return RecordStore(directory, ControllerLease, RECORD_VERSION, "lease_id")


def test_corrupt_records_are_quarantined_and_the_others_still_load(tmp_path: Path) -> None:
    # Scenario 32, at the store level.
    records = store(tmp_path / "controller")
    for key in ("good1", "good2", "garbled", "torn", "oldver", "misnamed", "link", "fifo", "huge"):
        records.save(key, lease(key))
    d = records.dir
    (d / "garbled.json").write_bytes(b"\x00\xffnot a record")
    (d / "torn.json").write_bytes(msgspec.json.encode(lease("torn"))[:40])
    (d / "oldver.json").write_bytes(
        msgspec.json.encode(msgspec.structs.replace(lease("oldver"), version=0))
    )
    (d / "misnamed.json").write_bytes(msgspec.json.encode(lease("good1")))
    (d / "link.json").unlink()
    os.symlink(d / "good2.json", d / "link.json")
    (d / "fifo.json").unlink()
    os.mkfifo(d / "fifo.json", 0o600)
    (d / "huge.json").write_bytes(b" " * (1024 * 1024))
    (d / ".good1.json.abc123.tmp").write_bytes(b"{half")

    reopened = store(tmp_path / "controller")
    assert reopened.swept == 1 and not list(d.glob("*.tmp"))
    loaded, quarantined = reopened.load_all()
    assert sorted(loaded) == ["good1", "good2"]
    assert loaded["good1"] == lease("good1")
    bad = ["fifo", "garbled", "huge", "link", "misnamed", "oldver", "torn"]
    assert sorted(quarantined) == [f"{k}.json" for k in bad]
    assert reopened.quarantined() == [f"{k}.json.corrupt" for k in bad]
    assert sorted(p.name for p in d.glob("*.json")) == ["good1.json", "good2.json"]
    # The store is usable: a quarantined key can be written again.
    reopened.save("torn", lease("torn", generation=2))
    assert reopened.load("torn") == lease("torn", generation=2)
    assert {p.stat().st_mode & 0o777 for p in d.glob("*.json")} == {0o600}


# ---------------------------------------------------------------- through the service


@pytest.fixture
async def locked(tmp_path: Path) -> AsyncIterator[Coord]:
    async with stdio_service(tmp_path, PANEWARDEN_STORE_LOCK_WAIT_S="1") as running:
        yield running


def pid_in(pid: int, text: str) -> bool:
    return re.search(rf"(?<![0-9]){pid}(?![0-9])", text) is not None


@pytest.mark.anyio
async def test_service_status_reports_lock_states_and_recovers_stale_locks(locked: Coord) -> None:
    # Scenarios 31 and 33, through the service.
    tools, locks = locked.tools, locked.state / "locks"
    status = await tools.call("service_status")
    assert {s["lock"] for s in status["stores"].values()} == {"absent"}
    assert set(status["stores"]) == {
        "controller",
        "reviewer",
        "writer",
        "adopted",
        "receipts",
        "verifications",
    }

    dead = dead_holder(locks / "controller.lock")
    foreign = write_lock(locks / "receipts.lock", host=OTHER_HOST)
    await tools.call("start_pane", name="plain", profile="demo", cwd="/")
    idle = await tools.wait("plain", until=["idle"])
    with holder(locks, "reviewer") as live:
        ticks = process_start_ticks(live.pid)
        assert ticks is not None
        reused = write_lock(locks / "adopted.lock", pid=live.pid, start_ticks=ticks + 1)
        held_id = lock_id(locks / "reviewer.lock")
        status = await tools.call("service_status")
        assert {k: v["lock"] for k, v in status["stores"].items()} == {
            "controller": "stale",
            "reviewer": "active",
            "writer": "absent",
            "adopted": "stale",
            "receipts": "indeterminate",
            "verifications": "absent",
        }
        text = json.dumps(status)
        for pid in (dead, live.pid):
            assert not pid_in(pid, text), f"pid {pid} in {text}"
        assert (
            leaked(
                [
                    held_id,
                    foreign.lock_id,
                    reused.lock_id,
                    OTHER_HOST,
                    boot_id(),
                    socket.gethostname(),
                ],
                text,
            )
            == []
        )

        # The stale controller lock is taken; the live reviewer lock is waited for, then
        # refused; the indeterminate receipts lock is refused and left alone.
        ctl = await acquire(tools, "boss")
        started = time.monotonic()
        busy = await ctl.error("reviewer_start", name="rev", profile="demo", cwd="/", purpose="p")
        assert busy["code"] == "store_busy" and time.monotonic() - started >= 1.0, busy
        assert lock_id(locks / "reviewer.lock") == held_id
        refused = await ctl.error("receipt_abandon", receipt=f"rcp-{'0' * 32}")
        assert refused["code"] == "store_busy", refused
        assert leaked([held_id, foreign.lock_id, OTHER_HOST], refused) == []
    assert json.loads((locks / "receipts.lock").read_text()) == msgspec.to_builtins(foreign)

    # With the live holder gone, its lock is stale; pane_adopt takes it and the reused one.
    adopted = await ctl.call(
        "pane_adopt",
        name="plain",
        expected_seq=idle["seq"],
        authority_ref="x",
        authority_sha256=AUTHORITY_SHA,
    )
    assert adopted["state"] == "active"
    status = await tools.call("service_status")
    assert {k: v["lock"] for k, v in status["stores"].items() if v["lock"] != "absent"} == {
        "receipts": "indeterminate"
    }
    (locks / "receipts.lock").unlink()  # the operator looked, and removed it
    lease_id = adopted["lease_id"]
    closed = await ctl.call(
        "adopted_close",
        lease_id=lease_id,
        expected_seq=idle["seq"],
        checkpoint_ref="x",
        checkpoint_sha256=AUTHORITY_SHA,
    )
    assert closed["state"] == "closed"


@pytest.mark.anyio
async def test_a_corrupt_record_is_quarantined_and_reported_by_the_service(locked: Coord) -> None:
    # Scenario 32, through the service.
    tools, state = locked.tools, locked.state
    one = await acquire(tools, "one")
    await acquire(tools, "two")
    path = state / "leases" / "controller" / f"{one.creds['lease_id']}.json"
    with hold_sync(state / "locks", "controller"):
        path.write_bytes(b'{"version": 1, "lease_id": "torn')
    listed = (await tools.call("controller_list"))["leases"]
    assert [x["controller_id"] for x in listed] == ["two"]
    status = await tools.call("service_status")
    assert status["stores"]["controller"] == {"lock": "absent", "quarantined": 1}
    assert (
        not path.exists() and path.with_name(path.name[: -len(".json")] + ".json.corrupt").exists()
    )
    assert (await one.error("controller_renew"))["code"] == "fence_invalid"
    again = await acquire(tools, "one")
    assert (await tools.call("controller_list"))["leases"][0]["lease_id"] == again.creds["lease_id"]
