"""``panewarden ctl``: a coordinator inside a pane drives a demo-agent reviewer over the
ctl socket, attested by its process ancestry; other panes, processes outside every pane
and a process that reused a dead pane program's pid are refused.

The coordinator's pane runs ``ctl_runner.py``, which runs ``panewarden ctl`` commands
the test writes to a FIFO (as its child, or double-forked so the pane's worker adopts
it) and leaves their exit status and output in files.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from supervisor.front.ctl.attestation import PaneAnchor, ProcessKey, match_ancestry
from supervisor.front.ctl.wire import MAX_REQUEST_BYTES
from tests.conftest import REPO, Tools, stdio_params
from tests.control.conftest import ALL_SCOPES
from tests.faults import alive, key_of, start_ticks, supervisor_of
from tests.polling import apoll, poll
from tests.service.conftest import ServiceFactory, connect, digest, new_token, read_audit

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

RUNNER = Path(__file__).with_name("ctl_runner.py")
SHA = hashlib.sha256(b"issue 8").hexdigest()
CTL_TIMEOUT_S = 120.0


def write_profiles(tmp: Path) -> Path:
    """The demo agent for reviewers, and a shell profile whose panes run a caller argv."""
    path = tmp / "profiles.json"
    path.write_text(
        json.dumps(
            {
                "allow_arbitrary_command": True,
                "profiles": [
                    {
                        "name": "demo",
                        "agent": "demo",
                        "argv": [sys.executable, "-m", "supervisor.demo.agent"],
                        "cwds": ["/"],
                    },
                    {"name": "shell", "agent": "generic", "argv": ["/bin/sh"], "cwds": ["/"]},
                ],
            }
        )
    )
    return path


@dataclass
class Ran:
    """One ``panewarden ctl`` run: exit status, stdout, stderr."""

    rc: int
    out: str
    err: str

    def json(self) -> dict[str, Any]:
        lines = self.out.strip().splitlines()
        assert len(lines) == 1, f"expected one JSON line: {self}"
        return dict(json.loads(lines[0]))

    def error_code(self) -> str:
        return str(self.json().get("error", {}).get("code"))


class PaneShell:
    """A pane whose program runs ``panewarden ctl`` commands for the test."""

    def __init__(self, tools: Tools, name: str, tmp: Path) -> None:
        self.tools, self.name = tools, name
        self.dir = tmp / f"shell-{name}"
        self.dir.mkdir()
        self.fifo = self.dir / "requests"
        os.mkfifo(self.fifo, 0o600)
        self.count = 0
        self.info: dict[str, Any] = {}

    async def start(self) -> PaneShell:
        argv = [sys.executable, str(RUNNER), str(self.fifo), str(self.dir)]
        self.info = (
            await self.tools.call("start_pane", name=self.name, profile="shell", argv=argv)
        )["pane"]
        found = await self.tools.call(
            "wait_output", name=self.name, pattern="runner ready", timeout_s=60
        )
        assert found["matched"], found
        return self

    async def ctl(self, *argv: str, detach: bool = False) -> Ran:
        self.count += 1
        ident = f"c{self.count}"
        line = json.dumps({"id": ident, "argv": list(argv), "detach": detach}) + "\n"
        # The runner holds the FIFO open: a short write never blocks and is atomic.
        fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        rc = self.dir / f"{ident}.rc"
        assert await apoll(rc.exists, CTL_TIMEOUT_S), f"ctl {argv} never finished"
        return Ran(
            int(rc.read_text()),
            (self.dir / f"{ident}.out").read_text(),
            (self.dir / f"{ident}.err").read_text(),
        )


def ctl_env(sock: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PANEWARDEN_")}
    if sock is not None:
        env["PANEWARDEN_CTL_SOCKET"] = str(sock)
    return env


async def outside(sock: Path | None, *argv: str) -> Ran:
    """``panewarden ctl`` run by the test process itself: in no pane."""
    with anyio.fail_after(CTL_TIMEOUT_S):
        done = await anyio.run_process(
            [sys.executable, "-m", "supervisor", "ctl", *argv],
            env=ctl_env(sock),
            cwd=REPO,
            check=False,
        )
    return Ran(done.returncode, done.stdout.decode(), done.stderr.decode())


def environ_of(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")


def socket_of(state_dir: Path) -> Path:
    # ``serve --stdio`` answers initialize before its service (and the ctl socket) is up.
    record = state_dir / "run" / "ctl"
    poll(record.exists, 30.0, what="the ctl socket's record")
    return Path(record.read_text().strip())


@dataclass
class Boss:
    tools: Tools
    coord: PaneShell
    sock: Path
    tmp: Path
    holder: str
    reviewer: dict[str, Any]


@pytest.fixture
async def boss(tmp_path: Path, state_dir: Path) -> AsyncIterator[Boss]:
    """A service; pane ``coord`` acquired controller ``boss`` and started reviewer ``rev``
    (the demo agent) through ``panewarden ctl``."""
    profiles = write_profiles(tmp_path)
    async with Client(stdio_params(state_dir, PANEWARDEN_PROFILES=str(profiles))) as client:
        tools = Tools(client)
        coord = await PaneShell(tools, "coord", tmp_path).start()
        acquired = await coord.ctl(
            "--json",
            "acquire",
            "--controller-id",
            "boss",
            "--authority-ref",
            "issue-8",
            "--authority-sha256",
            SHA,
        )
        assert acquired.rc == 0, acquired
        lease = acquired.json()
        assert "fence" not in acquired.out + acquired.err
        started = await coord.ctl(
            "--json", "reviewer-start", "rev", "--profile", "demo", "--cwd", "/", "--purpose", "x"
        )
        assert started.rc == 0, started
        await tools.wait("rev", until=["idle"])
        yield Boss(tools, coord, socket_of(state_dir), tmp_path, lease["holder"], started.json())


async def test_acquire_then_ask_from_a_pane_reaches_the_demo_reviewer(boss: Boss) -> None:
    coord, tools = boss.coord, boss.tools
    assert boss.holder.startswith("pane:coord:")
    # Every pane program is told where the socket is.
    assert f"PANEWARDEN_CTL_SOCKET={boss.sock}" in environ_of(coord.info["pid"])
    listed = (await tools.call("controller_list"))["leases"]
    assert [(x["controller_id"], x["holder"], x["state"]) for x in listed] == [
        ("pane:coord/boss", boss.holder, "active")
    ]
    assert (boss.reviewer["name"], boss.reviewer["state"]) == ("rev", "active")

    asked = await coord.ctl("--json", "ask", "rev", "--", "hello", "from", "boss")
    assert asked.rc == 0, asked
    result = asked.json()
    assert result["failed"] == [] and result["pending"] == []
    (done,) = result["completed"]
    assert done["status"]["state"] == "done" and done["status"]["turn"] == 1
    assert "reply: hello from boss" in done["output"]

    # Readable text by default: a header per receipt, then that turn's output.
    again = await coord.ctl("ask", "rev", "--", "second question")
    assert again.rc == 0, again
    assert "== rev receipt rcp-" in again.out and "reply: second question" in again.out
    assert "reply: hello from boss" not in again.out  # that turn's output only

    status = (await coord.ctl("--json", "status")).json()
    assert status["identity"] == boss.holder and status["pane"] == "coord"
    assert status["controller"]["controller_id"] == "pane:coord/boss"
    assert status["receipts"] == []  # none outstanding
    assert [r["name"] for r in status["reviewers"]] == ["rev"]
    receipts = (await coord.ctl("--json", "receipts")).json()["receipts"]
    assert [(r["name"], r["state"], r["turn"]) for r in receipts] == [
        ("rev", "completed", 1),
        ("rev", "completed", 2),
    ]

    # A process the program left behind is re-parented to the worker (a subreaper):
    # it still belongs to the pane.
    detached = await coord.ctl("--json", "status", detach=True)
    assert detached.rc == 0, detached
    assert detached.json()["identity"] == boss.holder

    renewed = await coord.ctl("--json", "renew", "--ttl-s", "600")
    assert renewed.rc == 0 and renewed.json()["state"] == "active", renewed
    seq = (await tools.call("get_status", name="rev"))["seq"]
    lease_id = boss.reviewer["lease_id"]
    closed = await coord.ctl(
        "--json", "reviewer-close", "--lease-id", lease_id, "--expected-seq", str(seq)
    )
    assert closed.rc == 0, closed
    assert closed.json()["state"] == "closed" and closed.json()["capture_sha256"]
    released = await coord.ctl(
        "--json", "release", "--checkpoint-ref", "done", "--checkpoint-sha256", SHA
    )
    assert released.rc == 0 and released.json()["state"] == "released", released
    after = await coord.ctl("--json", "ask", "rev", "--", "too late")
    assert (after.rc, after.error_code()) == (1, "fence_invalid"), after


async def test_ask_refuses_control_characters_before_anything_is_typed(boss: Boss) -> None:
    """The text check of ``send_input`` holds on the ctl path too: an ESC never reaches
    the reviewer's terminal, and no receipt is reserved for it."""
    coord, tools = boss.coord, boss.tools
    before = await tools.call("get_status", name="rev")
    for argv in (
        ("ask", "rev", "--", "\x1b[2Jzqx-esc"),
        ("ask-many", "--mode", "all", "--request", "rev=zqx-csi\x9b2J"),
        ("ask", "rev", "--", "zqx-bel\x07"),
    ):
        refused = await coord.ctl("--json", *argv)
        assert (refused.rc, refused.error_code()) == (1, "invalid_argument"), refused
        assert "control character" in refused.json()["error"]["message"]
    assert (await coord.ctl("--json", "receipts")).json()["receipts"] == []
    after = await tools.call("get_status", name="rev")
    assert (after["turn"], after["state"]) == (before["turn"], "idle"), after
    screen = (await tools.call("read_output", name="rev", scrollback=True))["text"]
    assert "zqx-" not in screen


