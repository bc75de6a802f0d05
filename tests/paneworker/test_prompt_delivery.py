"""send_input: a prompt is reported sent only once the program took it.

Prompt delivery runs in the request handler against scripted line-editing agents on a
real PTY (``scripted_pane``).
"""

from __future__ import annotations

import fcntl
import select
import struct
import termios
import time
from collections.abc import Callable

import pytest

from paneworker.requests.prompt_delivery import ENTER_ECHO_TIMEOUT_S, TYPE_QUIET_S, TYPE_TIMEOUT_S
from protocol.messages import Failed, Ok, ReadScreen, ScreenText, WriteInput
from protocol.timing import SUBMIT_ACK_TIMEOUT_S, WRITE_INPUT_REPLY_S
from tests.paneworker.scripted_pane import (
    ScriptedPane,
)

# -- 5. send_input: a prompt is reported sent only once the program took it -------------

# A line-editing agent. Its first "frame" argument is its mode: "echo" echoes keys and
# answers each Enter; "paste" does the same with bracketed paste on; "report" also
# reports OSC 7501 working on Enter; "ignore" echoes but never takes Enter; "late" shows
# the line only when Enter comes and never takes it; "exit" exits on Enter; "asks" reports
# a permission dialog as soon as a typed line ends with "!" (before any Enter); "batch"
# echoes the line only when Enter comes, together with its answer (a program the loop
# reads late: the echo and the cursor moving on arrive in one read).
LINE_AGENT = r"""
import json, os, sys, tty
log_path, frames_path = sys.argv[1], sys.argv[2]
with open(frames_path, encoding="utf-8") as f:
    mode = json.load(f)[0]
tty.setraw(0)
if mode == "paste":
    os.write(1, b"\x1b[?2004h")
os.write(1, b"> ")
line = b""
with open(log_path, "ab", buffering=0) as log:
    while True:
        data = os.read(0, 4096)
        if not data:
            break
        log.write(data)
        if b"<end-of-test>" in data:
            continue
        for key in data.replace(b"\x1b[200~", b"").replace(b"\x1b[201~", b""):
            if key != 13:
                line += bytes([key])
                if mode not in ("late", "batch"):
                    os.write(1, bytes([key]))
                if mode == "asks" and line.endswith(b"!"):
                    os.write(1, b"\r\nAllow it?\x1b]7501;state=blocked:kind=permission\x1b\\")
            elif mode == "exit":
                sys.exit(0)
            elif mode == "late":
                os.write(1, line)
            elif mode == "batch":
                os.write(1, line + b"\r\nok: " + line + b"\r\n> ")
                line = b""
            elif mode != "ignore":
                if mode in ("report", "instant"):
                    os.write(1, b"\x1b]7501;state=working\x1b\\")
                os.write(1, b"\r\nok: " + line + b"\r\n> ")
                if mode == "instant":
                    os.write(1, b"\x1b]7501;state=idle\x1b\\")
                line = b""
"""


def submit(pane: ScriptedPane, text: str, rid: int = 50) -> Ok | Failed:
    pane.pump_until(lambda: pane.shows(">"))
    pane.requests.handle(WriteInput(rid=rid, text=text))
    return pane.wait_reply(rid)


@pytest.mark.parametrize("mode", ["echo", "report", "exit"])
def test_a_taken_prompt_is_acknowledged(scripted: Callable[..., ScriptedPane], mode: str) -> None:
    pane = scripted("generic", [mode], LINE_AGENT)
    reply = submit(pane, "hello there")
    assert isinstance(reply, Ok), reply
    if mode == "report":
        assert reply.turn == 1
    if mode != "exit":
        assert pane.typed() == b"hello there\r"


