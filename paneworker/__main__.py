"""Entry point of a pane worker process: ``python -m paneworker --boot-fd N``.

The boot record (secret and launch spec) is read from the inherited pipe ``N``,
never from argv or the environment.
"""

from __future__ import annotations

import argparse
import logging
import os
import select
import sys
import time

from protocol import logjson
from protocol.boot import BootRecord, decode_boot

BOOT_READ_TIMEOUT_S = 10.0

log = logging.getLogger("paneworker")


def read_boot(fd: int, timeout_s: float = BOOT_READ_TIMEOUT_S) -> BootRecord:
    """Read the boot record until EOF on ``fd``; raises TimeoutError or ValueError."""
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no boot record from the supervisor")
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    return decode_boot(b"".join(chunks))


def main(argv: list[str] | None = None) -> int:
    """Read the boot record, start the pane and run its loop."""
    parser = argparse.ArgumentParser(prog="paneworker")
    parser.add_argument("--boot-fd", type=int, required=True)
    args = parser.parse_args(argv)
    logjson.configure(os.environ.get("PANEWARDEN_LOG_LEVEL", "INFO"))
    try:
        boot = read_boot(args.boot_fd)
    except (TimeoutError, ValueError, OSError) as exc:
        log.error("cannot read the boot record: %s", exc)
        return 2
    # Imported late: a bad boot record should fail fast without loading pyte/zmq.
    from paneworker.worker import PaneWorker

    return PaneWorker(boot).run()


if __name__ == "__main__":
    sys.exit(main())
