"""A confined pane's program that checks its terminal from inside: its size, /dev/tty,
that it is the terminal's foreground group, a terminal query answered through the PTY,
an OSC 7501 report, and ^C delivered to it (not to the sandbox around it)."""

from __future__ import annotations

import os
import select
import signal
import sys
import termios
import tty


def _cursor_report() -> str:
    """Ask the terminal where the cursor is (CSI 6n) and read its answer from stdin."""
    saved = termios.tcgetattr(0)
    tty.setraw(0)
    try:
        os.write(1, b"\x1b[6n")
        answer = b""
        while not answer.endswith(b"R"):
            ready, _, _ = select.select([0], [], [], 5)
            if not ready:
                return "no answer"
            answer += os.read(0, 32)
        return "answered" if answer.startswith(b"\x1b[") else f"odd {answer!r}"
    finally:
        termios.tcsetattr(0, termios.TCSADRAIN, saved)


def main() -> None:
    size = os.get_terminal_size(0)
    print(f"size {size.lines} {size.columns}", flush=True)
    with open("/dev/tty", "w") as terminal:
        terminal.write("tty writable\n")
    foreground = os.tcgetpgrp(0) == os.getpgrp()
    print(f"foreground {'yes' if foreground else 'no'}", flush=True)
    print(f"query {_cursor_report()}", flush=True)

    def interrupted(_sig: int, _frame: object) -> None:
        print("got INT", flush=True)

    signal.signal(signal.SIGINT, interrupted)
    sys.stdout.write("\x1b]7501;state=idle\x07")
    print("ready", flush=True)
    while True:
        signal.pause()


if __name__ == "__main__":
    main()
