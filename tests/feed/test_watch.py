"""``panewarden watch`` on a real PTY against a real HTTP service and its operator socket.

The pane runs ``tests/feed/programs.py``: it prints a marker carrying its own clock when
the test asks, and logs every byte that reaches it. The viewer's screen is read with
pyte, so "seen" means drawn on the operator's terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import ptyprocess
import pyte
import pytest

from supervisor.front.feed.wire import OPERATOR_SOCKET_NAME
from supervisor.store.statedir import runtime_socket_path
from tests.polling import poll
from tests.service.conftest import (
    REPO,
    Service,
    ServiceFactory,
    call,
    connect,
    ok,
    run,
    token_of,
    write_secret,
)

PROGRAM = REPO / "tests" / "feed" / "programs.py"
LATENCY_BOUND_S = 0.2
MARKS = 10


class Viewer:
    """``panewarden watch`` on a PTY, its screen kept by pyte."""

    def __init__(self, argv: list[str], env: dict[str, str], cols: int = 100, rows: int = 30):
        self.proc = ptyprocess.PtyProcess.spawn(
            argv, env=env, cwd=str(REPO), dimensions=(rows, cols)
        )
        self.screen = pyte.Screen(cols, rows)
        self.stream = pyte.ByteStream(self.screen)

    def pump(self, timeout_s: float) -> None:
        ready, _, _ = select.select([self.proc.fd], [], [], timeout_s)
        if ready:
            try:
                data = os.read(self.proc.fd, 65536)
            except OSError:
                return
            self.stream.feed(data)

    def text(self) -> str:
        return "\n".join(self.screen.display)

    def wait_for(self, needle: str, timeout_s: float) -> float:
        """Pump until ``needle`` is on the viewer's screen; returns the wall time seen."""
        deadline = time.monotonic() + timeout_s
        while needle not in self.text():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"{needle!r} never showed:\n{self.text()}")
            self.pump(min(remaining, 0.05))
        return time.time()

    def close(self) -> None:
        if self.proc.isalive():
            self.proc.terminate(force=True)
        self.proc.wait()
        self.proc.close()


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    """The pane program's byte log and its marker FIFO."""
    log, fifo = tmp_path / "read.log", tmp_path / "marks.fifo"
    log.write_bytes(b"")
    os.mkfifo(fifo, 0o600)
    return log, fifo


@pytest.fixture(params=["pyte", "ghostty"])
def service(
    services: ServiceFactory, files: tuple[Path, Path], request: pytest.FixtureRequest
) -> Service:
    if request.param == "ghostty":
        pytest.importorskip("pyghostty")
    log, fifo = files
    profile = {
        "name": "marker",
        "agent": "generic",
        "argv": [sys.executable, str(PROGRAM), str(log), str(fifo)],
        "cwds": ["/"],
        "cols": 80,
        "rows": 24,
        "confine": False,
        "emulator": request.param,
    }
    return services.start(profiles={"profiles": [profile]})


@pytest.fixture
def pane(service: Service, files: tuple[Path, Path]) -> tuple[Path, Path]:
    async def start() -> None:
        async with connect(service.url, token_of(service)) as client:
            ok(await call(client, "start_pane", {"name": "m", "profile": "marker"}))
            # The program reads its FIFO from here on (a mark written before is ENXIO).
            args = {"name": "m", "pattern": "ready", "timeout_s": 30}
            assert ok(await call(client, "wait_output", args))["matched"]

    run(start())
    return files


def _env(service: Service) -> dict[str, str]:
    return dict(service.env) | {"TERM": "xterm-256color"}


def _watch(*args: str) -> list[str]:
    return [sys.executable, "-m", "supervisor", "watch", *args]


def _mark(fifo: Path) -> None:
    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    try:
        os.write(fd, b"x\n")
    finally:
        os.close(fd)