def test_a_turns_output_says_how_it_was_cut(scripted: Callable[..., ScriptedPane]) -> None:
    """From the prompt's mark (``turn``), or, for a cursor the worker has no mark of, the
    newest lines (``newest``): the caller can tell which it got."""
    pane = scripted("generic", ["echo"], LINE_AGENT)
    reply = submit(pane, "first prompt")
    assert isinstance(reply, Ok), reply
    pane.pump_until(lambda: pane.shows("ok: first prompt"))
    for rid, since, cut in ((60, reply.seq, "turn"), (61, reply.seq + 1000, "newest")):
        pane.requests.handle(ReadScreen(rid=rid, since_input=since))

        def replied(rid: int = rid) -> bool:
            return any(getattr(m, "rid", None) == rid for m in pane.link.sent)

        pane.pump_until(replied)
        (text,) = [m for m in pane.link.sent if isinstance(m, ScreenText) and m.rid == rid]
        assert text.cut == cut, text
        assert "ok: first prompt" in text.text
    pane.requests.handle(ReadScreen(rid=62))
    pane.pump_until(lambda: any(getattr(m, "rid", None) == 62 for m in pane.link.sent))
    (plain,) = [m for m in pane.link.sent if isinstance(m, ScreenText) and m.rid == 62]
    assert plain.cut is None


def test_the_send_input_cursor_is_before_every_status_of_the_turn_it_started(
    scripted: Callable[..., ScriptedPane],
) -> None:
    """An instant program settles its turn before the prompt is acknowledged: the reply's
    seq still lies before that turn's working and done, so a wait after it sees them."""
    pane = scripted("generic", ["instant"], LINE_AGENT)
    pane.pump_until(lambda: pane.shows(">"))
    before = pane.screen.status.seq
    pane.requests.handle(WriteInput(rid=21, text="quick"))
    pane.pump_until(lambda: pane.screen.status.state == "done")
    reply = pane.wait_reply(21)
    assert isinstance(reply, Ok), reply
    assert reply.seq == before
    assert pane.screen.status.seq > before + 1  # working, then done, both after the cursor


def test_an_echo_read_together_with_the_answer_is_a_taken_prompt(
    scripted: Callable[..., ScriptedPane],
) -> None:
    """The typed text never seen on the input line before Enter, then drawn with the
    cursor moving past it in one read: taken (it was "ambiguous" after 20 s: seen in a
    clean-clone run, where a loaded machine read the echo only after Enter)."""
    pane = scripted("generic", ["batch"], LINE_AGENT)
    reply = submit(pane, "late echo")
    assert isinstance(reply, Ok), reply
    assert pane.shows("ok: late echo")
    assert pane.typed() == b"late echo\r"


def test_prompts_sent_at_once_are_typed_one_after_the_other(
    scripted: Callable[..., ScriptedPane],
) -> None:
    """A second prompt never interleaves its text with the first one's Enter."""
    pane = scripted("generic", ["echo"], LINE_AGENT)
    pane.pump_until(lambda: pane.shows(">"))
    pane.requests.handle(WriteInput(rid=31, text="first"))
    pane.requests.handle(WriteInput(rid=32, text="second"))
    assert isinstance(pane.wait_reply(31), Ok)
    assert isinstance(pane.wait_reply(32), Ok)
    assert pane.typed() == b"first\rsecond\r"


def _pending_bytes(fd: int) -> int:
    """Bytes the PTY holds for the reader (FIONREAD)."""
    pending: int = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
    return pending


def test_enter_is_not_pressed_into_a_dialog_reported_after_the_text(
    scripted: Callable[..., ScriptedPane],
) -> None:
    """The program asks for permission while the text sits typed: the report is still
    unread when Enter is due. Enter would answer the dialog; it must not be pressed."""
    pane = scripted("generic", ["asks"], LINE_AGENT)
    pane.pump_until(lambda: pane.shows(">"))
    pane.clock.freeze()
    pane.clock.now += TYPE_QUIET_S  # the program drew its prompt that long ago: typed at once
    pane.requests.handle(WriteInput(rid=41, text="go!"))
    assert pane.program is not None
    # Wait (bounded) until the program wrote its whole report, without reading it:
    # the PTY says how many bytes it holds (readable alone was only the first echo).
    written = len(b"go!" + b"\r\nAllow it?\x1b]7501;state=blocked:kind=permission\x1b\\")
    deadline = time.monotonic() + 5
    while _pending_bytes(pane.program.fd) < written:
        assert time.monotonic() < deadline, _pending_bytes(pane.program.fd)
        select.select([], [], [], 0.005)
    pane.clock.now += 1.0  # Enter is due
    pane.requests.run_due(pane.clock())
    reply = pane.reply(41)
    assert isinstance(reply, Failed) and reply.code == "delivery_ambiguous", reply
    pane.clock.frozen = False
    assert pane.typed() == b"go!"


