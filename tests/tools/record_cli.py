"""Record the byte stream a real coding CLI writes to its terminal.

The recorder runs a command on a real PTY in a throw-away environment (fresh temporary HOME,
an empty git repository as cwd, a minimal environment with no credentials), saves every byte
the program writes to ``<name>.bin`` and a description of the run to ``<name>.json``, and
drives the program through a scripted scenario: wait for some text or for a quiet period,
then send keys.

While recording it acts as the terminal: it answers the queries a real terminal answers
(DA1, DA2, CPR, XTVERSION, OSC 10/11/12/4 colours, XTWINOPS 14/16/18, DECRQM, XTGETTCAP,
the OSC 7501 probe) because the CLIs draw a different screen, or wait, when nobody answers.
Replies go to the PTY only, never into the recording; they are listed in the metadata as
events so a test can see which query got which answer.

The cursor position for CPR comes from a stock pyte screen fed with the same bytes. pyte is
not a faithful terminal (see shared/agents.md), so the tracker only receives what pyte
handles correctly: DCS/APC/PM/SOS strings and CSI sequences pyte misparses are dropped,
zero-width variation selectors are removed, and the alternate screen is emulated. The
position can still be off after exotic sequences; every CPR reply is recorded so this can be
checked afterwards. The same screen serves the scenario's "wait for text" steps.

Usage::

    python -m tests.tools.record_cli list
    python -m tests.tools.record_cli run CLI SCENARIO [--out tests/captured] [--show]
    python -m tests.tools.record_cli all [--out tests/captured]
    python -m tests.tools.record_cli adhoc --out DIR --name NAME --step SPEC ... -- ARGV...

An adhoc ``--step`` is ``key=value`` pairs joined by ``;`` with keys ``screen`` (text to wait
for on screen), ``bytes`` (regex on the raw stream), ``quiet`` (seconds without output),
``deadline`` (seconds), ``mark`` (name), ``send`` (keys, Python escapes allowed) and
``exit`` (wait up to that many seconds for the program to exit).
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import dataclasses
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import ptyprocess
import pyte

REPO = Path(__file__).resolve().parents[2]
DEFAULT_PREFIX = REPO / ".npm-cli"
DEFAULT_OUT = REPO / "tests" / "captured"
VERSIONS_FILE = REPO / "tests" / "realcli" / "versions.json"

ESC = "\x1b"
ST = "\x1b\\"

# What the recorder claims to be. Answers follow xterm's formats; the identity strings are
# generic so that no CLI switches to a terminal-specific code path (e.g. tmux passthrough).
DA1_REPLY = "\x1b[?62;22c"
DA2_REPLY = "\x1b[>1;10;0c"
XTVERSION_REPLY = "\x1bP>|panewarden-recorder(1)\x1b\\"
FG_RGB = "rgb:d0d0/d0d0/d0d0"
BG_RGB = "rgb:1c1c/1c1c/1c1c"
CURSOR_RGB = "rgb:d0d0/d0d0/d0d0"
CELL_W, CELL_H = 8, 16

# Modes whose state DECRQM reports from what the program set; others are "not recognised".
KNOWN_PRIVATE_MODES = {1, 7, 12, 25, 47, 1000, 1002, 1003, 1004, 1006, 1047, 1048, 1049, 2004, 2026}
KNOWN_PRIVATE_MODES_DEFAULT_SET = {7, 25}

# Characters stock pyte mishandles that have no width in tmux either.
ZERO_WIDTH = dict.fromkeys(map(ord, "\ufe0e\ufe0f\u200d"), None)


def xterm_palette(index: int) -> str:
    """The xterm default colour for palette entry ``index`` as an OSC 4 rgb: string."""
    base16 = [
        (0, 0, 0), (205, 0, 0), (0, 205, 0), (205, 205, 0),
        (0, 0, 238), (205, 0, 205), (0, 205, 205), (229, 229, 229),
        (127, 127, 127), (255, 0, 0), (0, 255, 0), (255, 255, 0),
        (92, 92, 255), (255, 0, 255), (0, 255, 255), (255, 255, 255),
    ]  # fmt: skip
    if index < 16:
        r, g, b = base16[index]
    elif index < 232:
        steps = [0, 95, 135, 175, 215, 255]
        i = index - 16
        r, g, b = steps[i // 36], steps[(i // 6) % 6], steps[i % 6]
    else:
        r = g = b = 8 + 10 * (index - 232)
    return f"rgb:{r:02x}{r:02x}/{g:02x}{g:02x}/{b:02x}{b:02x}"


# --------------------------------------------------------------------------------------
# Tokenizer: splits the decoded output into text and complete control sequences, carrying
# an unfinished sequence over to the next chunk.


class Tokenizer:
    """Incremental splitter of terminal output into ("text", s) and ("seq", s) tokens."""

    MAX_CARRY = 1 << 16  # an unterminated string longer than this is given up as text

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._carry = ""

    def feed(self, data: bytes) -> list[tuple[str, str]]:
        s = self._carry + self._decoder.decode(data)
        self._carry = ""
        out: list[tuple[str, str]] = []
        i, n = 0, len(s)
        while i < n:
            j = s.find(ESC, i)
            if j < 0:
                out.append(("text", s[i:]))
                break
            if j > i:
                out.append(("text", s[i:j]))
            end = self._seq_end(s, j)
            if end is None:
                if n - j > self.MAX_CARRY:
                    out.append(("text", s[j:]))
                else:
                    self._carry = s[j:]
                break
            out.append(("seq", s[j:end]))
            i = end
        return out

    def pending(self) -> int:
        """How many bytes fed so far are held back as an unfinished sequence or character."""
        held = self._decoder.getstate()[0]
        return len(self._carry.encode("utf-8", "surrogatepass")) + len(held)

    @staticmethod
    def _seq_end(s: str, j: int) -> int | None:
        """Index just past the sequence starting at ``s[j] == ESC``, or None if incomplete."""
        n = len(s)
        if j + 1 >= n:
            return None
        c = s[j + 1]
        if c == "[":
            k = j + 2
            while k < n:
                o = ord(s[k])
                if 0x40 <= o <= 0x7E:
                    return k + 1
                if not 0x20 <= o <= 0x3F:
                    # A control character inside CSI: end the sequence here; the character
                    # is handled as text, as terminals execute it in place.
                    return k
                k += 1
            return None
        if c in "]P_^X":
            # OSC ends with BEL or ST; DCS/APC/PM/SOS with ST (BEL accepted, as xterm does).
            k = j + 2
            while k < n:
                if s[k] == "\x07":
                    return k + 1
                if s[k] == ESC:
                    if k + 1 >= n:
                        return None
                    if s[k + 1] == "\\":
                        return k + 2
                    return k  # a new ESC aborts the string
                k += 1
            return None
        k = j + 1
        while k < n and 0x20 <= ord(s[k]) <= 0x2F:
            k += 1
        if k >= n:
            return None
        return k + 1


# --------------------------------------------------------------------------------------
# Cursor/screen tracker on stock pyte.


class TrackerScreen(pyte.Screen):
    """pyte screen with the few fixes the tracker needs (alternate screen, private SGR)."""

    def __init__(self, cols: int, rows: int) -> None:
        super().__init__(cols, rows)
        self.alternate_on = False
        self._saved_main: tuple[dict[int, dict[int, Any]], int, int] | None = None

    def select_graphic_rendition(self, *attrs: int, private: bool = False) -> None:
        if not private:
            super().select_graphic_rendition(*attrs)

    def _enter_alt(self) -> None:
        if self.alternate_on:
            return
        self._saved_main = (
            {y: dict(line) for y, line in self.buffer.items()},
            self.cursor.x,
            self.cursor.y,
        )
        self.alternate_on = True
        self.erase_in_display(2)

    def _leave_alt(self) -> None:
        if not self.alternate_on:
            return
        self.alternate_on = False
        self.buffer.clear()
        if self._saved_main is not None:
            lines, x, y = self._saved_main
            for row, line in lines.items():
                self.buffer[row].update(line)
            self.cursor.x, self.cursor.y = x, y
        self.dirty.update(range(self.lines))

    def set_mode(self, *modes: int, **kwargs: bool) -> None:
        if kwargs.get("private"):
            alt = [m for m in modes if m in (47, 1047, 1049)]
            if 1049 in alt:
                self.save_cursor()
            if alt:
                self._enter_alt()
            modes = tuple(m for m in modes if m not in (47, 1047, 1049))
        super().set_mode(*modes, **kwargs)

    def reset_mode(self, *modes: int, **kwargs: bool) -> None:
        if kwargs.get("private"):
            alt = [m for m in modes if m in (47, 1047, 1049)]
            if alt:
                self._leave_alt()
            if 1049 in alt:
                self.restore_cursor()
            modes = tuple(m for m in modes if m not in (47, 1047, 1049))
        super().reset_mode(*modes, **kwargs)


_PYTE_SAFE_CSI = re.compile(r"\x1b\[\??[0-9;]*[@A-Za-z`]\Z")
_SIMPLE_ESC = re.compile(r"\x1b[78cDEMH=>]\Z|\x1b[()][0-9A-Za-z]\Z")


class Tracker:
    """Keeps a pyte screen in step with the program's output, for CPR and waits."""

    def __init__(self, cols: int, rows: int) -> None:
        self.screen = TrackerScreen(cols, rows)
        self.stream = pyte.Stream(self.screen)
        self.errors = 0

    def text(self, s: str) -> None:
        self._feed(s.translate(ZERO_WIDTH))

    def seq(self, s: str) -> None:
        # Only sequences pyte parses correctly reach it; the rest cannot move the cursor in
        # tmux either except a few (e.g. CSI with ':' sub-parameters is SGR only).
        if _PYTE_SAFE_CSI.match(s) or _SIMPLE_ESC.match(s) or s.startswith("\x1b]"):
            self._feed(s)

    def _feed(self, s: str) -> None:
        try:
            self.stream.feed(s)
        except Exception:  # a tracker glitch must not end the recording
            self.errors += 1

    def cursor(self) -> tuple[int, int]:
        """1-based (row, col) as CPR reports it."""
        c = self.screen.cursor
        return c.y + 1, min(c.x, self.screen.columns - 1) + 1

    def display(self) -> str:
        return "\n".join(line.rstrip() for line in self.screen.display)


