"""The worker template process, driven over its own socket as a supervisor would.

Each test starts ``python -m paneworker.template`` with a boot record on a pipe and one
end of a socket pair, then talks ``protocol.template`` to it: the proof in its hello,
forks (a real pane worker, whose boot record the test writes), what a forked worker
inherits and what it does not, the leftovers of a SIGKILLed worker (killed by the
template, a subreaper), refused packets, a later connection, retirement and the orphan
deadline. The pytest process never waits for anything but the template it started.
"""

from __future__ import annotations

import array
import contextlib
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import zmq

from protocol.boot import BootRecord, PaneLaunch, encode_boot
from protocol.framing import Codec
from protocol.messages import Hello, ReadScreen, ScreenText
from protocol.template import (
    TEMPLATE_PROTOCOL_VERSION,
    Fork,
    Forked,
    ForkFailed,
    Retire,
    SpareScreen,
    TemplateBoot,
    TemplateHello,
    decode_from_template,
    receive_packet,
    send_packet,
)
from protocol.template import (
    encode_boot as encode_template_boot,
)
from tests.faults import ProcKey, alive, children, comm, key_of, sigkill_all, zombie_children

REPO = Path(__file__).resolve().parents[2]
ANSWER_WITHIN_S = 30.0  # the first answer waits for the template's imports
GONE_WITHIN_S = 5.0
# The pane program: a setsid grandchild that reports its pid, then the program waits.
ESCAPEE_SH = 'setsid sh -c \'echo $$ > "$0"; exec sleep 600\' "$PIDFILE" & exec sleep 600'


@dataclass
class Template:
    proc: subprocess.Popen[bytes]
    conn: socket.socket
    secret: bytes
    socket_path: str
    workdir: Path

    def send(self, msg: Fork | Retire, fds: tuple[int, ...] = ()) -> None:
        send_packet(self.conn, msg, fds)

    def receive(self, conn: socket.socket | None = None) -> tuple[object, list[int]]:
        sock = conn or self.conn
        deadline = time.monotonic() + ANSWER_WITHIN_S
        sock.settimeout(ANSWER_WITHIN_S)
        while time.monotonic() < deadline:
            got = receive_packet(sock)
            if got is not None:
                data, fds = got
                return decode_from_template(data), fds
        raise TimeoutError("no packet from the template")

    def descendants(self) -> set[ProcKey]:
        found: set[ProcKey] = set()
        stack = [self.proc.pid]
        while stack:
            for child in children(stack.pop()):
                key = key_of(child)
                if key is not None and key not in found:
                    found.add(key)
                    stack.append(child)
        return found


def _start(
    workdir: Path,
    orphan_after_s: float = 60.0,
    orphan_grace_s: float = 60.0,
    spares: list[SpareScreen] | None = None,
    log_level: str = "INFO",
) -> Template:
    secret = os.urandom(32)
    socket_path = str(workdir / "t.sock")
    boot = TemplateBoot(
        protocol_version=TEMPLATE_PROTOCOL_VERSION,
        secret=secret,
        socket_path=socket_path,
        build="test-build",
        orphan_after_s=orphan_after_s,
        orphan_grace_s=orphan_grace_s,
        spares=spares or [],
    )
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    read_fd, write_fd = os.pipe()
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "PANEWARDEN_LOG_LEVEL": log_level}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "paneworker.template",
            "--boot-fd",
            str(read_fd),
            "--conn-fd",
            str(theirs.fileno()),
        ],
        pass_fds=(read_fd, theirs.fileno()),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        env=env,
        cwd="/",
        start_new_session=True,
    )
    os.close(read_fd)
    theirs.close()
    with os.fdopen(write_fd, "wb") as pipe:
        pipe.write(encode_template_boot(boot))
    return Template(proc, ours, secret, socket_path, workdir)


@pytest.fixture
def workdir() -> Iterator[Path]:
    # Short: an AF_UNIX socket path must fit in 107 bytes.
    path = Path(tempfile.mkdtemp(prefix="pwt-", dir="/tmp"))
    os.chmod(path, 0o700)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def template(workdir: Path) -> Iterator[Template]:
    started = _start(workdir)
    try:
        yield started
    finally:
        _stop(started)


