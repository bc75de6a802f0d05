"""The worker template: one warm process per state dir that forks a worker per pane.

``python -m paneworker.template --boot-fd N --conn-fd M``, started by the supervisor.
It reads its boot record (secret, socket path, build, orphan periods) from pipe ``N``,
imports the worker code once (no ZeroMQ context and no thread exists before a fork),
freezes the garbage collector's view of those objects so children share their pages,
and then serves ``Fork`` requests (``protocol.template``) on connection ``M`` and on
later connections to its socket, from a restarted supervisor of the same state dir.

It is a child subreaper: every process orphaned below it (what a dead worker's pane
left) re-parents to it, and it kills and reaps every child that is not one of the
workers it forked. It waits only for its own workers' pids (``waitpid(pid)``, never
``waitpid(-1)``), and nothing else in this process waits for children, so no exit
status is ever taken from anyone.

Without a supervisor connection it is orphaned: after the orphan periods it exits, but
never before the workers it forked are gone (while they run, their leftovers must
still have a subreaper). ``Retire`` or SIGTERM: no more forks, exit once the workers
are gone. The loop sleeps in ``poll`` with no timer unless leftovers are being killed
or the orphan deadline runs.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import logging
import os
import select
import signal
import socket
import sys
import time

from paneworker.loop.entry import read_all
from paneworker.procs.leftovers import kill_subtree
from paneworker.procs.oscalls import OsCalls
from paneworker.template.forking import become_worker
from paneworker.template.prefork import (
    fill_free_blocks,
    fill_malloc_holes,
    record_calls,
    relocate_code,
)
from paneworker.template.rehearsal import rehearse
from paneworker.template.spares import SpareScreens
from protocol import logjson
from protocol.template import (
    TEMPLATE_PROTOCOL_VERSION,
    Closed,
    Fork,
    Forked,
    ForkFailed,
    PacketError,
    Retire,
    TemplateBoot,
    TemplateHello,
    decode_boot,
    decode_to_template,
    peer_uid,
    receive_packet,
    send_packet,
)

log = logging.getLogger("paneworker.template")

BOOT_READ_TIMEOUT_S = 10.0
PROCESS_NAME = "pw-template"
# While leftovers are being killed, look again this often (SIGCHLD usually comes first).
LEFTOVER_RECHECK_S = 1.0
LISTEN_BACKLOG = 8
_DEAD_STATES = frozenset({"Z", "X"})


# What a worker imports while it runs, loaded once here (zmq, msgspec, ptyprocess and
# the pane code come with paneworker.loop.worker).
PRELOAD = (
    "paneworker.loop.worker",
    "paneworker.screen.emulator.pyte_model",
    "paneworker.screen.patterns",
)
OPTIONAL_PRELOAD = ("re2",)
BACKEND_PRELOAD = {"ghostty": ("pyghostty", "paneworker.screen.emulator.ghostty_model")}


def preload(backends: list[str]) -> None:
    """Import everything a worker runs, so each fork finds it loaded."""
    for name in PRELOAD:
        importlib.import_module(name)
    for name in OPTIONAL_PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    for backend in backends:
        for name in BACKEND_PRELOAD.get(backend, ()):
            try:
                importlib.import_module(name)
            except ImportError as exc:
                log.warning("cannot preload the %s backend: %s", backend, exc)
                break


# A little of what a pane shows: colours, cursor moves, wide characters, a status report.
WARM_UP_OUTPUT = (
    b"\x1b[1;31mred\x1b[0m \x1b[38;5;208mhue\x1b[0m \x1b[38;2;1;2;3mrgb\x1b[0m "
    b"\xe4\xbd\xa0\xe5\xa5\xbd\r\n"
    b"\x1b[2J\x1b[H\x1b[7mbar\x1b[27m\x1b[5;10Hmoved\x1b[K\r\n"
    b"\x1b]0;title\x07\x1b]7501;state=idle:app=warmup\x07> "
)


def warm_up(backends: list[str]) -> None:
    """Run what every worker runs once, before any fork: the caches this fills (parsed
    screen rules, msgspec's per-type codecs, the emulator's attribute maps) are then
    shared by every child instead of being built, page by page, in each of them."""
    from paneworker.screen.state import ScreenState
    from paneworker.status.screen_rules import bundled_rules
    from protocol.agents.table import AGENT_KINDS
    from protocol.boot import BootRecord, PaneLaunch, decode_boot, encode_boot
    from protocol.framing import Codec
    from protocol.messages import Heartbeat, Hello, Ok, Status

    for agent in AGENT_KINDS:
        bundled_rules(agent)
    codec = Codec()
    for kind in ["pyte", *backends]:
        boot = decode_boot(
            encode_boot(
                BootRecord(
                    protocol_version=0,
                    instance="warm-up",
                    secret=b"",
                    endpoint="",
                    launch=PaneLaunch(
                        pane="warm-up",
                        agent="generic",
                        argv=["true"],
                        cwd="/",
                        env={},
                        cols=80,
                        rows=24,
                        emulator=kind,
                    ),
                )
            )
        )
        screen = ScreenState(boot, lambda _msg: None)
        screen.feed(WARM_UP_OUTPUT)
        screen.after_step()
        screen.text(None, scrollback=True)
        status = screen.status.snapshot()
        hello = Hello(
            protocol_version=0,
            pane=boot.launch.pane,
            instance=boot.instance,
            proof=b"",
            worker_pid=0,
            child_pid=None,
            status=status,
            started_at=0.0,
        )
        for msg in (hello, Status(status=status), Heartbeat(), Ok(rid=1, seq=0, turn=0)):
            codec.decode_to_supervisor(codec.encode(msg))
        codec.decode_to_worker(codec.encode(Heartbeat()))


# Code every fork runs before its pane exists: laid out with the pane's hot code.
FORK_PATH_MODULES = (
    "paneworker.template.process",
    "paneworker.template.forking",
    "paneworker.loop.entry",
)
# CPython 3.11 specialises a function's bytecode in place at its 8th call (or loop pass).
QUICKENING_CALLS = 8


def rehearse_and_lay_out(backends: list[str], socket_dir: str | None = None) -> list[object]:
    """Rehearse a pane on each emulator backend, copy the code it ran back to back, then
    rehearse on the copies until CPython has specialised them. Returns what must stay
    alive (:mod:`paneworker.template.prefork`). The rehearsals' sockets go under ``socket_dir``."""
    kinds = list(dict.fromkeys(backends or ["pyte"]))

    def rehearse_all() -> None:
        for kind in kinds:
            rehearse(kind, socket_dir)

    pinned = relocate_code(record_calls(rehearse_all), FORK_PATH_MODULES)
    # Code a worker runs once (its start) would otherwise be specialised in the worker,
    # writing to the pages that hold it: measured, 0.2 MiB per worker.
    for _ in range(QUICKENING_CALLS):
        rehearse_all()
    return pinned


