"""A pane program for the status-latency benchmark (standard library only).

It reports ``idle`` over OSC 7501 at once; for every line it reads it waits 30 ms (so
the benchmark's ``wait_status`` is surely pending), reports ``working``, waits 100 ms,
reports ``idle``. Just before each report it appends ``<state> <time.monotonic()>`` to
the file named by its argument: the clock is the system's, the same in every process.
"""

from __future__ import annotations

import os
import sys
import time

PENDING_S = 0.03
TURN_S = 0.1


def report(state: str, log: object) -> None:
    stamp = time.monotonic()
    os.write(1, f"\x1b]7501;state={state}:app=bench\x07".encode())
    log.write(f"{state} {stamp}\n")  # type: ignore[attr-defined]


def main() -> int:
    with open(sys.argv[1], "a", buffering=1) as log:
        report("idle", log)
        for _line in sys.stdin:
            time.sleep(PENDING_S)
            report("working", log)
            time.sleep(TURN_S)
            report("idle", log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