# --------------------------------------------------------------------------------------
# Query responder.


class Responder:
    """Answers terminal queries found in the output, as a real terminal would."""

    def __init__(self, cols: int, rows: int, tracker: Tracker) -> None:
        self.cols, self.rows = cols, rows
        self.tracker = tracker
        self.modes: set[int] = set(KNOWN_PRIVATE_MODES_DEFAULT_SET)

    def handle(self, s: str) -> str | None:
        """Reply for the complete sequence ``s``, or None. Also tracks DEC private modes."""
        if s.startswith("\x1b["):
            return self._csi(s[2:])
        if s.startswith("\x1b]"):
            return self._osc(s)
        if s.startswith("\x1bP"):
            return self._dcs(s)
        return None

    def _csi(self, body: str) -> str | None:
        final, params = body[-1:], body[:-1]
        m = re.fullmatch(r"\?([0-9;]*)", params)
        if m and final in "hl":
            for p in filter(None, m.group(1).split(";")):
                (self.modes.add if final == "h" else self.modes.discard)(int(p))
            return None
        if final == "c" and params in ("", "0"):
            return DA1_REPLY
        if final == "c" and params in (">", ">0"):
            return DA2_REPLY
        if final == "n" and params == "6":
            row, col = self.tracker.cursor()
            return f"\x1b[{row};{col}R"
        if final == "n" and params == "?6":
            row, col = self.tracker.cursor()
            return f"\x1b[?{row};{col};1R"
        if final == "n" and params == "5":
            return "\x1b[0n"
        if final == "m" and params == ">4;?":
            # XTQMODKEYS: modifyOtherKeys is off.
            return "\x1b[>4;0m"
        if final == "q" and params in (">", ">0"):
            return XTVERSION_REPLY
        if final == "t" and params == "14":
            return f"\x1b[4;{self.rows * CELL_H};{self.cols * CELL_W}t"
        if final == "t" and params == "16":
            return f"\x1b[6;{CELL_H};{CELL_W}t"
        if final == "t" and params == "18":
            return f"\x1b[8;{self.rows};{self.cols}t"
        m = re.fullmatch(r"\?([0-9]+)\$", params)
        if m and final == "p":
            mode = int(m.group(1))
            # 0: not recognised, 1: set, 2: reset.
            value = 0 if mode not in KNOWN_PRIVATE_MODES else 1 if mode in self.modes else 2
            return f"\x1b[?{mode};{value}$y"
        return None

    def _osc(self, s: str) -> str | None:
        term = "\x07" if s.endswith("\x07") else ST
        body = s[2:].removesuffix("\x07").removesuffix(ST)
        if body == "7501;?":
            # Program Status Protocol probe: a supporting terminal echoes it.
            return "\x1b]7501;?" + ST
        colours = {"10": FG_RGB, "11": BG_RGB, "12": CURSOR_RGB}
        parts = body.split(";")
        if parts[0] in colours and len(parts) >= 2 and parts[1] == "?":
            # xterm answers the first dynamic colour queried; enough for these CLIs.
            return f"\x1b]{parts[0]};{colours[parts[0]]}{term}"
        if parts[0] == "4" and len(parts) >= 3:
            replies = []
            for idx, spec in zip(parts[1::2], parts[2::2], strict=False):
                if spec == "?" and idx.isdigit() and int(idx) < 256:
                    replies.append(f"\x1b]4;{idx};{xterm_palette(int(idx))}{term}")
            return "".join(replies) or None
        return None

    def _dcs(self, s: str) -> str | None:
        body = s[2:].removesuffix(ST).removesuffix("\x07")
        if body.startswith("+q"):
            # XTGETTCAP: report every capability as unknown, as xterm does for most names.
            return f"\x1bP0+r{body[2:]}{ST}"
        if body.startswith("$q"):
            # DECRQSS: "invalid request" keeps programs on their defaults.
            return f"\x1bP0$r{ST}"
        return None


