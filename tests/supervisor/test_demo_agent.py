"""The bundled demo agent driven through a real PTY, as a pane drives it (docs/design.md §11)."""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pyte
import pytest
from ptyprocess import PtyProcess

REPO = Path(__file__).resolve().parents[2]
DEADLINE = 10.0
BANNER = (
    "panewarden demo agent — type a prompt; 'dialog …' asks permission, "
    "'spawn' starts a detached helper, 'exit' quits"
).encode()
REPORT = re.compile(rb"\x1b\]7501;([^\x07\x1b]*)\x1b\\")
PASTE_ON = b"\x1b[?2004h"
PASTE_OFF = b"\x1b[?2004l"
UP, DOWN, ENTER, ESC = b"\x1b[A", b"\x1b[B", b"\r", b"\x1b"


def report(pairs: str) -> bytes:
    return b"\x1b]7501;" + pairs.encode() + b"\x1b\\"


IDLE = report("state=idle:app=demo")
WORKING = report("state=working:app=demo")
DONE = report("state=done:app=demo")
BLOCKED = report("state=blocked:kind=permission:app=demo")
CLEAR = report("state=clear:app=demo")
PROMPT = b"> "


def dialog_bytes(command: str, selected: int = 0) -> bytes:
    options = ("Allow once", "Always allow", "Deny")
    rows = [
        "Permission required",
        f"Run shell command: {command}",
        *(("› " if i == selected else "  ") + o for i, o in enumerate(options)),
        "enter confirm · esc cancel",
    ]
    return ("\r\n".join(rows) + "\r\n").encode()


