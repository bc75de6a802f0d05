"""How a pane worker starts: ``python -m paneworker --boot-fd N``, or a template's fork.

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
from collections.abc import Callable
from typing import TYPE_CHECKING

from protocol import logjson
from protocol.boot import MAX_BOOT_BYTES, BootRecord, decode_boot

if TYPE_CHECKING:
    from paneworker.screen.emulator import ScreenModel

# Given the boot record, a blank screen the worker may adopt (the template's), or None.
SpareSource = Callable[[BootRecord], "ScreenModel | None"]

BOOT_READ_TIMEOUT_S = 10.0

log = logging.getLogger("paneworker")


def read_boot(fd: int, timeout_s: float = BOOT_READ_TIMEOUT_S) -> BootRecord:
    """Read the boot record until EOF on ``fd``; raises TimeoutError or ValueError."""
    return decode_boot(read_all(fd, timeout_s))


def read_all(fd: int, timeout_s: float) -> bytes:
    """Read ``fd`` until EOF (bounded by ``MAX_BOOT_BYTES`` and a deadline), then close it.

    Raises:
        TimeoutError: no EOF before the deadline.
        ValueError: more than ``MAX_BOOT_BYTES``.
    """
    chunks: list[bytes] = []
    size = 0
    deadline = time.monotonic() + timeout_s
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no boot record from the supervisor")
            # poll, not select: a cold-started worker inherits the supervisor's fd number,
            # above FD_SETSIZE (1024) once the supervisor holds ~500 panes.
            if not poller.poll(max(1, int(remaining * 1000))):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            size += len(chunk)
            if size > MAX_BOOT_BYTES:
                raise ValueError("boot record too large")
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def run_worker(
    boot_fd: int, configure_logging: bool = True, spares: SpareSource | None = None
) -> int:
    """Read the boot record from ``boot_fd``, start the pane and run its loop.

    The one way into a worker, whether started by itself (``main``) or forked from the
    worker template (whose logging, the same, it keeps: ``configure_logging=False``,
    and whose blank screens it may adopt: ``spares``).
    """
    if configure_logging:
        logjson.configure(os.environ.get("PANEWARDEN_LOG_LEVEL", "INFO"))
    try:
        boot = read_boot(boot_fd)
    except (TimeoutError, ValueError, OSError) as exc:
        log.error("cannot read the boot record: %s", exc)
        return 2
    # Imported late: a bad boot record should fail fast without loading pyte/zmq.
    from paneworker.loop.worker import PaneWorker

    spare = spares(boot) if spares is not None else None
    if spare is not None:
        log.debug(
            "adopting the template's blank %s screen, %dx%d",
            boot.launch.emulator,
            boot.launch.cols,
            boot.launch.rows,
            extra={"pane": boot.launch.pane},
        )
    return PaneWorker(boot, spare).run()


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments and run the worker."""
    parser = argparse.ArgumentParser(prog="paneworker")
    parser.add_argument("--boot-fd", type=int, required=True)
    args = parser.parse_args(argv)
    return run_worker(args.boot_fd)


if __name__ == "__main__":
    sys.exit(main())