# --------------------------------------------------------------------------------------
# Scenarios.


@dataclasses.dataclass
class Step:
    """Wait for ``screen`` text / ``bytes`` regex (if given) and ``quiet`` seconds without
    output, up to ``deadline``; then record ``mark`` and send ``send``. With ``exit`` set,
    wait up to that many seconds for the program to end instead."""

    screen: str | None = None
    bytes: str | None = None
    quiet: float = 0.0
    deadline: float = 15.0
    mark: str | None = None
    send: str | None = None
    exit: float | None = None
    note: str = ""


@dataclasses.dataclass
class Scenario:
    cli: str
    name: str
    argv: list[str]
    steps: list[Step]
    description: str
    setup: Callable[[Path, Path], None] | None = None
    cols: int = 120
    # Extra variables for the program (no credentials: recordings run offline).
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    rows: int = 40


def _claude_setup(home: Path, cwd: Path) -> None:
    # Without this, a fresh HOME makes Claude Code try the network for onboarding and exit 1.
    (home / ".claude.json").write_text(json.dumps({"hasCompletedOnboarding": True}))


def _gemini_api_key_setup(home: Path, cwd: Path) -> None:
    # API-key auth chosen (the key itself is a dummy in the scenario's env): Gemini CLI then
    # draws its input box before it asks whether to trust the folder.
    (home / ".gemini").mkdir(exist_ok=True)
    (home / ".gemini" / "settings.json").write_text(
        json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}})
    )