class Agent:
    """One demo agent on a PTY, with a cursor into everything it has written."""

    def __init__(self) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.proc = PtyProcess.spawn(
            [sys.executable, "-m", "supervisor.demo.agent"],
            cwd=str(REPO),
            env=env,
            dimensions=(24, 100),
        )
        self.out = bytearray()
        self.pos = 0
        self.eof = False

    def send(self, data: bytes) -> None:
        os.write(self.proc.fd, data)

    def _read(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"timed out; unread output: {bytes(self.out[self.pos :])!r}")
        ready, _, _ = select.select([self.proc.fd], [], [], remaining)
        if not ready:
            return
        try:
            chunk = os.read(self.proc.fd, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            self.eof = True
        self.out += chunk

    def expect(self, pattern: bytes | re.Pattern[bytes]) -> bytes:
        """Read until ``pattern`` appears after the cursor; return the bytes up to its end."""
        deadline = time.monotonic() + DEADLINE
        regex = pattern if isinstance(pattern, re.Pattern) else re.compile(re.escape(pattern))
        while True:
            found = regex.search(self.out, self.pos)
            if found:
                chunk = bytes(self.out[self.pos : found.end()])
                self.pos = found.end()
                return chunk
            if self.eof:
                raise AssertionError(f"EOF before {pattern!r}: {bytes(self.out[self.pos :])!r}")
            self._read(deadline)

    def finish(self) -> tuple[bytes, int | None]:
        """Read to EOF, reap the agent, return the rest of the output and its exit status."""
        deadline = time.monotonic() + DEADLINE
        while not self.eof:
            self._read(deadline)
        rest = bytes(self.out[self.pos :])
        self.pos = len(self.out)
        return rest, self.proc.wait()

    def ready(self) -> bytes:
        return self.expect(IDLE + PROMPT)

    def turn(self, line: bytes) -> bytes:
        self.send(line + ENTER)
        return self.expect(DONE + PROMPT)

    def screen(self) -> list[str]:
        screen = pyte.Screen(100, 24)
        pyte.ByteStream(screen).feed(REPORT.sub(b"", bytes(self.out)))
        return [row.rstrip() for row in screen.display]

    def close(self) -> None:
        if self.proc.isalive():
            self.proc.kill(signal.SIGKILL)
            self.proc.wait()
        self.proc.delayafterclose = 0
        self.proc.close()


def states(chunk: bytes) -> list[bytes]:
    return REPORT.findall(chunk)


@pytest.fixture
def agent() -> Iterator[Agent]:
    started = Agent()
    try:
        yield started
    finally:
        started.close()


@pytest.fixture
def ready(agent: Agent) -> Agent:
    agent.ready()
    return agent


def test_start_prints_banner_then_reports_idle_then_prompt(agent: Agent) -> None:
    head = agent.ready()
    assert head == PASTE_ON + BANNER + b"\r\n" + IDLE + PROMPT
    assert termios.tcgetattr(agent.proc.fd)[3] & (termios.ICANON | termios.ECHO) == 0


def test_turn_reports_working_reply_done_then_prompt(ready: Agent) -> None:
    chunk = ready.turn(b"hello")
    assert chunk.startswith(b"hello\r\n" + WORKING + b"reply: hello\r\n")
    for step in (1, 2, 3):
        assert f"working on it ({step}/3)\r\n".encode() in chunk
    assert chunk.endswith(b"(3/3)\r\n" + DONE + PROMPT)
    assert states(chunk) == [b"state=working:app=demo", b"state=done:app=demo"]
    assert ready.turn(b"again").count(b"reply: again") == 1


def test_empty_line_reprints_prompt_without_a_turn(ready: Agent) -> None:
    ready.send(b"   \r\r\n")
    ready.send(b"x\r")
    chunk = ready.expect(DONE + PROMPT)
    assert chunk.startswith(b"   \r\n" + PROMPT + b"\r\n" + PROMPT + b"x\r\n" + WORKING)
    assert states(chunk).count(b"state=working:app=demo") == 1


def test_line_editing_backspace_and_utf8(ready: Agent) -> None:
    assert b"reply: hello\r\n" in ready.turn(b"hellp\x7fo")
    assert b"reply: ab\r\n" in ready.turn(b"abc\x08")
    assert "reply: café 日\r\n".encode() in ready.turn("café 日本\x7f".encode())
    chunk = ready.turn(b"\xff\xfeok\xc3\x80\xe2\x82 \xed\xa0\x80!")
    assert "reply: okÀ !\r\n".encode() in chunk


def test_backspace_erases_what_was_echoed(ready: Agent) -> None:
    ready.send("ab日".encode() + b"\x7f\x7f")
    ready.expect(b"\b\b  \b\b\b \b")
    assert [row for row in ready.screen() if row][-1] == "> a"


def test_ctrl_c_at_prompt_clears_the_line(ready: Agent) -> None:
    ready.send(b"abc\x03")
    ready.expect(b"abc^C\r\n" + PROMPT)
    assert b"reply: x\r\n" in ready.turn(b"x")


def test_ctrl_c_during_a_turn_interrupts_it(ready: Agent) -> None:
    # The Ctrl-C is already waiting when the turn starts, so no race with its pauses.
    ready.send(b"hello\r\x03")
    chunk = ready.expect(IDLE + PROMPT)
    assert chunk.endswith(b"reply: hello\r\n^C interrupted\r\n" + IDLE + PROMPT)
    assert DONE not in chunk
    assert b"reply: next\r\n" in ready.turn(b"next")


def test_bracketed_paste_inserts_without_submitting(ready: Agent) -> None:
    ready.send(b"\x1b[200~foo\r\nbar\nbaz\x1b[201~")
    ready.expect(b"foo bar baz")
    ready.send(b"\x7f!\r")
    chunk = ready.expect(DONE + PROMPT)
    assert states(chunk).count(b"state=working:app=demo") == 1
    assert b"reply: foo bar ba!\r\n" in chunk


def open_dialog(agent: Agent, line: bytes = b"dialog rm -rf build") -> bytes:
    agent.ready()
    agent.send(line + ENTER)
    return agent.expect(BLOCKED)


def test_dialog_is_drawn_exactly_then_reported_blocked(agent: Agent) -> None:
    chunk = open_dialog(agent)
    assert chunk.endswith(
        WORKING + b"reply: dialog rm -rf build\r\n" + dialog_bytes("rm -rf build") + BLOCKED
    )
    assert states(chunk) == [b"state=working:app=demo", b"state=blocked:kind=permission:app=demo"]


def test_dialog_without_command_asks_about_true(agent: Agent) -> None:
    assert dialog_bytes("true") + BLOCKED in open_dialog(agent, b"show a dialog  ")


def test_dialog_enter_allows_once_and_finishes_the_turn(agent: Agent) -> None:
    open_dialog(agent)
    agent.send(b"zq\x04\x03\x1b[C")  # ignored while the dialog is up
    agent.send(ENTER)
    chunk = agent.expect(DONE + PROMPT)
    assert chunk.startswith(b"allowed\r\n" + WORKING)
    assert states(chunk) == [b"state=working:app=demo", b"state=done:app=demo"]


def test_dialog_esc_denies_and_reports_idle(agent: Agent) -> None:
    open_dialog(agent)
    agent.send(ESC)
    chunk = agent.expect(IDLE + PROMPT)
    assert chunk == b"denied\r\n" + IDLE + PROMPT
    assert b"reply: after\r\n" in agent.turn(b"after")


def test_dialog_down_down_enter_denies(agent: Agent) -> None:
    open_dialog(agent)
    agent.send(DOWN + DOWN + ENTER)
    chunk = agent.expect(IDLE + PROMPT)
    assert chunk.endswith(b"denied\r\n" + IDLE + PROMPT)
    assert DONE not in chunk


def test_dialog_down_enter_allows_always(agent: Agent) -> None:
    open_dialog(agent)
    agent.send(DOWN)
    agent.expect("› Always allow".encode())
    agent.expect(b"Deny")
    rows = agent.screen()
    top = rows.index("Permission required")
    assert rows[top : top + 6] == [
        "Permission required",
        "Run shell command: rm -rf build",
        "  Allow once",
        "› Always allow",
        "  Deny",
        "enter confirm · esc cancel",
    ]
    agent.send(ENTER)
    chunk = agent.expect(DONE + PROMPT)
    assert chunk.endswith(DONE + PROMPT)
    assert b"allowed always\r\n" + WORKING in chunk


def test_dialog_highlight_clamps_and_accepts_ss3_arrows(agent: Agent) -> None:
    open_dialog(agent)
    agent.send(b"\x1bOA" + UP + b"\x1bOB" + DOWN + DOWN + UP)
    agent.send(ENTER)
    chunk = agent.expect(DONE + PROMPT)
    assert b"allowed always\r\n" in chunk
    rows = agent.screen()
    top = rows.index("Permission required")
    assert rows[top + 2 : top + 5] == ["  Allow once", "› Always allow", "  Deny"]
    assert rows[top + 6] == "allowed always"


def test_spawn_leaves_a_detached_grandchild(ready: Agent) -> None:
    chunk = ready.turn(b"spawn")
    found = re.search(rb"spawned (\d+)\r\n", chunk)
    assert found, chunk
    pid = int(found[1])
    handle = os.pidfd_open(pid)
    try:
        assert chunk.index(WORKING) < found.start() < chunk.index(DONE)
        helper = psutil.Process(pid)
        assert helper.status() != psutil.STATUS_ZOMBIE
        assert os.getsid(pid) not in (os.getsid(ready.proc.pid), os.getsid(0))
        assert helper.ppid() != ready.proc.pid
        # The intermediate child was reaped by the agent; nothing is left under it.
        assert psutil.Process(ready.proc.pid).children() == []
        fds = {fd: os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        assert fds == {"0": os.devnull, "1": os.devnull, "2": os.devnull}
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        ready_fds, _, _ = select.select([handle], [], [], DEADLINE)
        os.close(handle)
    assert ready_fds, f"helper {pid} survived SIGKILL"


def test_ctrl_d_on_empty_line_exits_zero_and_restores_the_tty(ready: Agent) -> None:
    ready.send(b"x\x04\x7f")  # Ctrl-D with text on the line is ignored
    ready.expect(b"x\b \b")
    ready.send(b"\x04")
    rest, status = ready.finish()
    assert status == 0
    assert rest == b"\r\n" + CLEAR + PASTE_OFF
    assert termios.tcgetattr(ready.proc.fd)[3] & termios.ICANON


def test_exit_says_bye_and_exits_zero(ready: Agent) -> None:
    ready.send(b"exit\r")
    rest, status = ready.finish()
    assert status == 0
    assert rest == b"exit\r\nbye\r\n" + CLEAR + PASTE_OFF


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_termination_signals_exit_promptly(ready: Agent, signum: int) -> None:
    ready.send(b"dialog\r")
    ready.expect(BLOCKED)
    ready.proc.kill(signum)
    rest, status = ready.finish()
    assert status == 128 + signum
    assert rest == PASTE_OFF
    assert termios.tcgetattr(ready.proc.fd)[3] & termios.ICANON


def test_piped_input_runs_to_the_end() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "supervisor.demo.agent"],
        input=b"hello\ndialog\n\x1b[B\nexit\n",
        capture_output=True,
        cwd=REPO,
        timeout=DEADLINE,
        check=False,
    )
    assert done.returncode == 0
    assert b"reply: hello\r\n" in done.stdout
    assert b"allowed always\r\n" in done.stdout
    assert done.stdout.endswith(b"bye\r\n" + CLEAR + PASTE_OFF)