def _stop(template: Template) -> None:
    """SIGKILL the template and everything below it; reap it."""
    left = template.descendants()
    with contextlib.suppress(ProcessLookupError):
        template.proc.kill()
    sigkill_all(left)
    template.proc.wait(timeout=10)
    template.conn.close()


def _hello(template: Template, conn: socket.socket | None = None) -> TemplateHello:
    msg, fds = template.receive(conn)
    assert fds == []
    assert isinstance(msg, TemplateHello), msg
    return msg


def _boot_pipe(template: Template, argv: list[str], env: dict[str, str]) -> int:
    boot = BootRecord(
        protocol_version=1,
        instance="0123456789abcdef",
        secret=b"worker secret",
        endpoint=f"ipc://{template.workdir}/nobody.ipc",
        launch=PaneLaunch(pane="t", agent="generic", argv=argv, cwd="/", env=env, cols=80, rows=24),
    )
    read_fd, write_fd = os.pipe()
    os.write(write_fd, encode_boot(boot))
    os.close(write_fd)
    return read_fd


def _fork(template: Template, argv: list[str], env: dict[str, str]) -> tuple[Forked, int]:
    boot_fd = _boot_pipe(template, argv, env)
    try:
        template.send(Fork(rid=7), (boot_fd, 2))
    finally:
        os.close(boot_fd)
    msg, fds = template.receive()
    assert isinstance(msg, Forked), msg
    assert msg.rid == 7 and len(fds) == 1
    return msg, fds[0]


def _wait(cond: object, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return bool(cond())  # type: ignore[operator]


def _env(**extra: str) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], **extra}


def _sockets(pid: int) -> set[str]:
    links = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            links.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return {link for link in links if link.startswith("socket:")}


def _fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _stat_fields(pid: int) -> list[str]:
    raw = Path(f"/proc/{pid}/stat").read_text()
    return raw[raw.rfind(")") + 2 :].split()


# ---------------------------------------------------------------------------- tests


def test_the_hello_proves_the_secret_and_names_the_pid(template: Template) -> None:
    hello = _hello(template)
    assert hello.proof == template.secret
    assert hashlib.sha256(hello.proof).digest() == hashlib.sha256(template.secret).digest()
    assert hello.pid == template.proc.pid
    assert hello.build == "test-build"
    assert hello.protocol_version == TEMPLATE_PROTOCOL_VERSION
    assert comm(template.proc.pid) == "pw-template"
    # It listens for a later supervisor, in a socket only its user may reach.
    assert os.stat(template.socket_path).st_mode & 0o077 == 0


def test_a_forked_worker_starts_as_a_cold_one_would(template: Template, tmp_path: Path) -> None:
    _hello(template)
    pidfile = tmp_path / "escapee.pid"
    forked, pidfd = _fork(template, ["/bin/sh", "-c", ESCAPEE_SH], _env(PIDFILE=str(pidfile)))
    try:
        worker = forked.pid
        fdinfo = Path(f"/proc/self/fdinfo/{pidfd}").read_text()
        assert f"Pid:\t{worker}" in fdinfo
        assert key_of(worker) == (worker, forked.start_ticks)
        # Below the template; its own session and group once its first steps ran (the
        # template names the pid at once, before the child called setsid).
        assert int(_stat_fields(worker)[1]) == template.proc.pid

        def own_session() -> bool:
            stat = _stat_fields(worker)
            return int(stat[2]) == worker and int(stat[3]) == worker

        assert _wait(own_session, GONE_WITHIN_S), _stat_fields(worker)
        assert _wait(lambda: comm(worker) == "pw-worker", GONE_WITHIN_S)
        # The worker environment (the template's own), never the template's descriptors:
        # the standard three, the pane's PTY and its own sockets, not the listener.
        environ = Path(f"/proc/{worker}/environ").read_bytes().split(b"\0")
        assert f"PYTHONPATH={REPO}".encode() in environ
        assert _wait(pidfile.exists, GONE_WITHIN_S)
        inherited = _sockets(worker) & _sockets(template.proc.pid)
        assert not inherited, inherited
        # The pane program and its escapee run below the worker (a subreaper).
        program = [c for c in children(worker) if comm(c) == "sleep"]
        assert program, children(worker)
    finally:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        os.close(pidfd)