def _qwen_folder_trust_setup(home: Path, cwd: Path) -> None:
    # Qwen Code's folder trust is off by default; with it on, a trust prompt comes first.
    (home / ".qwen").mkdir(exist_ok=True)
    (home / ".qwen" / "settings.json").write_text(
        json.dumps({"security": {"folderTrust": {"enabled": True}}})
    )


CODEX_ARGV = ["codex", "--disable", "daemon_auto_start"]

# Each step waits, then marks, then sends: a mark that should show the effect of a key is
# therefore on the step after the one that sends the key.
SCENARIOS: list[Scenario] = [
    Scenario(
        "opencode",
        "startup",
        ["opencode"],
        [
            Step(screen="ask anything", quiet=1.5, deadline=20, mark="home", send="\x03"),
            Step(exit=8),
        ],
        "start-up to the idle home screen; one Ctrl-C exits and leaves the alternate screen",
    ),
    Scenario(
        "opencode",
        "prompt_error",
        ["opencode"],
        [
            Step(screen="ask anything", quiet=1.5, deadline=20, mark="home", send="hello"),
            Step(quiet=0.5, deadline=3, mark="typed", send="\r"),
            Step(screen="retrying in", deadline=10, mark="retrying", send="\x1b"),
            Step(quiet=0.3, deadline=1.5, mark="esc_once", send="\x1b"),
            Step(quiet=1.0, deadline=3, mark="interrupted", send="\x03"),
            Step(exit=8),
        ],
        "home screen; 'hello' + Enter starts a turn that retries 'Cannot connect to API'; "
        "Esc Esc interrupts it; Ctrl-C exits and prints the session summary",
    ),
    Scenario(
        "claude",
        "startup",
        ["claude"],
        [
            Step(screen="trust this folder", quiet=1.5, deadline=20, mark="trust", send="\x1b"),
            Step(exit=8),
        ],
        "folder-trust prompt (inline); Esc declines and Claude Code exits 1 with a message",
        setup=_claude_setup,
    ),
    Scenario(
        "claude",
        "trusted",
        ["claude"],
        [
            Step(screen="trust this folder", quiet=1.5, deadline=20, mark="trust", send="\x1b[B"),
            Step(quiet=0.5, deadline=2, mark="trust_yes", send="\r"),
            Step(screen="not logged in", quiet=1.5, deadline=12, mark="main", send="\x03"),
            Step(quiet=0.5, deadline=2, mark="ctrl_c_once", send="\x03"),
            Step(exit=8),
        ],
        "trust prompt; Down + Enter trusts the folder; main prompt with 'Not logged in'; "
        "Ctrl-C twice exits",
        setup=_claude_setup,
    ),
    Scenario(
        "claude",
        "prompt_auth",
        ["claude"],
        [
            Step(screen="trust this folder", quiet=1.5, deadline=20, send="\x1b[B"),
            Step(quiet=0.5, deadline=2, send="\r"),
            Step(screen="not logged in", quiet=1.5, deadline=12, mark="main", send="hello"),
            Step(quiet=0.5, deadline=2, mark="typed", send="\r"),
            Step(quiet=2.0, deadline=8, mark="answered", send="\x03"),
            Step(quiet=0.5, deadline=2, send="\x03"),
            Step(exit=8),
        ],
        "trusted main prompt; 'hello' + Enter without credentials; Ctrl-C twice exits",
        setup=_claude_setup,
    ),
    Scenario(
        "codex",
        "startup",
        CODEX_ARGV,
        [
            Step(screen="sign in with chatgpt", quiet=1.5, deadline=20, mark="signin", send="\x03"),
            Step(exit=8),
        ],
        "sign-in menu (alternate screen); Ctrl-C exits and leaves the alternate screen",
    ),
    Scenario(
        "codex",
        "signin_menu",
        CODEX_ARGV,
        [
            Step(
                screen="sign in with chatgpt", quiet=1.5, deadline=20, mark="signin", send="\x1b[B"
            ),
            Step(quiet=1.0, deadline=3, mark="down1", send="\x1b[B"),
            Step(quiet=1.0, deadline=3, mark="down2", send="\r"),
            Step(
                screen="use an openai api key",
                quiet=1.0,
                deadline=4,
                mark="another_way",
                send="\x03",
            ),
            Step(exit=8),
        ],
        "sign-in menu; Down Down Enter opens 'Sign in another way'; Ctrl-C exits",
    ),
    Scenario(
        "gemini",
        "startup",
        ["gemini"],
        [
            Step(screen="do you trust", quiet=2.0, deadline=20, mark="trust", send="\x03"),
            Step(quiet=0.5, deadline=2, mark="ctrl_c_once", send="\x03"),
            Step(exit=8),
        ],
        "folder-trust prompt (inline); Ctrl-C twice exits",
    ),
    Scenario(
        "gemini",
        "trusted",
        ["gemini"],
        [
            Step(screen="do you trust", quiet=2.0, deadline=20, mark="trust", send="\r"),
            Step(
                screen="how would you like to authenticate",
                quiet=1.5,
                deadline=8,
                mark="auth",
                send="\x03",
            ),
            Step(quiet=0.5, deadline=2, mark="ctrl_c_once", send="\x03"),
            Step(exit=8),
        ],
        "folder-trust prompt; Enter trusts the folder; auth menu; "
        "Ctrl-C twice exits with a summary",
    ),
    Scenario(
        "gemini",
        "trust_authed",
        ["gemini", "--approval-mode", "default"],
        [
            Step(screen="type your message", deadline=20, mark="input_box"),
            Step(screen="do you trust", quiet=2.0, deadline=20, mark="trust", send="\x1b"),
            Step(exit=8),
        ],
        "API-key auth configured, folder not trusted: the input box is drawn for a moment, "
        "then the folder-trust prompt; Esc exits without saving anything",
        setup=_gemini_api_key_setup,
        env={"GEMINI_API_KEY": "dummy"},
    ),
    Scenario(
        "qwen",
        "startup",
        ["qwen"],
        [
            Step(screen="connect a provider", quiet=2.0, deadline=20, mark="provider", send="\x03"),
            Step(quiet=0.3, deadline=1, send="\x03"),
            Step(exit=8),
        ],
        "start-up to the 'Connect a Provider' menu; Ctrl-C twice exits",
    ),
    Scenario(
        "qwen",
        "provider_menu",
        ["qwen"],
        [
            Step(
                screen="connect a provider", quiet=2.0, deadline=20, mark="provider", send="\x1b[B"
            ),
            Step(quiet=1.0, deadline=3, mark="down1", send="\r"),
            Step(quiet=1.0, deadline=3, mark="third_party", send="\x03"),
            Step(quiet=0.3, deadline=1, send="\x03"),
            Step(exit=8),
        ],
        "provider menu; Down moves the selection; Enter opens the next page; Ctrl-C twice exits",
    ),
    Scenario(
        "qwen",
        "trust",
        ["qwen"],
        [
            Step(
                screen="do you trust this folder", quiet=2.0, deadline=20, mark="trust", send="\x03"
            ),
            # Ctrl-C does nothing there; Esc is "3. Don't trust (esc)", which is saved.
            Step(quiet=0.5, deadline=2, mark="ctrl_c_once", send="\x1b"),
            Step(screen="connect a provider", quiet=1.5, deadline=10, mark="declined", send="\x03"),
            Step(quiet=0.3, deadline=1, send="\x03"),
            Step(exit=8),
        ],
        "with security.folderTrust.enabled: the folder-trust prompt (alternate screen); "
        "Ctrl-C is ignored there; Esc declines (saved as DO_NOT_TRUST) and the provider menu "
        "follows; Ctrl-C twice exits",
        setup=_qwen_folder_trust_setup,
    ),
]


