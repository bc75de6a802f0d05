"""A pane's request handling around a scripted agent on a real PTY, for the dialog
answering and prompt delivery tests.

The scripted agent draws its frames, logs every byte it reads and draws the next frame
after each read. Refusals are checked on that log: after the reply, a marker is typed and
the log must hold the marker and nothing else.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from paneworker.procs.program import Program
from paneworker.requests.handler import RequestHandler
from paneworker.requests.pane_io import PaneIO
from paneworker.screen.state import ScreenState
from protocol import PROTOCOL_VERSION
from protocol.boot import BootRecord, PaneLaunch
from protocol.messages import AnswerDialog, Failed, Ok, ToSupervisor

AGENT_SCRIPT = r"""
import json, os, sys, tty
log_path, frames_path = sys.argv[1], sys.argv[2]
with open(frames_path, encoding="utf-8") as f:
    frames = json.load(f)
tty.setraw(0)
def show(index):
    if index < len(frames):
        os.write(1, frames[index].encode())
show(0)
reads = 0
with open(log_path, "ab", buffering=0) as log:
    while True:
        data = os.read(0, 4096)
        if not data:
            break
        log.write(data)
        if b"<end-of-test>" in data:
            continue  # the test's marker is not a key: it draws nothing
        reads += 1
        show(reads)
"""
MARKER = b"<end-of-test>"


class FakeClock:
    def __init__(self) -> None:
        self.now = time.monotonic()
        self.frozen = False

    def __call__(self) -> float:
        return self.now if self.frozen else time.monotonic()

    def freeze(self) -> None:
        """Stop at the present moment; the test moves ``now`` from here."""
        self.now = time.monotonic()
        self.frozen = True


class Link:
    def __init__(self) -> None:
        self.sent: list[ToSupervisor] = []

    def send(self, msg: ToSupervisor) -> None:
        self.sent.append(msg)


class Unclosable:
    """The pane control of a scripted pane: no dialog test closes or re-introduces it."""

    def introduce(self) -> None:
        raise AssertionError("a dialog test never asks a pane to introduce itself")

    def close(self, grace_s: float) -> tuple[int | None, int]:
        raise AssertionError("a dialog test never closes its pane through a request")


class ScriptedPane:
    """The parts of a PaneWorker a RequestHandler uses, around a scripted agent on a PTY.

    Frame 0 is drawn at start; frame N after the agent's N-th read of its input (the
    test's marker does not count).
    """

    def __init__(
        self,
        tmp_path: Path,
        agent: str,
        frames: list[str],
        script: str = AGENT_SCRIPT,
        settle_s: float = 0.0,
        appear_s: float = 0.0,
        size: tuple[int, int] = (100, 30),
    ) -> None:
        self.log = tmp_path / "typed.log"
        self.log.write_bytes(b"")
        frames_path = tmp_path / "frames.json"
        frames_path.write_text(json.dumps(frames))
        script_path = tmp_path / "agent.py"
        script_path.write_text(script)
        argv = [sys.executable, str(script_path), str(self.log), str(frames_path)]
        env = {"PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8", "TERM": "xterm-256color"}
        self.boot = BootRecord(
            protocol_version=PROTOCOL_VERSION,
            instance="i",
            secret=b"s",
            endpoint="ipc:///nonexistent",
            launch=PaneLaunch(
                pane="t",
                agent=agent,
                argv=argv,
                cwd=str(tmp_path),
                env=env,
                cols=size[0],
                rows=size[1],
            ),
        )
        self.link = Link()
        self.clock = FakeClock()
        self.screen = ScreenState(self.boot, self.link.send, clock=self.clock)
        self.program: Program | None = Program(argv, str(tmp_path), env, *size)
        self.screen.attach(self.program)
        self.screen.status.set_lifecycle("running")
        self.requests = RequestHandler(
            PaneIO(lambda: self.program, self.screen, self.link.send),
            Unclosable(),
            agent,
            clock=self.clock,
            dialog_settle_s=settle_s,
            dialog_appear_s=appear_s,
        )
        self._rid = 0
        self._seen = 0

    def pump_until(self, done: Callable[[], bool], timeout_s: float = 5.0) -> None:
        """Run the worker loop's parts (read, timers, rules) until ``done``; bounded."""
        prog = self.program
        assert prog is not None
        deadline = time.monotonic() + timeout_s
        while not done():
            assert time.monotonic() < deadline, self.screen.terminal.display_lines()
            ready, _, _ = select.select([prog.fd], [], [], 0.02)
            if ready and (data := prog.read()):
                self.screen.feed(data)
            self.requests.run_due(self.clock())
            self.screen.after_step()

    def pump_for(self, seconds: float) -> None:
        """Run the worker loop's parts for ``seconds``: to show that nothing happens."""
        end = time.monotonic() + seconds
        self.pump_until(lambda: time.monotonic() >= end, seconds + 5.0)

    def shows(self, text: str) -> bool:
        return text in "\n".join(self.screen.terminal.display_lines())

    def answer(self, answer: str, **extra: object) -> Ok | Failed:
        self._rid += 1
        rid = self._rid
        self.requests.handle(AnswerDialog(rid=rid, answer=answer, **extra))  # type: ignore[arg-type]
        return self.wait_reply(rid)

    def wait_reply(self, rid: int, timeout_s: float = 5.0) -> Ok | Failed:
        self.pump_until(lambda: self.reply(rid) is not None, timeout_s)
        reply = self.reply(rid)
        assert reply is not None
        return reply

    def reply(self, rid: int) -> Ok | Failed | None:
        for msg in self.link.sent:
            if isinstance(msg, Ok | Failed) and msg.rid == rid:
                return msg
        return None

    def unseen(self) -> bytes:
        """What the agent logged since the last ``typed``, complete or not."""
        return self.log.read_bytes()[self._seen :]

    def typed(self) -> bytes:
        """What the agent read since the last call, proven complete by a marker typed last."""
        assert self.program is not None
        self.program.queue_input(MARKER)
        self.program.flush()
        self.pump_until(lambda: self.unseen().endswith(MARKER))
        new = self.unseen()
        self._seen += len(new)
        return new.removesuffix(MARKER)

    def close(self) -> None:
        if self.program is None:
            return
        pid = self.program.pid
        self.program.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        self.program = None


def blocked_on(pane: ScriptedPane, text: str) -> ScriptedPane:
    pane.pump_until(lambda: pane.screen.status.state == "blocked" and pane.shows(text))
    pane.typed()  # the terminal's answers to the program's queries, if it asked any
    return pane


def code_of(reply: Ok | Failed) -> str:
    return reply.code if isinstance(reply, Failed) else "ok"
