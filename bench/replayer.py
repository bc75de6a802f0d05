"""Replay a recorded terminal stream in real time, over and over (standard library only).

``python bench/replayer.py STREAM.bin STREAM.json``: writes each chunk of the recording
(``chunks``: ``[t, end_offset]``) at its recorded time, then starts again after the
recording's ``duration``. The terminal is in raw mode, as the recorded TUI had it, and
what the terminal answers (query replies) is read and dropped while waiting.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import sys
import time
import tty


def _wait_until(deadline: float) -> None:
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([0], [], [], left)
        if ready:
            with contextlib.suppress(OSError):
                os.read(0, 4096)


def main() -> int:
    with open(sys.argv[1], "rb") as stream:
        data = stream.read()
    with open(sys.argv[2]) as recording:
        meta = json.load(recording)
    chunks = [(float(t), int(end)) for t, end in meta["chunks"]]
    duration = max(float(meta["duration"]), chunks[-1][0])
    tty.setraw(0)
    os.set_blocking(0, False)
    while True:
        start = time.monotonic()
        at = 0
        for t, end in chunks:
            _wait_until(start + t)
            os.write(1, data[at:end])
            at = end
        _wait_until(start + duration + 0.05)


if __name__ == "__main__":
    sys.exit(main())