def test_bracketed_paste_is_used_when_the_program_asked_for_it(
    scripted: Callable[..., ScriptedPane],
) -> None:
    pane = scripted("generic", ["paste"], LINE_AGENT)
    pane.pump_until(lambda: pane.screen.terminal.bracketed_paste)
    assert isinstance(submit(pane, "two\nlines"), Ok)
    assert pane.typed() == b"\x1b[200~two\rlines\x1b[201~\r"


# Gemini CLI 0.61.0's paste guard, scaled: an Enter handled within GUARD seconds of a
# bracketed paste is a newline in the prompt, not a submission.
PASTE_GUARD_AGENT = r"""
import json, os, sys, time, tty
log_path, frames_path = sys.argv[1], sys.argv[2]
with open(frames_path, encoding="utf-8") as f:
    GUARD = float(json.load(f)[0])
tty.setraw(0)
os.write(1, b"\x1b[?2004h> ")
line, pasted_at = b"", 0.0
with open(log_path, "ab", buffering=0) as log:
    while True:
        data = os.read(0, 4096)
        if not data:
            break
        log.write(data)
        if b"<end-of-test>" in data:
            continue
        if b"\x1b[200~" in data:
            text = data.split(b"\x1b[200~", 1)[1].split(b"\x1b[201~", 1)[0]
            line += text
            os.write(1, text)
            pasted_at = time.monotonic()
            data = data.split(b"\x1b[201~", 1)[1]
        if b"\r" in data:
            if time.monotonic() - pasted_at < GUARD:
                line += b"\n"
                os.write(1, b"\r\n  ")
            else:
                os.write(1, b"\x1b]7501;state=working\x1b\\")
                os.write(1, b"\r\nok: " + line.replace(b"\n", b" ") + b"\r\n> ")
                line = b""
"""


def test_an_agent_with_a_paste_guard_gets_enter_only_after_the_echo(
    scripted: Callable[..., ScriptedPane],
) -> None:
    """Gemini CLI and Qwen Code panes: Enter waits until the pasted text was drawn and the
    program went quiet, so it submits instead of adding a newline (with the usual 50 ms it
    came inside Gemini's guard and the prompt stayed in its input box)."""
    pane = scripted("gemini", ["0.12"], PASTE_GUARD_AGENT)
    pane.pump_until(lambda: pane.screen.terminal.bracketed_paste and pane.shows(">"))
    reply = submit(pane, "hello there")
    assert isinstance(reply, Ok), reply
    assert reply.turn == pane.screen.status.turn == 1
    pane.pump_until(lambda: pane.shows("ok: hello there"))
    assert pane.typed() == b"\x1b[200~hello there\x1b[201~\r"


def test_a_newline_instead_of_a_submission_is_never_reported_sent(
    scripted: Callable[..., ScriptedPane],
) -> None:
    """Enter became a newline (the program was too busy): the cursor left the typed text's
    row, which for other agents counts as taken; for these it is delivery_ambiguous."""
    pane = scripted("gemini", ["60"], PASTE_GUARD_AGENT)
    pane.pump_until(lambda: pane.screen.terminal.bracketed_paste and pane.shows(">"))
    pane.requests.handle(WriteInput(rid=41, text="hello there"))
    pane.pump_until(lambda: pane.unseen().endswith(b"\r"))
    pane.clock.freeze()
    pane.clock.now += SUBMIT_ACK_TIMEOUT_S + 1
    reply = pane.wait_reply(41)
    assert isinstance(reply, Failed) and reply.code == "delivery_ambiguous", reply
    pane.clock.frozen = False
    assert not pane.shows("ok:") and pane.screen.status.turn == 0


