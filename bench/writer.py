"""A program that prints a file as fast as its terminal takes it, and times itself.

``writer.py STREAM GO_FIFO TIMING_FILE``: prints ``READY``, waits for a byte on the
FIFO (the benchmark starts its clock when it sends it), writes the whole stream,
stores the seconds its writes took in TIMING_FILE, then stays until killed so its
screen can be read.
"""

from __future__ import annotations

import os
import sys
import time


def main() -> None:
    stream, go, timing = sys.argv[1:4]
    data = open(stream, "rb").read()  # noqa: SIM115 - read whole before the clock starts
    os.write(1, b"READY\r\n")
    with open(go, "rb") as fifo:
        fifo.read(1)
    start = time.perf_counter()
    view = memoryview(data)
    while view:
        view = view[os.write(1, view[:65536]) :]
    elapsed = time.perf_counter() - start
    with open(timing + ".tmp", "w") as out:
        out.write(repr(elapsed))
    os.rename(timing + ".tmp", timing)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