# --------------------------------------------------------------------------------------
# Recording.


def build_env(home: Path, prefix: Path, extra: dict[str, str]) -> dict[str, str]:
    """A minimal environment: nothing from the caller's, so no credentials leak in."""
    node = shutil.which("node")
    # Aider lives in its own venv under the prefix (tests/realcli/install.sh).
    path = [str(prefix / "node_modules" / ".bin"), str(prefix / "aider-venv" / "bin")]
    if node:
        path.append(str(Path(node).parent))
    path += ["/usr/local/bin", "/usr/bin", "/bin"]
    env = {
        "HOME": str(home),
        "PATH": os.pathsep.join(dict.fromkeys(path)),
        "TERM": "xterm-256color",
        "LANG": "C.UTF-8",
        "USER": os.environ.get("USER", "root"),
        "SHELL": "/bin/bash",
        "TMPDIR": str(home / "tmp"),
    }
    env.update(extra)
    return env


def kill_leftovers(sid: int, home: Path, workdir: Path) -> list[dict[str, Any]]:
    """SIGKILL every process in the program's session or living in its HOME/workdir.

    Daemons that escape with setsid keep the temporary HOME in their environment or cwd,
    which is how they are found. Returns what was killed, for the metadata.
    """
    killed: list[dict[str, Any]] = []
    me = os.getpid()
    roots = (str(home), str(workdir))
    for _ in range(5):
        found = []
        for p in psutil.process_iter(["pid", "name", "cmdline"]):
            if p.pid == me:
                continue
            try:
                hit = False
                try:
                    hit = os.getsid(p.pid) == sid
                except OSError:
                    continue
                if not hit:
                    cwd = p.cwd()
                    hit = cwd.startswith(roots)
                if not hit:
                    hit = p.environ().get("HOME", "").startswith(str(home))
                if hit:
                    found.append(p)
            except (psutil.Error, OSError):
                continue
        if not found:
            break
        for p in found:
            try:
                killed.append(
                    {"pid": p.pid, "cmdline": p.info["cmdline"][:4] if p.info["cmdline"] else []}
                )
                p.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
        psutil.wait_procs(found, timeout=3)
    return killed