def test_a_sigkilled_workers_leftovers_are_killed_by_the_template(
    template: Template, tmp_path: Path
) -> None:
    _hello(template)
    pidfile = tmp_path / "escapee.pid"
    forked, pidfd = _fork(template, ["/bin/sh", "-c", ESCAPEE_SH], _env(PIDFILE=str(pidfile)))
    try:
        assert _wait(lambda: pidfile.exists() and pidfile.read_text().strip(), GONE_WITHIN_S)
        escapee = key_of(int(pidfile.read_text()))
        assert escapee is not None
        tree = template.descendants() - {(forked.pid, forked.start_ticks)}
        assert escapee in tree
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        # The worker's program and the setsid escapee re-parented to the template, which
        # killed them; the worker was reaped (no zombie), the template still serves.
        assert _wait(lambda: not any(alive(k) for k in tree), GONE_WITHIN_S), tree
        assert _wait(lambda: not children(template.proc.pid), GONE_WITHIN_S)
        assert not zombie_children(template.proc.pid)
        assert template.proc.poll() is None
        again, again_fd = _fork(template, ["/bin/sh", "-c", "exec sleep 600"], _env())
        signal.pidfd_send_signal(again_fd, signal.SIGKILL)
        os.close(again_fd)
        assert again.pid != forked.pid
    finally:
        os.close(pidfd)


def test_bad_packets_are_refused_and_their_descriptors_closed(template: Template) -> None:
    _hello(template)
    fds_before = _fd_count(template.proc.pid)
    template.conn.send(b"\xc1 not msgpack")
    template.send(Fork(rid=1))
    msg, _ = template.receive()
    assert isinstance(msg, ForkFailed) and msg.rid == 1
    extra = [os.open("/dev/null", os.O_RDONLY) for _ in range(3)]
    try:
        template.send(Fork(rid=2), tuple(extra))
        msg, _ = template.receive()
        assert isinstance(msg, ForkFailed) and msg.rid == 2
        # An unknown op with descriptors: dropped, and its descriptors with it.
        template.conn.sendmsg(
            [b"\x81\xa2op\xa4nope"],
            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", extra[:2]).tobytes())],
        )
    finally:
        for fd in extra:
            os.close(fd)
    # Still serving, holding no descriptor it was sent.
    forked, pidfd = _fork(template, ["/bin/sh", "-c", "exec sleep 600"], _env())
    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    os.close(pidfd)
    assert _wait(lambda: not children(template.proc.pid), GONE_WITHIN_S)
    assert _wait(lambda: _fd_count(template.proc.pid) == fds_before, GONE_WITHIN_S), os.listdir(
        f"/proc/{template.proc.pid}/fd"
    )
    assert forked.pid > 0


def test_a_later_connection_gets_the_proof_and_replaces_the_first(template: Template) -> None:
    _hello(template)
    later = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        later.connect(template.socket_path)
        creds = later.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        assert array.array("i", creds)[0] == template.proc.pid
        hello = _hello(template, later)
        assert hello.proof == template.secret
        # The first connection is closed: only one supervisor talks to a template.
        template.conn.settimeout(ANSWER_WITHIN_S)
        assert template.conn.recv(16) == b""
    finally:
        later.close()


def test_retire_ends_it_once_no_worker_is_left(template: Template) -> None:
    _hello(template)
    forked, pidfd = _fork(template, ["/bin/sh", "-c", "exec sleep 600"], _env())
    try:
        template.send(Retire())
        null = os.open("/dev/null", os.O_RDONLY)
        try:
            template.send(Fork(rid=9), (null, null))
        finally:
            os.close(null)
        msg, _ = template.receive()
        assert isinstance(msg, ForkFailed) and "retiring" in msg.message
        # Retiring: it waits for its worker, and listens no more.
        assert _wait(lambda: not os.path.exists(template.socket_path), GONE_WITHIN_S)
        assert template.proc.poll() is None
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        assert template.proc.wait(timeout=GONE_WITHIN_S * 2) == 0
        assert forked.pid > 0
    finally:
        os.close(pidfd)


