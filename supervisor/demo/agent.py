"""The bundled demo agent: a small coding-CLI stand-in that runs on a PTY (docs/design.md §11).

It is the ``demo`` profile's program, the tests' fixture and a newcomer's first pane. It edits
its own input line in raw mode, runs short fake turns, draws a permission dialog, can leave a
detached grandchild behind (so pane cleanup can be proven), and reports every state change
over OSC 7501 with ``app=demo`` so panewarden never has to guess its state from the screen.

Started with ``--edits`` it also edits files, as a coding agent does: a prompt
``write PATH TEXT`` writes ``TEXT`` and a newline to ``PATH``, relative to its working
directory (created with its parent directories; an absolute path or ``..`` is refused).
Without the flag such a prompt is an ordinary turn.

Two behaviours of real CLIs can be reproduced on purpose. A prompt containing both
``dialog`` and ``slow`` reports ``blocked`` first and draws the dialog
``SLOW_DIALOG_SECONDS`` later (Claude Code and Codex report before they draw). Started
with ``--startup-blip``, the agent reports ``working`` then ``idle`` again
``BLIP_SECONDS`` after its first idle, before any prompt (as Codex does at start).

Run it as ``python -m supervisor.demo.agent``. Standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import sys
import termios
import time
import tty
import unicodedata
from dataclasses import dataclass
from enum import Enum, auto
from types import FrameType
from typing import Any, Final, NoReturn

BANNER: Final = (
    "panewarden demo agent — type a prompt; 'dialog …' asks permission, "
    "'spawn' starts a detached helper, 'exit' quits"
)
PROMPT: Final = "> "
OPTIONS: Final = ("Allow once", "Always allow", "Deny")
DIALOG_TITLE: Final = "Permission required"
DIALOG_COMMAND: Final = "Run shell command: "
DIALOG_HINT: Final = "enter confirm · esc cancel"
STEPS: Final = 3
# Long enough for a status watcher to see `working`, short enough to keep tests fast.
STEP_SECONDS: Final = 0.03
# A lone ESC is only known to be lone once nothing follows it for this long.
ESC_SECONDS: Final = 0.05
HELPER_SECONDS: Final = 600.0
SLOW_DIALOG_SECONDS: Final = 0.5
BLIP_SECONDS: Final = 0.1
EDIT_COMMAND: Final = "write "

ENABLE_PASTE: Final = "\x1b[?2004h"
DISABLE_PASTE: Final = "\x1b[?2004l"
PASTE_END: Final = b"\x1b[201~"
# Option rows sit 4, 3 and 2 rows above the cursor, which rests below the hint line.
REDRAW_UP: Final = "\x1b[4A\r"
REDRAW_DOWN: Final = "\x1b[1B"
ERASE_LINE: Final = "\x1b[2K"

EXIT_HANGUP: Final = 128 + signal.SIGHUP
EXIT_BROKEN_PIPE: Final = 128 + signal.SIGPIPE


class KeyKind(Enum):
    """What one decoded keypress means to the agent."""

    TEXT = auto()
    ENTER = auto()
    BACKSPACE = auto()
    CTRL_C = auto()
    CTRL_D = auto()
    UP = auto()
    DOWN = auto()
    ESC = auto()


@dataclass(frozen=True)
class Key:
    """A keypress; ``text`` is set only for TEXT (typed or pasted characters)."""

    kind: KeyKind
    text: str = ""


class Hangup(Exception):
    """The terminal went away (EOF, EIO or a broken pipe); carries the exit status."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class Terminated(BaseException):
    """SIGHUP or SIGTERM arrived.

    A BaseException so that no ``except Exception`` on the way can swallow it.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class KeyReader:
    """Turns the raw input byte stream into keys, keeping type-ahead for later."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buf = bytearray()
        # Exit status once the input has ended; buffered bytes are still served first
        # so that piped input such as ``hello\\nexit\\n`` runs to the end.
        self._ended: int | None = None

    def wait(self, seconds: float) -> None:
        """Let ``seconds`` pass, keeping whatever is typed meanwhile for later."""
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            self.fill(remaining)

    def fill(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` (None: forever) for more input; True if some arrived."""
        if self._ended is not None:
            if timeout is None:
                raise Hangup(self._ended)
            time.sleep(max(timeout, 0.0))
            return False
        ready, _, _ = select.select([self._fd], [], [], timeout)
        if not ready:
            return False
        try:
            data = os.read(self._fd, 4096)
        except OSError as exc:
            # EIO is how a PTY reports that the other side is gone; output is dead too.
            if exc.errno == errno.EIO:
                raise Hangup(EXIT_HANGUP) from None
            raise
        if not data:
            self._ended = 0
            return self.fill(timeout)
        self._buf += data
        return True

    def take_interrupt(self) -> bool:
        """Consume a pending Ctrl-C and the type-ahead before it; True if there was one."""
        at = self._buf.find(0x03)
        if at < 0:
            return False
        del self._buf[: at + 1]
        return True

    def next_key(self) -> Key:
        """Block until a meaningful key arrives; unknown input is dropped."""
        while True:
            key = self._decode(self._byte(None))
            if key is not None:
                return key

    def _byte(self, timeout: float | None) -> int | None:
        if not self._buf:
            while not self.fill(timeout):
                if timeout is not None:
                    return None
        byte = self._buf[0]
        del self._buf[0]
        return byte

    def _unread(self, byte: int) -> None:
        self._buf.insert(0, byte)

    def _decode(self, byte: int | None) -> Key | None:
        if byte is None:
            return None
        if byte == 0x0D:
            # Clients that send CRLF mean one Enter, not a submit plus an empty line.
            if self._buf[:1] == b"\n":
                del self._buf[0]
            return Key(KeyKind.ENTER)
        match byte:
            case 0x0A:
                return Key(KeyKind.ENTER)
            case 0x7F | 0x08:
                return Key(KeyKind.BACKSPACE)
            case 0x03:
                return Key(KeyKind.CTRL_C)
            case 0x04:
                return Key(KeyKind.CTRL_D)
            case 0x1B:
                return self._escape()
        if byte < 0x20:
            return None
        if byte < 0x80:
            return Key(KeyKind.TEXT, chr(byte))
        text = self._utf8(byte)
        return Key(KeyKind.TEXT, text) if text else None

    def _utf8(self, lead: int) -> str:
        """Complete a multi-byte character; anything invalid is dropped, never fatal."""
        if 0xC2 <= lead <= 0xDF:
            more = 1
        elif 0xE0 <= lead <= 0xEF:
            more = 2
        elif 0xF0 <= lead <= 0xF4:
            more = 3
        else:
            return ""
        seq = bytearray([lead])
        for _ in range(more):
            nxt = self._byte(ESC_SECONDS)
            if nxt is None:
                return ""
            if not 0x80 <= nxt <= 0xBF:
                self._unread(nxt)
                return ""
            seq.append(nxt)
        # "ignore" also drops overlong forms and encoded surrogates.
        text = seq.decode("utf-8", "ignore")
        return text if text.isprintable() else ""

    def _escape(self) -> Key | None:
        nxt = self._byte(ESC_SECONDS)
        if nxt is None:
            return Key(KeyKind.ESC)
        if nxt == ord("["):
            return self._csi()
        if nxt == ord("O"):
            final = self._byte(ESC_SECONDS)
            if final == ord("A"):
                return Key(KeyKind.UP)
            return Key(KeyKind.DOWN) if final == ord("B") else None
        if nxt in b"]P^_X":
            # Terminal replies (OSC, DCS, APC, PM, SOS) must not turn into typed text.
            self._skip_string()
            return None
        # ESC then another key: the ESC was lone; the other key is handled next.
        self._unread(nxt)
        return Key(KeyKind.ESC)

    def _csi(self) -> Key | None:
        params = bytearray()
        while True:
            byte = self._byte(ESC_SECONDS)
            if byte is None:
                return None
            if 0x40 <= byte <= 0x7E:
                break
            if not 0x20 <= byte <= 0x3F:
                self._unread(byte)
                return None
            if len(params) < 32:
                params.append(byte)
        if byte == ord("A"):
            return Key(KeyKind.UP)
        if byte == ord("B"):
            return Key(KeyKind.DOWN)
        if byte == ord("~") and params == b"200":
            return self._paste()
        return None

    def _skip_string(self) -> None:
        while True:
            byte = self._byte(ESC_SECONDS)
            if byte is None or byte in (0x07, 0x18, 0x1A):
                return
            if byte == 0x1B:
                nxt = self._byte(ESC_SECONDS)
                if nxt is not None and nxt != ord("\\"):
                    self._unread(nxt)
                return

    def _paste(self) -> Key | None:
        """Read a bracketed paste to its end marker; it is text, never a submit."""
        got = bytearray()
        searched = 0
        while True:
            got += self._buf
            self._buf.clear()
            at = got.find(PASTE_END, searched)
            if at >= 0:
                self._buf[:0] = got[at + len(PASTE_END) :]
                del got[at:]
                break
            searched = max(0, len(got) - len(PASTE_END) + 1)
            self.fill(None)
        text = got.decode("utf-8", "ignore").replace("\r\n", " ")
        text = text.replace("\r", " ").replace("\n", " ").replace("\t", " ")
        text = "".join(ch for ch in text if ch.isprintable())
        return Key(KeyKind.TEXT, text) if text else None


def cell_width(ch: str) -> int:
    """Columns a character occupies, so Backspace erases exactly what was echoed."""
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def dialog_command(line: str) -> str:
    """The command the dialog asks about: what follows the word ``dialog``."""
    rest = line[line.find("dialog") + len("dialog") :].strip()
    return rest or "true"


def option_rows(selected: int) -> list[str]:
    return [("› " if i == selected else "  ") + option for i, option in enumerate(OPTIONS)]


def report(state: str, kind: str | None = None) -> str:
    """One OSC 7501 status report, terminated by ``ESC \\``."""
    pairs = [f"state={state}"]
    if kind is not None:
        pairs.append(f"kind={kind}")
    pairs.append("app=demo")
    return "\x1b]7501;" + ":".join(pairs) + "\x1b\\"


class DemoAgent:
    """The interactive loop: prompt, line editing, turns and the permission dialog."""

    def __init__(
        self, in_fd: int, out_fd: int, *, startup_blip: bool = False, edits: bool = False
    ) -> None:
        self._keys = KeyReader(in_fd)
        self._out = out_fd
        self._startup_blip = startup_blip
        self._edits = edits

    def run(self) -> int:
        """Serve the prompt until ``exit`` or Ctrl-D; returns the exit status."""
        self._write(ENABLE_PASTE)
        self._write(BANNER + "\r\n")
        # After the banner, so a status watcher sees idle with the banner on screen.
        self._report("idle")
        self._write(PROMPT)
        if self._startup_blip:
            # Start-up activity of the program's own, before anyone typed anything.
            self._keys.wait(BLIP_SECONDS)
            self._report("working")
            self._report("idle")
        line: list[str] = []
        while True:
            key = self._keys.next_key()
            if key.kind is KeyKind.TEXT:
                line.extend(key.text)
                self._write(key.text)
            elif key.kind is KeyKind.BACKSPACE:
                if line:
                    width = cell_width(line.pop())
                    self._write("\b" * width + " " * width + "\b" * width)
            elif key.kind is KeyKind.CTRL_C:
                line.clear()
                self._write("^C\r\n" + PROMPT)
            elif key.kind is KeyKind.CTRL_D:
                if not line:
                    self._write("\r\n")
                    self._report("clear")
                    return 0
            elif key.kind is KeyKind.ENTER:
                text = "".join(line).strip()
                line.clear()
                self._write("\r\n")
                if text == "exit":
                    self._write("bye\r\n")
                    self._report("clear")
                    return 0
                if text:
                    self._turn(text)
                self._write(PROMPT)

    def _turn(self, text: str) -> None:
        self._report("working")
        self._write(f"reply: {text}\r\n")
        if "dialog" in text:
            if self._pause():
                self._interrupted()
                return
            choice = self._dialog(dialog_command(text), slow="slow" in text)
            if choice is None or choice == len(OPTIONS) - 1:
                self._write("denied\r\n")
                self._report("idle")
                return
            self._write("allowed\r\n" if choice == 0 else "allowed always\r\n")
            self._report("working")
        if self._edits and text.startswith(EDIT_COMMAND):
            self._write(write_file(text[len(EDIT_COMMAND) :]) + "\r\n")
        if "spawn" in text:
            try:
                self._write(f"spawned {spawn_detached()}\r\n")
            except (OSError, ValueError) as exc:
                self._write(f"spawn failed: {exc}\r\n")
        for step in range(1, STEPS + 1):
            if self._pause():
                self._interrupted()
                return
            self._write(f"working on it ({step}/{STEPS})\r\n")
        self._report("done")

    def _pause(self) -> bool:
        """Wait one step while watching for Ctrl-C; other type-ahead waits its turn."""
        deadline = time.monotonic() + STEP_SECONDS
        while not self._keys.take_interrupt():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._keys.fill(remaining)
        return True

    def _interrupted(self) -> None:
        self._write("^C interrupted\r\n")
        self._report("idle")

    def _dialog(self, command: str, *, slow: bool = False) -> int | None:
        """Draw the dialog and return the chosen option's index, or None for Esc."""
        shown = DIALOG_COMMAND + command
        with contextlib.suppress(OSError):
            # One row per line keeps the redraw arithmetic and screen recognisers valid.
            limit = os.get_terminal_size(self._out).columns - 1
            if len(shown) > limit > len(DIALOG_COMMAND):
                shown = shown[: limit - 1] + "…"
        selected = 0
        rows = [DIALOG_TITLE, shown, *option_rows(selected), DIALOG_HINT]
        if slow:
            self._report("blocked", "permission")
            self._keys.wait(SLOW_DIALOG_SECONDS)
        self._write("\r\n".join(rows) + "\r\n")
        if not slow:
            # Only after drawing: whoever sees `blocked` then finds the whole dialog.
            self._report("blocked", "permission")
        while True:
            key = self._keys.next_key()
            if key.kind is KeyKind.ENTER:
                return selected
            if key.kind is KeyKind.ESC:
                return None
            if key.kind is KeyKind.UP:
                moved = max(0, selected - 1)
            elif key.kind is KeyKind.DOWN:
                moved = min(len(OPTIONS) - 1, selected + 1)
            else:
                continue
            if moved != selected:
                selected = moved
                drawn = "".join(ERASE_LINE + row + "\r\n" for row in option_rows(selected))
                self._write(REDRAW_UP + drawn + REDRAW_DOWN)

    def _report(self, state: str, kind: str | None = None) -> None:
        self._write(report(state, kind))

    def _write(self, text: str) -> None:
        data = memoryview(text.encode("utf-8"))
        while data:
            try:
                written = os.write(self._out, data)
            except OSError as exc:
                if exc.errno == errno.EIO:
                    raise Hangup(EXIT_HANGUP) from None
                if exc.errno == errno.EPIPE:
                    raise Hangup(EXIT_BROKEN_PIPE) from None
                raise
            data = data[written:]


def write_file(command: str) -> str:
    """Carry out ``PATH TEXT`` (an edit prompt without its verb); returns what happened."""
    path, _, text = command.partition(" ")
    parts = path.split("/")
    if not path or path.startswith("/") or ".." in parts:
        return f"refused to write {path!r}: only paths below the working directory"
    try:
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        with open(path, "w", encoding="utf-8") as out:
            out.write(text + "\n")
    except OSError as exc:
        return f"cannot write {path}: {exc.strerror}"
    return f"wrote {path}"


def spawn_detached() -> int:
    """Start a helper that escapes the agent's session and process tree; return its pid."""
    read_fd, write_fd = os.pipe()
    try:
        middle = os.fork()
    except OSError:
        os.close(read_fd)
        os.close(write_fd)
        raise
    if middle == 0:
        _middle(read_fd, write_fd)
    os.close(write_fd)
    chunks: list[bytes] = []
    try:
        # EOF only once the helper has closed its inherited copy, i.e. it is detached.
        while chunk := os.read(read_fd, 64):
            chunks.append(chunk)
    finally:
        os.close(read_fd)
        os.waitpid(middle, 0)
    return int(b"".join(chunks))


def _middle(read_fd: int, write_fd: int) -> NoReturn:
    status = 1
    try:
        os.close(read_fd)
        os.setsid()
        helper = os.fork()
        if helper == 0:
            _helper()
        os.write(write_fd, str(helper).encode("ascii"))
        status = 0
    finally:
        # A forked child must never unwind into the agent's own stack.
        os._exit(status)


def _helper() -> NoReturn:
    try:
        for signum in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        os.chdir("/")
        time.sleep(HELPER_SECONDS)
    finally:
        os._exit(0)


def _raise_terminated(signum: int, frame: FrameType | None) -> NoReturn:
    raise Terminated(signum)


def _enter_raw(fd: int) -> list[Any] | None:
    """Switch the terminal to raw mode; returns the mode to restore, None if not a tty."""
    try:
        saved = termios.tcgetattr(fd)
        # TCSANOW: TCSAFLUSH would throw away anything typed before we started.
        tty.setraw(fd, termios.TCSANOW)
    except termios.error:
        return None
    return saved


def main() -> int:
    """Run the demo agent on stdin/stdout; returns the process exit status."""
    in_fd, out_fd = 0, 1
    for signum in (signal.SIGHUP, signal.SIGTERM):
        signal.signal(signum, _raise_terminated)
    saved: list[Any] | None = None
    try:
        saved = _enter_raw(in_fd)
        flags = sys.argv[1:]
        agent = DemoAgent(
            in_fd, out_fd, startup_blip="--startup-blip" in flags, edits="--edits" in flags
        )
        return agent.run()
    except Terminated as exc:
        return 128 + exc.signum
    except Hangup as exc:
        return exc.code
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    finally:
        # A second signal must still end us if restoring the terminal blocks.
        for signum in (signal.SIGHUP, signal.SIGTERM):
            signal.signal(signum, signal.SIG_DFL)
        with contextlib.suppress(OSError):
            os.write(out_fd, DISABLE_PASTE.encode("ascii"))
        if saved is not None:
            with contextlib.suppress(termios.error):
                termios.tcsetattr(in_fd, termios.TCSANOW, saved)


if __name__ == "__main__":
    sys.exit(main())