@pytest.mark.parametrize("mode", ["ignore", "late"])
def test_a_prompt_left_in_the_input_line_is_delivery_ambiguous(
    scripted: Callable[..., ScriptedPane], mode: str
) -> None:
    """Enter swallowed, or the text drawn only after Enter: never reported as sent."""
    pane = scripted("generic", [mode], LINE_AGENT)
    pane.pump_until(lambda: pane.shows(">"))
    pane.requests.handle(WriteInput(rid=9, text="hello there"))
    pane.pump_until(lambda: pane.unseen().endswith(b"\r") and pane.shows("hello there"))
    assert pane.reply(9) is None
    pane.clock.frozen = True
    pane.clock.now = time.monotonic() + SUBMIT_ACK_TIMEOUT_S + 1
    reply = pane.wait_reply(9)
    assert isinstance(reply, Failed) and reply.code == "delivery_ambiguous", reply
    pane.clock.frozen = False
    assert pane.typed() == b"hello there\r"


# OpenCode 1.18.33's home screen, cut down (an input box on row 10, the footer on row 30),
# drawn before its session has loaded. Its first frame: the box with its placeholder.
# "wipes": an Enter while it loads redraws the box empty and starts nothing (a first
# prompt lost on a loaded machine); "ignores": the first Enter leaves the text in the box,
# a second one starts the turn (the footer shows OpenCode's progress bar).
OPENCODE_LIKE_AGENT = r"""
import json, os, sys, tty
log_path, frames_path = sys.argv[1], sys.argv[2]
with open(frames_path, encoding="utf-8") as f:
    mode = json.load(f)[0]
tty.setraw(0)
IDLE = "tab agents  ctrl+p commands"
WORKING = "\u25a0\u25a0\u25a0\u2b1d\u2b1d\u2b1d\u2b1d\u2b1d  esc interrupt  " + IDLE
def draw(text, footer):
    os.write(1, ("\x1b[2J\x1b[30;1H" + footer + "\x1b[10;1H\u2503  " + text).encode())
draw("Ask anything", IDLE)
line, enters = "", 0
with open(log_path, "ab", buffering=0) as log:
    while True:
        data = os.read(0, 4096)
        if not data:
            break
        log.write(data)
        if b"<end-of-test>" in data:
            continue
        for key in data.decode():
            if key != "\r":
                line += key
                draw(line, IDLE)
                continue
            enters += 1
            if mode == "wipes":
                line = ""
                draw(line, IDLE)
            elif enters > 1:
                draw(line, WORKING)
"""


def test_a_prompt_wiped_from_the_input_box_without_a_turn_is_never_reported_sent(
    scripted: Callable[..., ScriptedPane],
) -> None:
    """OpenCode's first prompt on a loaded machine: the typed text left the input box
    but no turn opened. That was answered "sent" (turn 0) and the prompt was lost; the
    measured CLIs are confirmed by their turn only, so it is delivery_ambiguous."""
    pane = scripted("opencode", ["wipes"], OPENCODE_LIKE_AGENT)
    pane.pump_until(lambda: pane.screen.status.state == "idle")
    pane.requests.handle(WriteInput(rid=71, text="hello there"))
    pane.pump_until(lambda: pane.unseen().endswith(b"\r") and not pane.shows("hello there"))
    # The old rule answered on the first look at the wiped box; give it a few.
    window_ends = time.monotonic() + 0.5
    pane.pump_until(lambda: pane.reply(71) is not None or time.monotonic() > window_ends)
    assert pane.reply(71) is None, pane.reply(71)
    pane.clock.freeze()
    pane.clock.now += SUBMIT_ACK_TIMEOUT_S + 1
    reply = pane.wait_reply(71)
    assert isinstance(reply, Failed) and reply.code == "delivery_ambiguous", reply
    pane.clock.frozen = False
    assert pane.screen.status.turn == 0
    assert pane.typed() == b"hello there\r"  # typed once, Enter once: nothing to retry