async def test_ask_is_refused_to_every_caller_but_the_lease_holding_pane(boss: Boss) -> None:
    tools, coord = boss.tools, boss.coord
    # The holder cannot prompt its own pane.
    own = await coord.ctl("--json", "ask", "coord", "--", "hi")
    assert (own.rc, own.error_code()) == (1, "forbidden"), own
    assert "cannot prompt itself" in own.err

    # A pane holds one live controller lease: commands need not name it.
    second = await coord.ctl(
        "--json", "acquire", "--controller-id", "second", "--authority-ref", "r",
        "--authority-sha256", SHA,
    )  # fmt: skip
    assert (second.rc, second.error_code()) == (1, "lease_conflict"), second

    other = await PaneShell(tools, "other", boss.tmp).start()
    for argv in (
        ["ask", "rev", "--", "hi"],
        ["ask", "--controller-id", "boss", "rev", "--", "hi"],
        ["ask-many", "--request", "rev=hi", "--mode", "all"],
    ):
        refused = await other.ctl("--json", *argv)
        assert (refused.rc, refused.error_code()) == (1, "fence_invalid"), (argv, refused)
    taken = await other.ctl(
        "--json", "acquire", "--controller-id", "boss", "--authority-ref", "r",
        "--authority-sha256", SHA,
    )  # fmt: skip
    # Its "boss" is its own (a pane's controller ids are in its namespace): it holds
    # nothing of coord's.
    assert taken.rc == 0 and taken.json()["controller_id"] == "pane:other/boss", taken
    mine = (await other.ctl("--json", "status")).json()
    assert mine["pane"] == "other" and mine["reviewers"] == [], mine
    asked = await other.ctl("--json", "ask", "rev", "--", "hi")
    assert (asked.rc, asked.error_code()) == (1, "lease_conflict"), asked

    for argv in (["--json", "ask", "rev", "--", "hi"], ["--json", "status"]):
        stranger = await outside(boss.sock, *argv)
        assert (stranger.rc, stranger.error_code()) == (1, "forbidden"), stranger
        assert "runs in no pane" in stranger.err

    # Nothing of it reached the reviewer: it never started a turn.
    assert (await tools.call("get_status", name="rev"))["turn"] == 0
    # And the holder still drives it.
    asked = await coord.ctl("ask", "rev", "--", "still mine")
    assert asked.rc == 0 and "reply: still mine" in asked.out, asked