def load_versions() -> dict[str, Any]:
    try:
        versions: dict[str, Any] = json.loads(VERSIONS_FILE.read_text())
        return versions
    except OSError:
        return {}


def cli_version(cli: str) -> str | None:
    for pkg, info in load_versions().items():
        if isinstance(info, dict) and info.get("bin") == cli:
            return f"{pkg}@{info['version']}"
    return None


class Recorder:
    """One recording: spawn, pump output, run steps, exit, clean up, write files."""

    def __init__(self, scenario: Scenario, out_dir: Path, prefix: Path, show: bool) -> None:
        self.sc = scenario
        self.out_dir = out_dir
        self.prefix = prefix
        self.show = show
        self.data = bytearray()
        self.chunks: list[list[float | int]] = []
        self.events: list[dict[str, Any]] = []
        self.marks: list[dict[str, Any]] = []
        self.tokenizer = Tokenizer()
        self.tracker = Tracker(scenario.cols, scenario.rows)
        self.responder = Responder(scenario.cols, scenario.rows, self.tracker)
        self.t0 = 0.0
        self.last_output = 0.0
        self.eof = False
        self.max_bytes = 2_000_000

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 4)

    def pump(self, timeout: float) -> None:
        """Read whatever output arrives within ``timeout`` seconds and answer queries."""
        if self.eof:
            time.sleep(timeout)
            return
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return
            r, _, _ = select.select([self.proc.fd], [], [], left)
            if not r:
                return
            try:
                chunk = os.read(self.proc.fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                self.eof = True
                return
            self.data += chunk
            self.last_output = time.monotonic()
            self.chunks.append([self.now(), len(self.data)])
            for kind, s in self.tokenizer.feed(chunk):
                if kind == "text":
                    self.tracker.text(s)
                    continue
                reply = self.responder.handle(s)
                self.tracker.seq(s)
                if reply:
                    os.write(self.proc.fd, reply.encode())
                    self.events.append(
                        {
                            "t": self.now(),
                            "at": len(self.data),
                            "kind": "reply",
                            "query": s,
                            "reply": reply,
                        }
                    )

    def send(self, keys: str) -> None:
        os.write(self.proc.fd, keys.encode())
        self.events.append({"t": self.now(), "at": len(self.data), "kind": "send", "keys": keys})

    def _matches(self, step: Step, pattern: re.Pattern[bytes] | None, since: int) -> bool:
        if step.screen is not None and step.screen.lower() in self.tracker.display().lower():
            return True
        # Look a little before the step's start so a pattern split across reads still matches.
        return (
            pattern is not None
            and pattern.search(bytes(self.data[max(0, since - 64) :])) is not None
        )

    def run_step(self, step: Step) -> dict[str, Any]:
        started = time.monotonic()
        result: dict[str, Any] = {
            "step": {k: v for k, v in dataclasses.asdict(step).items() if v not in (None, "", 0.0)}
        }
        if step.exit is not None:
            deadline = started + step.exit
            while self.proc.isalive() and time.monotonic() < deadline:
                self.pump(0.1)
            result["exited"] = not self.proc.isalive()
            # Drain what the program wrote on its way out.
            quiet_since = time.monotonic()
            while time.monotonic() - quiet_since < 0.5 and time.monotonic() < deadline + 2:
                before = len(self.data)
                self.pump(0.1)
                if len(self.data) != before:
                    quiet_since = time.monotonic()
                if self.eof:
                    break
            result["elapsed"] = round(time.monotonic() - started, 3)
            return result
        matched = step.screen is None and step.bytes is None
        since = len(self.data)
        pattern = re.compile(step.bytes.encode()) if step.bytes else None
        deadline = started + step.deadline
        step_start = time.monotonic()
        while time.monotonic() < deadline and len(self.data) < self.max_bytes and not self.eof:
            if not matched:
                matched = self._matches(step, pattern, since)
            if matched and time.monotonic() - max(self.last_output, step_start) >= step.quiet:
                break
            self.pump(0.05)
        quiet_for = time.monotonic() - max(self.last_output, step_start)
        result.update(
            matched=matched,
            stable=matched and quiet_for >= step.quiet,
            elapsed=round(time.monotonic() - started, 3),
        )
        if step.mark:
            mark = {
                "name": step.mark,
                "offset": len(self.data),
                "t": self.now(),
                "matched": matched,
                "stable": result["stable"],
                "tracker_cursor": list(self.tracker.cursor()),
            }
            self.marks.append(mark)
            self.events.append(
                {"t": self.now(), "at": len(self.data), "kind": "mark", "name": step.mark}
            )
            if self.show:
                print(f"--- mark {step.mark} @ {len(self.data)} stable={result['stable']}")
                print(self.tracker.display())
        if step.send:
            self.send(step.send)
        return result

    def record(self) -> dict[str, Any]:
        sc = self.sc
        base = Path(tempfile.mkdtemp(prefix="pwrec-"))
        home = base / "home"
        cwd = base / "work"
        (home / "tmp").mkdir(parents=True)
        cwd.mkdir()
        subprocess.run(["git", "init", "-q", str(cwd)], check=True)
        if sc.setup:
            sc.setup(home, cwd)
        env = build_env(home, self.prefix, dict(self.sc.env))
        argv = list(sc.argv)
        exe = shutil.which(argv[0], path=env["PATH"])
        if exe is None:
            raise SystemExit(
                f"{argv[0]} not found under {self.prefix}; run tests/realcli/install.sh"
            )
        self.t0 = time.monotonic()
        self.proc = ptyprocess.PtyProcess.spawn(
            [exe, *argv[1:]], cwd=str(cwd), env=env, dimensions=(sc.rows, sc.cols)
        )
        sid = os.getsid(self.proc.pid)
        step_results = []
        try:
            for step in sc.steps:
                if self.eof and step.exit is None:
                    step_results.append({"step": dataclasses.asdict(step), "skipped": "eof"})
                    continue
                step_results.append(self.run_step(step))
        finally:
            exited_by_itself = not self.proc.isalive()
            exit_status = self.proc.exitstatus if exited_by_itself else None
            signal_status = self.proc.signalstatus if exited_by_itself else None
            killed = kill_leftovers(sid, home, cwd)
            # The child may be gone and its fd closed already.
            with contextlib.suppress(Exception):
                self.proc.terminate(force=True)
            with contextlib.suppress(Exception):
                self.proc.close(force=True)
            shutil.rmtree(base, ignore_errors=True)
        duration = self.now()
        meta = {
            "cli": sc.cli,
            "scenario": sc.name,
            "description": sc.description,
            "version": cli_version(sc.argv[0]),
            "argv": argv,
            "cols": sc.cols,
            "rows": sc.rows,
            "env": {k: v for k, v in env.items() if k in ("TERM", "LANG")},
            "size": len(self.data),
            "duration": duration,
            "exited_by_itself": exited_by_itself,
            "exit_status": exit_status,
            "signal_status": signal_status,
            "leftovers_killed": killed,
            "tracker_alternate_on_at_end": self.tracker.screen.alternate_on,
            "tracker_errors": self.tracker.errors,
            "marks": self.marks,
            "steps": step_results,
            "events": self.events,
            "chunks": self.chunks,
            "responder": {
                "cpr": "cursor from a stock-pyte tracker (see record_cli.py docstring)",
                "da1": DA1_REPLY,
                "da2": DA2_REPLY,
                "xtversion": XTVERSION_REPLY,
                "osc10": FG_RGB,
                "osc11": BG_RGB,
                "kitty_keyboard_query": "not answered",
                "kitty_graphics_query": "not answered",
            },
        }
        dest = self.out_dir / sc.cli
        dest.mkdir(parents=True, exist_ok=True)
        (dest / f"{sc.name}.bin").write_bytes(bytes(self.data))
        (dest / f"{sc.name}.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
        if self.show:
            print(f"--- end ({len(self.data)} bytes, {duration}s, exited={exited_by_itself})")
            print(self.tracker.display())
        return meta


# --------------------------------------------------------------------------------------
# Command line.


def parse_step(spec: str) -> Step:
    kw: dict[str, Any] = {}
    for part in spec.split(";"):
        if not part:
            continue
        key, _, value = part.partition("=")
        if key in ("quiet", "deadline", "exit"):
            kw[key] = float(value)
        elif key == "send":
            kw[key] = value.encode("latin-1", "backslashreplace").decode("unicode_escape")
        elif key in ("screen", "bytes", "mark", "note"):
            kw[key] = value
        else:
            raise SystemExit(f"unknown step key {key!r}")
    return Step(**kw)


def find_scenario(cli: str, name: str) -> Scenario:
    for sc in SCENARIOS:
        if sc.cli == cli and sc.name == name:
            return sc
    raise SystemExit(f"no scenario {cli}/{name}")


def summary(meta: dict[str, Any]) -> str:
    marks = ", ".join(
        f"{m['name']}@{m['offset']}{'' if m['stable'] else '(unstable)'}" for m in meta["marks"]
    )
    return (
        f"{meta['cli']}/{meta['scenario']}: {meta['size']} bytes, {meta['duration']}s, "
        f"exited={meta['exited_by_itself']} status={meta['exit_status']} "
        f"killed={len(meta['leftovers_killed'])} marks=[{marks}]"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list")
    for name in ("run", "all", "adhoc"):
        p = sub.add_parser(name)
        p.add_argument("--out", type=Path, default=DEFAULT_OUT)
        p.add_argument("--prefix", type=Path, default=DEFAULT_PREFIX)
        p.add_argument("--show", action="store_true", help="print the tracker screen at marks")
        if name == "run":
            p.add_argument("cli")
            p.add_argument("scenario")
        if name == "adhoc":
            p.add_argument("--name", required=True, help="CLI/SCENARIO")
            p.add_argument("--step", action="append", default=[])
            p.add_argument("--cols", type=int, default=120)
            p.add_argument("--rows", type=int, default=40)
            p.add_argument("argv", nargs="+")
    args = ap.parse_args(argv)
    if args.cmd == "list":
        for sc in SCENARIOS:
            print(f"{sc.cli} {sc.name}: {sc.description}")
        return 0
    if args.cmd == "run":
        todo = [find_scenario(args.cli, args.scenario)]
    elif args.cmd == "all":
        todo = SCENARIOS
    else:
        cli, _, name = args.name.partition("/")
        todo = [
            Scenario(
                cli,
                name or "adhoc",
                args.argv,
                [parse_step(s) for s in args.step],
                "adhoc",
                _claude_setup if args.argv[0] == "claude" else None,
                args.cols,
                args.rows,
            )
        ]
    for sc in todo:
        meta = Recorder(sc, args.out, args.prefix, args.show).record()
        print(summary(meta), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