def settle_heap(pinned: list[object]) -> list[object]:
    """The last allocations before the freeze: the rehearsals' garbage (cycles through
    their panes) goes, then the free blocks it and every import left in shared pages
    are taken, so a child's first objects land in pages of their own (prefork).
    Returns ``pinned`` with the filler added."""
    gc.collect()
    pinned.extend(fill_free_blocks())
    fill_malloc_holes()  # last: the list above grew in malloc'd memory
    return pinned


class WorkerTemplate:
    """The template's state and loop; see the module docstring."""

    def __init__(self, boot: TemplateBoot, conn: socket.socket) -> None:
        self.boot = boot
        self.os = OsCalls()
        self.pid = os.getpid()
        self.started_at = time.time()
        # Workers forked and not reaped yet: the only children that are not leftovers.
        self.workers: set[int] = set()
        # Objects kept only so their memory is never freed and reused (prefork).
        self.pinned: list[object] = []
        # Blank screens every fork may adopt; never touched here once built.
        self.spares = SpareScreens()
        self.conn: socket.socket | None = conn
        self.listener: socket.socket | None = None
        self.retiring = False
        self.orphan_deadline: float | None = None
        self.recheck_at: float | None = None
        self._wake_r, self._wake_w = os.pipe()
        for fd in (self._wake_r, self._wake_w):
            os.set_blocking(fd, False)
        self._poll = select.poll()

    # ------------------------------------------------------------ setup

    def listen(self) -> None:
        """Listen on the boot record's socket path (under umask 077, in a 0700 dir)."""
        path = self.boot.socket_path
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        old = os.umask(0o077)
        try:
            sock.bind(path)
        finally:
            os.umask(old)
        sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
        self.listener = sock

    def _install_signals(self) -> None:
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda _s, _f: None)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_retire_signal)
        # In its own session, a hang-up of some terminal means nothing here.
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def _on_retire_signal(self, signum: int, _frame: object) -> None:
        self.retiring = True

    # ------------------------------------------------------------ loop

    def run(self) -> int:
        """Serve until retired or orphaned past the grace, and the workers are gone."""
        self._install_signals()
        self._poll.register(self._wake_r, select.POLLIN)
        if self.listener is not None:
            self._poll.register(self.listener, select.POLLIN)
        if self.conn is not None:
            self._adopt_connection(self.conn)
        try:
            while not self._finished():
                for fd, _mask in self._poll.poll(self._timeout_ms()):
                    self._on_ready(fd)
                self._sweep()
        finally:
            self._shutdown()
        return 0

    def _finished(self) -> bool:
        now = time.monotonic()
        if self.conn is None and not self.retiring and self.orphan_deadline is None:
            self.orphan_deadline = now + self.boot.orphan_after_s + self.boot.orphan_grace_s
            log.warning(
                "orphaned: no supervisor; ending in %.0fs once the workers are gone",
                self.boot.orphan_after_s + self.boot.orphan_grace_s,
            )
        if self.retiring and self.listener is not None:
            self._stop_listening()
        ending = self.retiring or (self.orphan_deadline is not None and now >= self.orphan_deadline)
        return ending and not self.workers

    def _timeout_ms(self) -> int:
        now = time.monotonic()
        # A passed orphan deadline waits for the last workers' exits (SIGCHLD), not a timer.
        orphan = self.orphan_deadline
        if orphan is not None and orphan <= now:
            orphan = None
        deadlines = [d for d in (orphan, self.recheck_at) if d is not None]
        if not deadlines:
            return -1
        return max(0, int((min(deadlines) - now) * 1000) + 1)

    def _on_ready(self, fd: int) -> None:
        if fd == self._wake_r:
            with contextlib.suppress(BlockingIOError):
                while os.read(self._wake_r, 512):
                    pass
        elif self.listener is not None and fd == self.listener.fileno():
            self._accept()
        elif self.conn is not None and fd == self.conn.fileno():
            self._serve_connection()

    # ------------------------------------------------------------ connections

    def _accept(self) -> None:
        assert self.listener is not None
        try:
            conn, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        if peer_uid(conn) != os.getuid():
            log.warning("refused a connection from another user")
            conn.close()
            return
        # The newest connection is the supervisor's: only one supervisor runs per state
        # dir (it holds the lock), so an older connection is a dead one's.
        self._drop_connection()
        self._adopt_connection(conn)

    def _adopt_connection(self, conn: socket.socket) -> None:
        conn.setblocking(False)
        self.conn = conn
        self._poll.register(conn, select.POLLIN)
        self.orphan_deadline = None
        hello = TemplateHello(
            protocol_version=TEMPLATE_PROTOCOL_VERSION,
            build=self.boot.build,
            pid=self.pid,
            proof=self.boot.secret,
            started_at=self.started_at,
            workers=sorted(self.workers),
        )
        self._send(hello)

    def _drop_connection(self) -> None:
        if self.conn is None:
            return
        with contextlib.suppress(KeyError, ValueError):
            self._poll.unregister(self.conn)
        self.conn.close()
        self.conn = None

    def _send(self, msg: Forked | ForkFailed | TemplateHello, fds: tuple[int, ...] = ()) -> bool:
        if self.conn is None:
            return False
        try:
            send_packet(self.conn, msg, fds)
        except OSError as exc:
            log.warning("lost the supervisor connection: %s", exc)
            self._drop_connection()
            return False
        return True

    def _serve_connection(self) -> None:
        while self.conn is not None:
            try:
                got = receive_packet(self.conn)
            except Closed:
                self._drop_connection()
                return
            if got is None:
                return
            data, fds = got
            try:
                msg = decode_to_template(data)
            except PacketError as exc:
                log.warning("dropped a malformed packet: %s", exc)
                _close_fds(fds)
                continue
            if isinstance(msg, Fork):
                self._fork(msg.rid, fds)
            else:
                _close_fds(fds)
                if isinstance(msg, Retire):
                    log.info("retiring: no more forks")
                    self.retiring = True

    # ------------------------------------------------------------ forking

    def _fork(self, rid: int, fds: list[int]) -> None:
        if len(fds) != 2 or self.retiring:
            _close_fds(fds)
            reason = "retiring" if self.retiring else "a fork needs a boot pipe and a stderr"
            self._send(ForkFailed(rid=rid, message=reason))
            return
        boot_fd, stderr_fd = fds
        try:
            pid = os.fork()
        except OSError as exc:
            _close_fds(fds)
            self._send(ForkFailed(rid=rid, message=f"fork: {exc.strerror or exc}"))
            return
        if pid == 0:
            become_worker(boot_fd, stderr_fd, self.spares)
        # Recorded before anything else runs: from now on it is a worker, not a leftover.
        self.workers.add(pid)
        _close_fds(fds)
        # Our child, not reaped yet: its pid cannot name another process here.
        pidfd = os.pidfd_open(pid)
        try:
            start_ticks = self.os.proc_stat(pid).start_time
            if not self._send(Forked(rid=rid, pid=pid, start_ticks=start_ticks), (pidfd,)):
                # Nobody will ever know this worker: it must not run unsupervised.
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        finally:
            os.close(pidfd)

    # ------------------------------------------------------------ children

    def _sweep(self) -> None:
        """Reap exited workers; kill and reap every other child (a dead pane's leftover)."""
        try:
            children = self.os.read_children(self.pid)
        except ProcessLookupError:
            return
        leftovers = False
        for pid in children:
            if pid in self.workers:
                self._reap_worker(pid)
                continue
            leftovers = True
            try:
                state = self.os.proc_stat(pid).state
            except ProcessLookupError:
                continue
            if state in _DEAD_STATES:
                with contextlib.suppress(ChildProcessError):
                    self.os.waitpid(pid, os.WNOHANG)
                continue
            killed = kill_subtree(self.os, pid, self.pid)
            log.warning("killed %d leftover processes of a dead pane (pid %d)", killed, pid)
        self.recheck_at = time.monotonic() + LEFTOVER_RECHECK_S if leftovers else None

    def _reap_worker(self, pid: int) -> None:
        try:
            reaped, status = self.os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            self.workers.discard(pid)
            return
        if reaped:
            self.workers.discard(pid)
            log.info("worker %d ended (wait status %#x)", pid, status, extra={"pid": pid})

    # ------------------------------------------------------------ end

    def _stop_listening(self) -> None:
        if self.listener is None:
            return
        with contextlib.suppress(KeyError, ValueError):
            self._poll.unregister(self.listener)
        self.listener.close()
        self.listener = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.boot.socket_path)

    def _shutdown(self) -> None:
        self._sweep()
        self._stop_listening()
        self._drop_connection()
        signal.set_wakeup_fd(-1)
        os.close(self._wake_r)
        os.close(self._wake_w)
        log.info("template exiting")