def test_without_a_supervisor_it_ends_after_the_orphan_periods(workdir: Path) -> None:
    started = _start(workdir, orphan_after_s=0.2, orphan_grace_s=0.3)
    try:
        _hello(started)
        began = time.monotonic()
        started.conn.close()
        assert started.proc.wait(timeout=ANSWER_WITHIN_S) == 0
        assert time.monotonic() - began >= 0.5
        assert not os.path.exists(started.socket_path)
    finally:
        with contextlib.suppress(ProcessLookupError):
            started.proc.kill()
        started.proc.wait(timeout=10)


def test_a_bad_boot_record_ends_it_with_status_2(workdir: Path) -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    read_fd, write_fd = os.pipe()
    args = ["--boot-fd", str(read_fd), "--conn-fd", str(theirs.fileno())]
    proc = subprocess.Popen(
        [sys.executable, "-m", "paneworker.template", *args],
        pass_fds=(read_fd, theirs.fileno()),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO)},
    )
    os.close(read_fd)
    theirs.close()
    os.write(write_fd, b"\x93garbage")
    os.close(write_fd)
    try:
        _out, err = proc.communicate(timeout=ANSWER_WITHIN_S)
        assert proc.returncode == 2
        assert b"cannot read the template boot record" in err
        assert ours.recv(16) == b""
    finally:
        ours.close()
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(timeout=10)


def test_workers_adopt_the_spare_screen_and_each_draws_on_its_own(workdir: Path) -> None:
    """Two workers of the spare's size adopt it (the same blank screen, shared with the
    template until drawn on): each shows its own program's output and nothing of the
    other's. A worker of another size builds its own screen."""
    template = _start(
        workdir, spares=[SpareScreen(emulator="pyte", cols=80, rows=24)], log_level="DEBUG"
    )
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    endpoint = f"ipc://{workdir}/sup.ipc"
    router.bind(endpoint)
    codec = Codec()
    err_r, err_w = os.pipe()
    os.set_blocking(err_r, False)
    panes = {"a": ("alpha", 80), "b": ("bravo", 80), "c": ("charlie", 100)}
    try:
        _hello(template)
        for name, (word, cols) in panes.items():
            boot = BootRecord(
                protocol_version=1,
                instance=name * 16,
                secret=b"worker secret",
                endpoint=endpoint,
                launch=PaneLaunch(
                    pane=name,
                    agent="generic",
                    argv=["/bin/sh", "-c", f"printf '{word}\\n'; exec sleep 600"],
                    cwd="/",
                    env=_env(),
                    cols=cols,
                    rows=24,
                ),
            )
            read_fd, write_fd = os.pipe()
            os.write(write_fd, encode_boot(boot))
            os.close(write_fd)
            try:
                template.send(Fork(rid=1), (read_fd, err_w))
            finally:
                os.close(read_fd)
            msg, fds = template.receive()
            assert isinstance(msg, Forked), msg
            for fd in fds:
                os.close(fd)
        screens: dict[str, str] = {}
        deadline = time.monotonic() + ANSWER_WITHIN_S
        while len(screens) < len(panes) and time.monotonic() < deadline:
            if not router.poll(200):
                continue
            peer, frame = router.recv_multipart()
            got = codec.decode_to_supervisor(frame)
            name = peer.decode()[0]
            if isinstance(got, Hello) or (
                isinstance(got, ScreenText) and panes[name][0] not in got.text
            ):
                router.send_multipart([peer, codec.encode(ReadScreen(rid=2))])
            elif isinstance(got, ScreenText):
                screens[name] = got.text
                assert (got.cols, got.rows) == (panes[name][1], 24)
        assert set(screens) == set(panes), screens
        for name, text in screens.items():
            others = [word for other, (word, _c) in panes.items() if other != name]
            assert not any(word in text for word in others), (name, text)
        os.close(err_w)
        err_w = -1
        logged = bytearray()

        def two_adoptions_logged() -> bool:
            logged.extend(_drain(err_r))
            return logged.count(b"adopting") >= 2

        assert _wait(two_adoptions_logged, GONE_WITHIN_S), bytes(logged)
        adopted = [line for line in bytes(logged).splitlines() if b"adopting" in line]
        assert len(adopted) == 2 and all(b'"pane": "c"' not in line for line in adopted), adopted
    finally:
        if err_w >= 0:
            os.close(err_w)
        os.close(err_r)
        _stop(template)
        router.close()
        ctx.term()


def _drain(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except BlockingIOError:
        return b""
