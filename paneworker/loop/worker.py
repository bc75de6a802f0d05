"""The pane worker: one process, one program, one single-threaded poll loop.

The loop multiplexes the PTY master, the DEALER link to the supervisor and a
signal wake-up pipe, and runs timers (heartbeat, descendant scan, orphan grace,
delayed Enter). Every check-then-act that must be atomic (refuse input to a
blocked pane, answer a dialog only at the expected turn, close only at the
expected seq) runs inside one step of this loop.

An idle pane costs nothing: the loop sleeps until the next deadline, the heartbeat
comes every few seconds and the tree walk slows down when nothing happens
(``pacing``); no timer of an idle worker fires more than once a second.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import zmq

from paneworker.acp.pipes import PipeProgram
from paneworker.acp.session import AcpSession
from paneworker.confine.egress_proxy import EgressProxy, start_egress
from paneworker.loop.link import SupervisorLink
from paneworker.loop.pacing import ScanPacer
from paneworker.procs.confined_child import child_setup
from paneworker.procs.oscalls import OsCalls
from paneworker.procs.program import Program
from paneworker.procs.reaper import Reaper
from paneworker.requests.handler import RequestHandler
from paneworker.requests.pane_io import PaneIO
from paneworker.screen.emulator import ScreenModel
from paneworker.screen.state import ScreenState
from paneworker.status.screen_rules import RuleSet, load_rules
from protocol import PROTOCOL_VERSION
from protocol.boot import BootRecord
from protocol.limits import PidsCgroup
from protocol.messages import Descendants, Exited, Heartbeat, Hello
from protocol.sandbox_argv import drop_vanished_hides

log = logging.getLogger(__name__)

# What ``ps`` calls a worker (its template is ``pw-template``), set first thing.
WORKER_PROCESS_NAME = "pw-worker"
# The longest poll: only a guard, every timer has its own deadline.
POLL_CAP_MS = 60_000
# Periodic work (heartbeat, idle tree walk) due within this many heartbeat periods is
# done at any wake-up rather than at its own.
TIMER_SLACK_BEATS = 0.2

# Heartbeat periods of silence after which Hello is re-sent.
REINTRODUCE_AFTER_BEATS = 2.5
# An ACP pane's first Hello waits for ``session/new`` (so ``start_pane`` answers with
# the session there, or fails with the agent's message) at most this long, well within
# the supervisor's 20 s handshake; a slower agent's pane starts with its session still
# being created, as before (a prompt waits for it).
ACP_HELLO_WAIT_S = 15.0


@dataclass
class Timers:
    """Monotonic deadlines of the loop's periodic work."""

    heartbeat_at: float = 0.0
    scan: ScanPacer = field(default_factory=lambda: ScanPacer(time.monotonic()))
    last_rx: float = field(default_factory=time.monotonic)
    orphan_deadline: float | None = None