def test_an_enter_the_program_ignored_is_pressed_once_more(
    scripted: Callable[..., ScriptedPane],
) -> None:
    """The text still in the box, nothing changed, the screen quiet: Enter was not taken,
    and a second Enter (never a second copy of the text) starts the turn."""
    pane = scripted("opencode", ["ignores"], OPENCODE_LIKE_AGENT)
    pane.pump_until(lambda: pane.screen.status.state == "idle")
    pane.requests.handle(WriteInput(rid=72, text="hello there"))
    reply = pane.wait_reply(72, timeout_s=10)
    assert isinstance(reply, Ok), reply
    assert reply.turn == pane.screen.status.turn == 1
    assert pane.typed() == b"hello there\r\r"


def test_the_supervisor_waits_for_a_delivery_longer_than_the_worker_may_take() -> None:
    """Else a slow but bounded delivery would reach the caller as a request timeout."""
    assert TYPE_TIMEOUT_S + ENTER_ECHO_TIMEOUT_S + SUBMIT_ACK_TIMEOUT_S < WRITE_INPUT_REPLY_S


# A TUI that reports its settle before it draws the reply (Claude Code under load) and
# redraws its whole transcript on each submit, clearing the scrollback (as Claude does).
LATE_REPLY_AGENT = r"""
import os, sys, time, tty
tty.setraw(0)
transcript = []
os.write(1, b"> ")
line = b""
while True:
    data = os.read(0, 4096)
    if not data:
        break
    for key in data:
        if key != 13:
            line += bytes([key])
            os.write(1, bytes([key]))
            continue
        os.write(1, b"\x1b]7501;state=working\x1b\\")
        transcript.append(b"> " + line)
        os.write(1, b"\x1b[3J\x1b[H\x1b[2J" + b"\r\n".join(transcript) + b"\r\n")
        os.write(1, b"\x1b]7501;state=idle\x1b\\")
        time.sleep(0.15)  # the reply comes after the settle was reported (within the rule)
        transcript.append(b"reply: " + line)
        os.write(1, b"reply: " + line + b"\r\n> ")
        line = b""
"""


def test_a_prompt_sent_at_a_settle_reported_early_gets_only_its_own_turn_output(
    scripted: Callable[..., ScriptedPane],
) -> None:
    """The second prompt is sent the moment the first turn reads settled, before its
    reply is drawn: it is typed once the program is quiet, so its turn mark holds the
    first reply and the second turn's output does not."""
    pane = scripted("generic", [], LATE_REPLY_AGENT)
    assert isinstance(submit(pane, "alpha", rid=61), Ok)
    pane.pump_until(lambda: pane.screen.status.state == "done" and pane.screen.status.turn == 1)
    assert not pane.shows("reply: alpha")  # settled, not drawn yet
    pane.requests.handle(WriteInput(rid=62, text="bravo"))
    second = pane.wait_reply(62)
    assert isinstance(second, Ok), second
    pane.pump_until(lambda: pane.shows("reply: bravo"))
    pane.requests.handle(ReadScreen(rid=63, since_input=second.seq, quiet_s=TYPE_QUIET_S))

    def screens() -> list[ScreenText]:
        return [m for m in pane.link.sent if isinstance(m, ScreenText) and m.rid == 63]

    pane.pump_until(lambda: bool(screens()) or pane.reply(63) is not None)
    assert pane.reply(63) is None, pane.reply(63)
    (screen,) = screens()
    assert screen.cut == "turn", screen
    assert "alpha" not in screen.text, screen.text
    assert "reply: bravo" in screen.text, screen.text