async def test_a_process_that_reused_a_dead_pane_programs_pid_is_refused(
    tmp_path: Path, state_dir: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("forcing a pid reuse needs root (it writes /proc/sys/kernel/ns_last_pid)")
    profiles = write_profiles(tmp_path)
    async with Client(stdio_params(state_dir, PANEWARDEN_PROFILES=str(profiles))) as client:
        tools = Tools(client)
        victim = await PaneShell(tools, "victim", tmp_path).start()
        sock = socket_of(state_dir)
        # Attested while its program lives.
        before = await victim.ctl("--json", "status")
        assert before.rc == 0 and before.json()["pane"] == "victim", before

        pid = victim.info["pid"]
        ticks = start_ticks(pid)
        assert ticks is not None
        fd = os.pidfd_open(pid)
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        finally:
            os.close(fd)
        await tools.wait("victim", until=["exited"])
        # The worker reaps its program: the pid is free again.
        assert await apoll(lambda: start_ticks(pid) is None, 10)

        reused = await anyio.to_thread.run_sync(_run_ctl_as_pid, pid, sock)
        if reused is None:
            pytest.skip(f"could not get pid {pid} again (ns_last_pid not writable, or taken)")
        new_ticks, ran = reused
        assert new_ticks != ticks
        assert (ran.rc, ran.error_code()) == (1, "forbidden"), ran
        # The pane itself is still there, its worker alive: only the pid matched.
        assert (await tools.call("get_status", name="victim"))["lifecycle"] == "exited"


def _run_ctl_as_pid(pid: int, sock: Path) -> tuple[int, Ran] | None:
    """Start ``panewarden ctl --json status`` so that it gets ``pid``; None if the kernel
    gave it another pid every time."""
    for _ in range(200):
        try:
            Path("/proc/sys/kernel/ns_last_pid").write_text(str(pid - 1))
        except OSError:
            return None
        proc = subprocess.Popen(
            [sys.executable, "-m", "supervisor", "ctl", "--json", "status"],
            env=ctl_env(sock),
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        if proc.pid != pid:
            proc.kill()
            proc.communicate(timeout=30)
            continue
        new_ticks = start_ticks(pid)
        out, err = proc.communicate(timeout=CTL_TIMEOUT_S)
        assert new_ticks is not None
        return new_ticks, Ran(proc.returncode, out.decode(), err.decode())
    return None


async def test_the_socket_answers_bad_requests_with_typed_errors_and_goes_on_stop(
    tmp_path: Path, state_dir: Path
) -> None:
    async with Client(stdio_params(state_dir)) as client:
        tools = Tools(client)
        sock = socket_of(state_dir)
        assert sock.stat().st_mode & 0o777 == 0o600
        assert len(str(sock)) < 108  # sun_path
        for raw in (
            b"not json\n",
            b"[1, 2]\n",
            b'{"op": "status", "extra": 1}\n',
            b'{"op": "no-such-command"}\n',
            b"x" * (MAX_REQUEST_BYTES + 10) + b"\n",
        ):
            answer = await _exchange_raw(sock, raw)
            assert answer["ok"] is False and answer["error"]["code"] == "invalid_argument", raw[:40]
        # A request cut short (no newline before the client's end) is refused too.
        answer = await _exchange_raw(sock, b'{"op": "status"}', shut_write=True)
        assert answer["error"]["code"] == "invalid_argument"
        # Arguments are validated after attestation: from outside every pane, refused.
        answer = await _exchange_raw(sock, b'{"op": "ask", "args": {"name": "Bad!"}}\n')
        assert answer["error"]["code"] == "forbidden"

        # Many clients at once, each answered, each connection closed: callers in no
        # pane share one pane's allowance of connections, those beyond it are busy.
        answers = await asyncio.gather(
            *(_exchange_raw(sock, b'{"op": "status"}\n') for _ in range(32))
        )
        codes = [a["error"]["code"] for a in answers]
        assert set(codes) <= {"forbidden", "ctl_busy"} and "forbidden" in codes, codes
        assert (await tools.call("list_panes"))["panes"] == []
    assert not sock.exists()
    assert not (state_dir / "run" / "ctl").exists()


async def test_a_10_mb_request_is_refused_and_the_refusal_is_read_after_writing_it(
    state_dir: Path,
) -> None:
    """A client that writes a 10 MB request line, then reads, gets `invalid_argument`
    naming the bound: the service answers once the bound is crossed and keeps reading
    (and dropping) the rest of the line, so the client's write never meets EPIPE."""
    async with Client(stdio_params(state_dir)) as client:
        tools = Tools(client)
        sock = socket_of(state_dir)
        oversized = b'{"op": "status", "args": {"x": "' + b"x" * 10_000_000 + b'"}}\n'
        for shut_write in (False, True):
            answer = await asyncio.to_thread(_write_all_then_read, sock, oversized, shut_write)
            assert answer["ok"] is False, answer
            assert answer["error"]["code"] == "invalid_argument", answer
            assert str(MAX_REQUEST_BYTES) in answer["error"]["message"], answer
        # The service goes on serving.
        answer = await _exchange_raw(sock, b'{"op": "status"}\n')
        assert answer["error"]["code"] == "forbidden"
        assert (await tools.call("list_panes"))["panes"] == []


def _write_all_then_read(sock_path: Path, raw: bytes, shut_write: bool) -> dict[str, Any]:
    """A plain blocking client: the whole request first, then the one answer line."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(str(sock_path))
        sock.sendall(raw)  # EPIPE / ECONNRESET here is the bug
        if shut_write:
            sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    lines = data.splitlines()
    assert len(lines) == 1, data[:200]
    return dict(json.loads(lines[0]))


async def test_ctl_calls_are_audited_under_the_attested_pane(tmp_path: Path) -> None:
    """Over HTTP with an audit file, every mutating ctl call leaves one content-free
    record naming the pane identity that made it; reads leave none."""
    factory = ServiceFactory(tmp_path)
    token = new_token()
    try:
        service = factory.start(
            token=None,
            clients=[{"name": "ops", "token_sha256": digest(token), "scopes": ALL_SCOPES}],
            audit=True,
            extra_env={"PANEWARDEN_PROFILES": str(write_profiles(tmp_path))},
        )
        async with connect(service.url, token) as client:
            tools = Tools(client)
            coord = await PaneShell(tools, "coord", tmp_path).start()
            acquire = ("--controller-id", "boss", "--authority-ref", "r")
            acquired = await coord.ctl("--json", "acquire", *acquire, "--authority-sha256", SHA)
            assert acquired.rc == 0, acquired
            holder = acquired.json()["holder"]
            assert (await coord.ctl("--json", "status")).rc == 0
            refused = await coord.ctl("--json", "ask", "nobody", "--", "secret-words\x1b")
            assert refused.error_code() == "invalid_argument", refused
            missing = await coord.ctl("--json", "ask", "nobody", "--", "secret-words")
            assert missing.rc == 1, missing
        audit = read_audit(service.root / "audit" / "audit.jsonl")
    finally:
        factory.close()
    ctl = [r for r in audit if r["tool"].startswith("ctl ")]
    assert [(r["client"], r["tool"], r["pane"], r["outcome"]) for r in ctl] == [
        (holder, "ctl acquire", None, "ok"),
        (holder, "ctl ask", "nobody", "error"),
        (holder, "ctl ask", "nobody", "error"),
    ], ctl
    assert ctl[1]["code"] == "invalid_argument"
    assert ctl[2]["code"] == missing.error_code()
    assert "secret-words" not in json.dumps(audit)


async def _exchange_raw(sock: Path, raw: bytes, *, shut_write: bool = False) -> dict[str, Any]:
    """Send raw bytes, read until the service closes; the one answer line."""
    with anyio.fail_after(30):
        reader, writer = await asyncio.open_unix_connection(str(sock), limit=2**20)
        try:
            writer.write(raw)
            await writer.drain()
            if shut_write:
                writer.write_eof()
            data = await reader.read()  # the service closes after its answer
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
    lines = data.splitlines()
    assert len(lines) == 1, data[:200]
    return dict(json.loads(lines[0]))


def test_usage_and_configuration_errors_exit_2(tmp_path: Path) -> None:
    def run(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "supervisor", "ctl", *argv],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    nowhere = ctl_env(tmp_path / "no.sock")
    missing = run(nowhere, "status")
    assert missing.returncode == 2 and "no service listens" in missing.stderr
    no_state = {**ctl_env(None), "PANEWARDEN_STATE_DIR": str(tmp_path / "state")}
    unset = run(no_state, "status")
    assert unset.returncode == 2 and "PANEWARDEN_CTL_SOCKET is not set" in unset.stderr
    for argv in (
        ["ask", "rev"],  # no message
        ["ask-many", "--request", "rev", "--mode", "all"],  # not NAME=MESSAGE
        ["status", "--timeout-s", "0"],
        ["collect"],  # no receipt
        ["acquire", "--controller-id", "c"],  # missing authority
        ["frobnicate"],
    ):
        bad = run(nowhere, *argv)
        assert bad.returncode == 2, (argv, bad.stderr)


# ---------------------------------------------------------------- the ancestry rule


def _table(rows: dict[int, tuple[int, int]]) -> Any:
    return lambda pid: rows.get(pid)


ANCHOR = PaneAnchor("p", "i", worker=ProcessKey(10, 100), program=ProcessKey(11, 110))


def test_ancestry_finds_the_program_or_the_worker() -> None:
    rows = {30: (20, 130), 20: (11, 120), 11: (10, 110), 10: (1, 100), 1: (0, 1)}
    assert match_ancestry(30, [ANCHOR], read_stat=_table(rows)) is ANCHOR
    # Re-parented to the worker (the program is gone): still the pane.
    rows = {30: (10, 130), 10: (1, 100), 1: (0, 1)}
    assert match_ancestry(30, [ANCHOR], read_stat=_table(rows)) is ANCHOR


@pytest.mark.parametrize(
    ("rows", "why"),
    [
        ({30: (1, 130), 1: (0, 1)}, "runs in no pane"),
        # pid 11 reused by a process that started later than the anchor recorded
        ({30: (11, 130), 11: (1, 125), 1: (0, 1)}, "runs in no pane"),
        # a parent younger than its child: the parent's pid was reused under the walk
        ({30: (20, 130), 20: (10, 140), 10: (1, 100)}, "ancestry changed"),
        # the walk is bounded
        ({n: (n + 1, 1000 - n) for n in range(100, 200)}, "within 32 ancestors"),
        ({30: (20, 130)}, "is gone"),
    ],
)
def test_ancestry_refusals(rows: dict[int, tuple[int, int]], why: str) -> None:
    start = 30 if 30 in rows else 100
    with pytest.raises(Exception, match=why) as caught:
        match_ancestry(start, [ANCHOR], read_stat=_table(rows))
    assert getattr(caught.value, "code", None) == "forbidden"


def test_ancestry_is_read_twice_and_must_not_change() -> None:
    rows = {30: (11, 130), 11: (10, 110)}
    reads: list[int] = []

    def reader(pid: int) -> tuple[int, int] | None:
        reads.append(pid)
        if reads.count(30) > 1:
            return (11, 999)  # the caller exited and its pid was reused
        return rows.get(pid)

    with pytest.raises(Exception, match="ancestry changed"):
        match_ancestry(30, [ANCHOR], read_stat=reader)


def test_a_peer_that_started_after_the_connection_is_not_the_peer() -> None:
    rows = {30: (11, 130), 11: (10, 110)}
    with pytest.raises(Exception, match="started after it connected"):
        match_ancestry(30, [ANCHOR], read_stat=_table(rows), started_by_ticks=129)
    assert match_ancestry(30, [ANCHOR], read_stat=_table(rows), started_by_ticks=130) is ANCHOR


async def test_a_pane_readopted_after_a_supervisor_crash_is_still_attested(
    tmp_path: Path, state_dir: Path
) -> None:
    profiles = write_profiles(tmp_path)
    params = stdio_params(state_dir, PANEWARDEN_PROFILES=str(profiles))
    async with Client(params) as client:
        tools = Tools(client)
        coord = await PaneShell(tools, "coord", tmp_path).start()
        acquired = await coord.ctl(
            "--json", "acquire", "--controller-id", "boss", "--authority-ref", "r",
            "--authority-sha256", SHA,
        )  # fmt: skip
        assert acquired.rc == 0, acquired
        supervisor = key_of(supervisor_of(coord.info["worker_pid"]) or 0)
        assert supervisor is not None
        # A crash: the worker and the runner outlive the supervisor.
        os.kill(supervisor[0], signal.SIGKILL)
        assert await apoll(lambda: not alive(supervisor), 10)
    async with Client(params) as client:
        # Listed tools mean a started service (initialize is answered before it starts).
        await client.list_tools()
        coord.tools = Tools(client)
        # The new service re-adopted the worker (start time from its record) and took the
        # program's start time from its re-introduction: the same pane, the same lease.
        status = await coord.ctl("--json", "status")
        assert status.rc == 0, status
        assert status.json()["identity"] == acquired.json()["holder"]
        assert status.json()["controller"]["controller_id"] == "pane:coord/boss"
        detached = await coord.ctl("--json", "status", detach=True)
        assert detached.rc == 0 and detached.json()["identity"] == acquired.json()["holder"]