class PaneWorker:
    """Owns the pane's program, screen, reaper and supervisor link."""

    def __init__(self, boot: BootRecord, spare: ScreenModel | None = None) -> None:
        """``spare``: a blank screen for this pane, built by the worker template."""
        self.boot = boot
        self.started_at = time.time()
        os_calls = OsCalls()
        self.reaper = Reaper(os_calls, os.getpid())
        self.reaper.become_subreaper()
        with contextlib.suppress(OSError):
            os_calls.set_process_name(WORKER_PROCESS_NAME)
        rules_dir = Path(boot.launch.rules_dir) if boot.launch.rules_dir else None
        acp = boot.launch.protocol == "acp"
        self.screen = ScreenState(
            boot,
            lambda msg: self.link.send(msg),
            # An ACP pane's status comes from the protocol: no screen rule looks.
            rules=RuleSet(boot.launch.agent, 0, (), "acp")
            if acp
            else load_rules(boot.launch.agent, rules_dir),
            spare=spare,
        )
        self.program: Program | None = None
        # An ACP pane: its program on pipes and the session spoken over them.
        self.pipes: PipeProgram | None = None
        self.acp: AcpSession | None = None
        self.spawn_error: str | None = None
        self.egress: EgressProxy | None = None
        self.cgroup = (
            PidsCgroup.make(boot.launch.pane, boot.launch.limits.processes)
            if boot.launch.confined and boot.launch.limits.processes > 0
            else None
        )
        try:
            # The proxy's socket must exist before the sandbox binds it in.
            self.egress = start_egress(boot.launch)
            argv = (
                drop_vanished_hides(boot.launch.argv, boot.launch.stand_in)
                if boot.launch.confined
                else boot.launch.argv
            )
            if acp:
                self.pipes = PipeProgram(
                    argv,
                    boot.launch.cwd,
                    boot.launch.env,
                    setup=child_setup(boot.launch.limits, self.cgroup)
                    if boot.launch.confined
                    else None,
                )
            else:
                self.program = Program(
                    argv,
                    boot.launch.cwd,
                    boot.launch.env,
                    boot.launch.cols,
                    boot.launch.rows,
                    sandboxed=boot.launch.confined,
                    limits=boot.launch.limits,
                    cgroup=self.cgroup,
                )
        except OSError as exc:
            self.spawn_error = f"{type(exc).__name__}: {exc.strerror or exc}"
        if self.egress is not None:
            # Its thread only now: no thread may run while the program is forked.
            self.egress.start()
        # (An ACP pane's screen answers no queries: nothing of it is the program's.)
        self.screen.attach(self.program)
        self.screen.keepalive = self._keepalive
        self.link = SupervisorLink(boot.endpoint, boot.instance)
        pid = self.child_pid
        if pid is not None:
            self.reaper.note_spawned(pid)
            self.screen.status.set_lifecycle("running")
        else:
            self.screen.status.set_lifecycle("exited", exit_code=None)
        if self.pipes is not None:
            self.acp = AcpSession(
                self.pipes,
                self.screen,
                lambda msg: self.link.send(msg),
                boot.launch.cwd,
                name=boot.launch.pane,
            )
        self.requests = RequestHandler(
            PaneIO(lambda: self.program, self.screen, self.link.send),
            self,
            boot.launch.agent,
            name=boot.launch.pane,
            substrate=self.acp,
        )
        self.timers = Timers()
        self.running = True
        self.exit_reported = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._stop_signal: int | None = None
        # When the first Hello goes out at the latest (None: it has gone out).
        self._hello_due: float | None = time.monotonic() + ACP_HELLO_WAIT_S

    @property
    def child_pid(self) -> int | None:
        """The program's pid (its session id), whichever substrate runs it."""
        if self.program is not None:
            return self.program.pid
        return self.pipes.pid if self.pipes is not None else None

    # ------------------------------------------------------------ messaging

    def hello(self) -> Hello:
        """The identity frame, re-sent while orphaned so a new supervisor adopts us."""
        return Hello(
            protocol_version=PROTOCOL_VERSION,
            pane=self.boot.launch.pane,
            instance=self.boot.instance,
            proof=self.boot.secret,
            worker_pid=os.getpid(),
            child_pid=self.child_pid,
            status=self.screen.status.snapshot(),
            started_at=self.started_at,
            spawn_error=self.spawn_error,
            history=list(self.screen.status.history),
        )

    def introduce(self) -> None:
        """Tell a (new) supervisor who we are and what to kill if we die."""
        if self._hello_due is not None:
            return  # the first Hello is still waiting for the ACP session
        # A new supervisor has no viewers yet: it subscribes again when it has one.
        self.screen.screen_feed.unsubscribe()
        self.link.send(self.hello())
        self._send_descendants()

    # ------------------------------------------------------------ main loop

    def run(self) -> int:
        """Run until closed, told to stop, or orphaned past the grace."""
        self._install_signals()
        self._maybe_hello()
        poller = zmq.Poller()
        poller.register(self.link.socket, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        registered: dict[int, int] = {}
        try:
            while self.running:
                wanted = self._fd_masks()
                for fd in [fd for fd in registered if fd not in wanted]:
                    poller.unregister(fd)
                    del registered[fd]
                for fd, mask in wanted.items():
                    if registered.get(fd) != mask:
                        poller.register(fd, mask)  # (re-registering modifies)
                        registered[fd] = mask
                events = dict(poller.poll(self._poll_timeout_ms()))
                if self._wake_r in events and self._drain_wake():
                    self.timers.scan.activity(time.monotonic())
                if self.program is not None and self.program.fd in events:
                    self.timers.scan.activity(time.monotonic())
                    self._service_pty(events[self.program.fd])
                if self.acp is not None and any(fd in events for fd in registered):
                    self.timers.scan.activity(time.monotonic())
                    self._service_pipes()
                beat = False
                if self.link.socket in events:
                    for msg in self.link.receive_ready():
                        beat = beat or isinstance(msg, Heartbeat)
                        self.timers.last_rx = time.monotonic()
                        if self.timers.orphan_deadline is not None:
                            log.info("supervisor is back", extra={"pane": self.boot.launch.pane})
                            self.timers.orphan_deadline = None
                        self.requests.handle(msg)
                self._reap_children()
                self._run_timers(beat)
                self._maybe_hello()
                self.screen.after_step()
                self.screen.screen_feed.step()
        finally:
            self._shutdown()
        return 0

    def _maybe_hello(self) -> None:
        """Send the first Hello once it may go: at once on a terminal pane, on an ACP
        pane once its session exists or could not start (or at ``ACP_HELLO_WAIT_S``)."""
        due = self._hello_due
        if due is None:
            return
        acp = self.acp
        if acp is not None and not acp.start_settled and time.monotonic() < due:
            return
        self._hello_due = None
        # The supervisor's word is awaited from now on (it knew nothing of us before).
        self.timers.last_rx = time.monotonic()
        if acp is not None and acp.start_failure is not None and self.spawn_error is None:
            self.spawn_error = acp.start_failure
        self.introduce()

    def _fd_masks(self) -> dict[int, int]:
        """The program's fds the loop polls now, with what for."""
        pipes = self.pipes
        if pipes is not None:
            masks: dict[int, int] = {}
            if not pipes.eof:
                masks[pipes.fd] = zmq.POLLIN
            if pipes.stderr_fd is not None:
                masks[pipes.stderr_fd] = zmq.POLLIN
            if pipes.wants_write and pipes.stdin_fd is not None:
                masks[pipes.stdin_fd] = zmq.POLLOUT
            return masks
        want = self._pty_mask()
        return {self.program.fd: want} if want and self.program is not None else {}

    def _service_pipes(self) -> None:
        assert self.pipes is not None and self.acp is not None
        self.pipes.flush()
        self.acp.receive()
        self.pipes.flush()

    def _pty_mask(self) -> int:
        prog = self.program
        if prog is None or (prog.eof and not prog.wants_write):
            return 0
        # A full backlog stops reading: the program waits in its write (throttle).
        mask = 0 if prog.eof or not self.screen.accepting_output else zmq.POLLIN
        if prog.wants_write:
            mask |= zmq.POLLOUT
        return mask

    def _poll_timeout_ms(self) -> int:
        if self.screen.has_parse_work():
            return 0  # output waits to be parsed: look at the sockets, then parse on
        now = time.monotonic()
        t = self.timers
        nxt = min(t.heartbeat_at, t.scan.next_at, self.requests.next_deadline())
        screen = self.screen
        for due in (
            None if self.acp is None else self.acp.next_deadline(),
            screen.rules_deadline(),
            screen.parse_deadline(),
            screen.compact_deadline(),
            screen.screen_feed.deadline(),
            t.orphan_deadline,
            self._hello_due,
            None if t.orphan_deadline is not None else t.last_rx + self.boot.orphan_after_s,
        ):
            if due is not None:
                nxt = min(nxt, due)
        # Nothing to do before the next deadline: sleep until it (a wake-up per timer).
        return max(0, min(POLL_CAP_MS, int((nxt - now) * 1000) + 1))

    def _service_pty(self, mask: int) -> None:
        prog = self.program
        assert prog is not None
        if mask & zmq.POLLOUT:
            prog.flush()
        if mask & (zmq.POLLIN | zmq.POLLERR):
            self.screen.drain()

    def _run_timers(self, beat: bool) -> None:
        """``beat``: this wake-up brought the supervisor's heartbeat."""
        now = time.monotonic()
        t = self.timers
        # Periodic work due within the slack rides on this wake-up rather than causing
        # its own: an idle worker wakes about once per heartbeat, for everything. On
        # the supervisor's beat, whatever would be due before the next beat rides on it
        # (the next is a period away), so the worker's timers take the beat's phase at
        # its first beat instead of drifting onto it period by period.
        soon = now + self.boot.heartbeat_s * TIMER_SLACK_BEATS
        next_beat = now + self.boot.heartbeat_s
        if t.scan.due(now) or (beat and t.scan.may_ride(now, self.boot.heartbeat_s)):
            t.scan.scanned(now)
            if self.reaper.scan():
                self._send_descendants()
        if soon >= t.heartbeat_at or (beat and next_beat >= t.heartbeat_at):
            # A period a little longer than the supervisor's: its heartbeat (every
            # heartbeat_s) then arrives before our own is due, and ours rides on that
            # wake-up. With the same period the two lock a few ms apart (the
            # supervisor's is heartbeat_s plus its loop's lag) and every idle worker
            # woke twice a period.
            t.heartbeat_at = now + self.boot.heartbeat_s * (1 + TIMER_SLACK_BEATS / 2)
            self._heartbeat(now)
        self._check_orphaned(now)
        if t.orphan_deadline is not None and now >= t.orphan_deadline:
            log.warning(
                "orphan grace over; closing the pane", extra={"pane": self.boot.launch.pane}
            )
            self.running = False
        self.requests.run_due(now)
        if self.acp is not None:
            self.acp.run_due(now)

    def _check_orphaned(self, now: float) -> None:
        t = self.timers
        silent_for = now - t.last_rx
        if t.orphan_deadline is None and silent_for > self.boot.orphan_after_s:
            t.orphan_deadline = now + self.boot.launch.orphan_grace_s
            log.warning(
                "orphaned: no word from the supervisor for %.1fs; grace %.0fs",
                silent_for,
                self.boot.launch.orphan_grace_s,
                extra={"pane": self.boot.launch.pane},
            )

    def _keepalive(self) -> None:
        """During a long catch-up: keep heartbeats going out (incoming ones wait)."""
        now = time.monotonic()
        if now >= self.timers.heartbeat_at:
            self.timers.heartbeat_at = now + self.boot.heartbeat_s
            self.link.send(Heartbeat(sent_at=time.time()))

    def _send_descendants(self) -> None:
        self.link.send(
            Descendants(
                procs=sorted(self.reaper.recorded),
                session_id=self.child_pid,
            )
        )

    def _heartbeat(self, now: float) -> None:
        silent_for = now - self.timers.last_rx
        if silent_for > REINTRODUCE_AFTER_BEATS * self.boot.heartbeat_s:
            # The supervisor may have restarted: a new one learns who we are from
            # Hello (and what to kill from Descendants) before it will talk to us.
            self.introduce()
        else:
            self.link.send(Heartbeat(sent_at=time.time()))

    # ------------------------------------------------------------ processes

    def _reap_children(self) -> None:
        for pid, wait_status in self.reaper.reap():
            self._note_reaped(pid, wait_status)

    def _note_reaped(self, pid: int, wait_status: int) -> None:
        if pid != self.child_pid or self.exit_reported:
            return
        exit_code = os.waitstatus_to_exitcode(wait_status)
        if self.program is not None:
            self.program.mark_reaped()
            # Whatever the program printed last is still in the PTY buffer.
            self.screen.drain_to_end()
        if self.pipes is not None and self.acp is not None:
            self.pipes.mark_reaped(exit_code)
            # What it wrote last is still in the pipe; then its session is over.
            self.acp.program_exited()
        self.screen.catch_up()
        result = self.reaper.kill_tree(pid, grace_s=self.boot.launch.kill_grace_s)
        for other_pid, other_status in result.reaped:
            if other_pid != pid:
                continue
            exit_code = os.waitstatus_to_exitcode(other_status)
        self.exit_reported = True
        self.screen.program_exited(exit_code)
        self.link.send(Exited(exit_code=exit_code, killed=result.signalled))
        log.info(
            "program exited with %s; killed %d leftovers",
            exit_code,
            result.signalled,
            extra={"pane": self.boot.launch.pane},
        )

    def close(self, grace_s: float) -> tuple[int | None, int]:
        """Kill the program's tree and end the loop after this step (``Close``)."""
        result = self.kill_everything(grace_s)
        self.running = False
        return result

    def kill_everything(self, grace_s: float) -> tuple[int | None, int]:
        """Kill the program's tree; returns (exit code, processes signalled)."""
        pid = self.child_pid
        if pid is None:
            return None, 0
        result = self.reaper.kill_tree(pid, grace_s=grace_s)
        for pid, wait_status in result.reaped:
            self._note_reaped(pid, wait_status)
        self._reap_children()
        return self.screen.status.exit_code, result.signalled

    # ------------------------------------------------------------ signals

    def _install_signals(self) -> None:
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        for sig in (signal.SIGCHLD, signal.SIGWINCH):
            signal.signal(sig, lambda _s, _f: None)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, self._on_stop_signal)

    def _on_stop_signal(self, signum: int, _frame: object) -> None:
        # Only record: the loop does the work.
        self._stop_signal = signum
        self.running = False

    def _drain_wake(self) -> bool:
        """Empty the wake-up pipe; True when a child exited (SIGCHLD) meanwhile."""
        child_exited = False
        try:
            while data := os.read(self._wake_r, 512):
                # The wake-up fd receives each signal's number as one byte.
                child_exited = child_exited or signal.SIGCHLD in data
        except BlockingIOError:
            pass
        return child_exited

    def _shutdown(self) -> None:
        if self._stop_signal is not None:
            log.info(
                "stopping on signal %d", self._stop_signal, extra={"pane": self.boot.launch.pane}
            )
        try:
            self.kill_everything(self.boot.launch.kill_grace_s)
        finally:
            if self.egress is not None:
                self.egress.stop()
            if self.program is not None:
                self.program.close()
            if self.pipes is not None:
                self.pipes.close()
            if self.cgroup is not None:
                self.cgroup.remove()
            # Long enough for a final Closed/Exited frame, bounded if nobody listens.
            self.link.close(linger_ms=500)
            signal.set_wakeup_fd(-1)
            os.close(self._wake_r)
            os.close(self._wake_w)