@pytest.mark.timeout(90)
def test_watch_mirrors_within_200ms_and_keys_never_reach_the_pane(
    service: Service, pane: tuple[Path, Path]
) -> None:
    log, fifo = pane
    viewer = Viewer(_watch("m", "--url", service.url), _env(service))
    local = Viewer(_watch("m", "--state-dir", str(service.state_dir)), _env(service))
    try:
        viewer.wait_for("ready", 15)
        local.wait_for("ready", 15)
        assert "state=" in viewer.text() and "confined=" in viewer.text()
        latencies = []
        for n in range(1, MARKS + 1):
            _mark(fifo)
            seen = viewer.wait_for(f"MARK {n} ", 5)
            line = next(x for x in viewer.screen.display if f"MARK {n} " in x)
            printed = float(line.split()[2])
            latencies.append(seen - printed)
            local.wait_for(f"MARK {n} ", 5)
        # The marker's colour survived the trip.
        row = next(i for i, x in enumerate(viewer.screen.display) if "MARK 1 " in x)
        assert viewer.screen.buffer[row][0].fg in ("red", "cd0000")  # 31m, or 38;5;1
        worst = max(latencies)
        print(
            f"watch latency over {MARKS} marks: max {worst * 1000:.1f} ms, "
            f"mean {sum(latencies) / len(latencies) * 1000:.1f} ms"
        )
        assert worst < LATENCY_BOUND_S, latencies

        # Typed into both viewers: nothing of it may reach the pane.
        for v in (viewer, local):
            v.proc.write(b"typed-into-the-viewer\r\x01\x1b[A\t")
        _mark(fifo)
        viewer.wait_for(f"MARK {MARKS + 1} ", 5)
        local.wait_for(f"MARK {MARKS + 1} ", 5)
        assert log.read_bytes() == b""

        viewer.proc.write(b"q")
        poll(lambda: not viewer.proc.isalive(), 10, what="watch to quit on q")
        viewer.proc.wait()
        assert viewer.proc.exitstatus == 0
        # The other viewer goes on.
        _mark(fifo)
        local.wait_for(f"MARK {MARKS + 2} ", 5)
    finally:
        viewer.close()
        local.close()
    assert log.read_bytes() == b""


def _one_shot(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _watch(*args),
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )


def test_watch_refusals_are_one_line(
    service: Service, pane: tuple[Path, Path], tmp_path: Path
) -> None:
    env = _env(service)
    wrong = env | {"PANEWARDEN_TOKEN_FILE": str(write_secret(tmp_path / "bad", "nope" * 8))}
    cases = {
        "wrong token": (["m", "--url", service.url], wrong, "refused the token"),
        "unknown pane": (["zz", "--url", service.url], env, "no pane named 'zz'"),
        "unknown pane, socket": (["zz", "--state-dir", str(service.state_dir)], env, "no pane"),
        "no service": (["m", "--url", "http://127.0.0.1:9/mcp"], env, "cannot reach"),
        "no local service": (["m", "--state-dir", str(tmp_path)], env, "no service is running"),
        # Checked as top checks it (one home): it was taken as given and dialled.
        "bad url": (["m", "--url", "ftp://x/mcp"], env, "is not an http:// or https:// URL"),
        "bad PANEWARDEN_URL": (["m"], env | {"PANEWARDEN_URL": "x"}, "PANEWARDEN_URL: 'x'"),
    }
    for what, (args, environ, needle) in cases.items():
        done = _one_shot(args, environ)
        assert done.returncode == 1, (what, done)
        assert needle in done.stderr, (what, done.stderr)
        assert "Traceback" not in done.stderr, (what, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, (what, done.stderr)


def test_the_feed_survives_a_viewer_that_never_reads(
    service: Service, pane: tuple[Path, Path]
) -> None:
    """A stalled socket viewer costs frames, not the pane: marks keep flowing to another."""
    _log, fifo = pane
    path = (service.state_dir / "run" / "operator").read_text().strip()

    async def scenario() -> None:
        _r, stalled = await asyncio.open_unix_connection(path)
        stalled.write(b'{"op": "watch", "pane": "m"}\n')
        await stalled.drain()
        reader, writer = await asyncio.open_unix_connection(path, limit=1 << 22)
        writer.write(b'{"op": "watch", "pane": "m"}\n')
        await writer.drain()
        for _ in range(1, 200):
            _mark(fifo)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            line = await asyncio.wait_for(reader.readline(), 10)
            if b"MARK 199 " in line:
                break
        else:
            raise AssertionError("the reading viewer never saw the last mark")
        stalled.close()
        writer.close()

    run(scenario())


PEEK = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b'{"op": "watch"}\\n')
data = b""
while not data.endswith(b"\\n"):
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
open(sys.argv[2], "wb").write(data)
"""


def test_a_program_in_a_pane_cannot_read_the_feed(services: ServiceFactory, tmp_path: Path) -> None:
    """The operator socket refuses a peer that runs inside a pane (even unconfined)."""
    out = tmp_path / "peek.out"
    service = services.prepare()
    operator = runtime_socket_path(service.state_dir, service.env).with_name(OPERATOR_SOCKET_NAME)
    profile = {
        "name": "peek",
        "agent": "generic",
        "argv": [sys.executable, "-c", PEEK, str(operator), str(out)],
        "cwds": ["/"],
        "confine": False,
    }
    profiles = write_secret(service.root / "profiles.json", json.dumps({"profiles": [profile]}))
    service.env["PANEWARDEN_PROFILES"] = str(profiles)
    service.start()
    recorded = (service.state_dir / "run" / "operator").read_text().strip()
    assert recorded == str(operator)

    async def start() -> None:
        async with connect(service.url, token_of(service)) as client:
            ok(await call(client, "start_pane", {"name": "peek", "profile": "peek"}))

    run(start())
    poll(lambda: out.exists() and out.read_bytes().endswith(b"\n"), 15, what="the peek")
    answer = json.loads(out.read_bytes())
    assert answer["event"] == "error" and answer["data"]["code"] == "forbidden", answer


@contextlib.contextmanager
def _ready_viewers(service: Service) -> Iterator[tuple[Viewer, Viewer]]:
    """Two viewers of pane ``m``, over HTTP and over the operator socket, both drawn."""
    by_url = Viewer(_watch("m", "--url", service.url), _env(service))
    by_socket = Viewer(_watch("m", "--state-dir", str(service.state_dir)), _env(service))
    try:
        for viewer in (by_url, by_socket):
            viewer.wait_for("ready", 15)
        yield by_url, by_socket
    finally:
        by_url.close()
        by_socket.close()


def _failed_in_one_line(viewer: Viewer) -> None:
    poll(lambda: not viewer.proc.isalive(), 10, what="watch to exit")
    viewer.proc.wait()
    assert viewer.proc.exitstatus == 1
    assert "Traceback" not in viewer.text()


@pytest.mark.timeout(60)
def test_watch_says_in_one_line_when_the_pane_goes(
    service: Service, pane: tuple[Path, Path]
) -> None:
    with _ready_viewers(service) as viewers:

        async def remove() -> None:
            async with connect(service.url, token_of(service)) as client:
                ok(await call(client, "remove_pane", {"name": "m"}))

        run(remove())
        for viewer in viewers:
            viewer.wait_for("panewarden watch: pane 'm' was removed", 10)
            _failed_in_one_line(viewer)


@pytest.mark.timeout(60)
def test_watch_says_in_one_line_when_the_service_stops(
    service: Service, pane: tuple[Path, Path]
) -> None:
    with _ready_viewers(service) as viewers:
        service.stop()
        for viewer in viewers:
            viewer.wait_for("panewarden watch: ", 10)
            _failed_in_one_line(viewer)
