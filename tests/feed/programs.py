"""A pane program for the feed tests: prints a marker with its own clock on demand and
records every byte it reads from its terminal.

Run as ``python tests/feed/programs.py LOG FIFO``: it puts the terminal in raw mode and
appends each byte it reads to LOG (so a test sees exactly what reached the pane); for
each line the test writes to the FIFO it prints ``MARK <n> <time.time()>`` in red.
"""

from __future__ import annotations

import os
import select
import sys
import termios
import time
import tty


def main() -> int:
    log_path, fifo_path = sys.argv[1], sys.argv[2]
    fd = sys.stdin.fileno()
    tty.setraw(fd, termios.TCSANOW)
    fifo = os.open(fifo_path, os.O_RDONLY | os.O_NONBLOCK)
    # Held open for writing too, so the FIFO never reports EOF between test writes.
    keep = os.open(fifo_path, os.O_WRONLY)
    count = 0
    sys.stdout.write("\x1b[1;32mready\x1b[0m\r\n")
    sys.stdout.flush()
    with open(log_path, "ab", buffering=0) as log:
        while True:
            ready, _, _ = select.select([fd, fifo], [], [])
            if fd in ready:
                data = os.read(fd, 4096)
                if not data:
                    break
                log.write(data)
            if fifo in ready:
                for _line in os.read(fifo, 4096).splitlines():
                    count += 1
                    sys.stdout.write(f"\x1b[31mMARK {count} {time.time():.6f}\x1b[0m\r\n")
                    sys.stdout.flush()
    os.close(keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