def _close_fds(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def read_boot(fd: int, timeout_s: float = BOOT_READ_TIMEOUT_S) -> TemplateBoot:
    """Read the template's boot record until EOF on ``fd``; raises TimeoutError/ValueError."""
    return decode_boot(read_all(fd, timeout_s))


def main(argv: list[str] | None = None) -> int:
    """Boot, preload, freeze, serve."""
    # Collections now would leave freed holes in pages the children will share.
    gc.disable()
    parser = argparse.ArgumentParser(prog="paneworker.template")
    parser.add_argument("--boot-fd", type=int, required=True)
    parser.add_argument("--conn-fd", type=int, required=True)
    args = parser.parse_args(argv)
    logjson.configure(os.environ.get("PANEWARDEN_LOG_LEVEL", "INFO"))
    conn = socket.socket(fileno=args.conn_fd)
    try:
        boot = read_boot(args.boot_fd)
    except (TimeoutError, ValueError, OSError) as exc:
        log.error("cannot read the template boot record: %s", exc)
        conn.close()
        return 2
    if boot.protocol_version != TEMPLATE_PROTOCOL_VERSION:
        log.error(
            "template protocol %d, expected %d", boot.protocol_version, TEMPLATE_PROTOCOL_VERSION
        )
        conn.close()
        return 2
    os_calls = OsCalls()
    os_calls.prctl_set_child_subreaper()
    with contextlib.suppress(OSError):
        os_calls.set_process_name(PROCESS_NAME)
    preload(boot.preload)
    pinned: list[object] = []
    try:
        warm_up(boot.preload)
        pinned = rehearse_and_lay_out(boot.preload, os.path.dirname(boot.socket_path))
    except Exception:
        # Only a saving: a worker does all of this again for itself if need be.
        log.exception("warm-up failed")
    template = WorkerTemplate(boot, conn)
    template.spares = SpareScreens.build(boot.spares)
    template.listen()
    template.pinned = settle_heap(pinned)
    # Everything stays put: a child's collections never touch (and so never copy) these
    # pages. Objects made from now on are collected as usual.
    gc.freeze()
    gc.enable()
    return template.run()


if __name__ == "__main__":
    sys.exit(main())
