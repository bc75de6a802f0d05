"""A dress rehearsal of one pane, played by the worker template before its first fork.

A worker forked from the template shares the template's pages until it writes to them,
and CPython writes wherever it runs code for the first time: a class's shared
instance-attribute keys are built (taking a reference to every attribute name) when
its first instance is made, a function's bytecode is specialised in place after a few
calls, and ZeroMQ's option and socket-type enums fill their lookup caches. Done in each
worker, every such write copies a page the template shares (a worker dirtied some
4.3 MiB this way); done once here, the pages stay shared.

So the template starts one real pane in its own process, the way a worker does
(:class:`~paneworker.loop.worker.PaneWorker`, with its program on a PTY, its screen and its
ZeroMQ link to a ROUTER played by this module over a private ``ipc://`` socket), sends
it the requests a supervisor sends (hello, ping, status, input, screen reads, a resize,
a close), and runs the worker's own loop until the close ends it. Nothing of it is
left: the program is killed and reaped by the worker's close, both ZeroMQ contexts are
terminated (so no ZeroMQ thread exists at a fork), every descriptor is closed, and the
socket's directory is removed. A timer ends the loop if the rehearsal stalls, so the
template's start is bounded whatever happens.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import tempfile
from collections.abc import Iterator

import zmq

from paneworker.loop.worker import PaneWorker
from paneworker.procs.oscalls import OsCalls
from protocol import PROTOCOL_VERSION
from protocol.boot import BootRecord, PaneLaunch
from protocol.framing import Codec
from protocol.messages import (
    Close,
    Heartbeat,
    Hello,
    Introduce,
    Ping,
    ReadScreen,
    Resize,
    ToWorker,
    WriteInput,
)

# The longest the rehearsal may take before its loop is stopped.
REHEARSAL_TIMEOUT_S = 5.0
# What the rehearsal's pane runs: a status report over OSC 7501, then an echoing cat.
REHEARSAL_ARGV = ["/bin/sh", "-c", "printf '\\033]7501;state=idle:app=rehearsal\\007> '; exec cat"]
REHEARSAL_PANE = "rehearsal"


def rehearse(emulator: str, socket_dir: str | None = None, cols: int = 200, rows: int = 50) -> None:
    """Run one pane of ``emulator`` through a short session in this process.

    Its ZeroMQ socket lives in a fresh directory under ``socket_dir`` (the template's
    own, whose paths are known to be short enough; the temporary directory if None).
    Raises whatever the rehearsal hit (the template logs it and carries on: a worker
    does all of this for itself if need be).
    """
    with (
        tempfile.TemporaryDirectory(prefix="pw-rehearsal-", dir=socket_dir) as tmp,
        _quiet_logs(),
        _router(f"ipc://{tmp}/link") as (router, endpoint),
    ):
        boot = BootRecord(
            protocol_version=PROTOCOL_VERSION,
            instance=REHEARSAL_PANE,
            secret=os.urandom(32),
            endpoint=endpoint,
            launch=PaneLaunch(
                pane=REHEARSAL_PANE,
                agent="generic",
                argv=REHEARSAL_ARGV,
                cwd="/",
                env={"PATH": os.defpath},
                cols=cols,
                rows=rows,
                emulator=emulator,
                kill_grace_s=0.5,
                rules_dir=tmp,
            ),
        )
        with _signals_restored(), _process_name_restored():
            worker = PaneWorker(boot)
            try:
                _play(worker, router)
            finally:
                if worker.running:  # the loop never ran: close what __init__ opened
                    worker.running = False
                    worker._shutdown()


def _play(worker: PaneWorker, router: zmq.Socket[bytes]) -> None:
    codec = Codec()
    worker.link.send(worker.hello())
    if not router.poll(int(REHEARSAL_TIMEOUT_S * 1000)):
        raise TimeoutError("the rehearsal pane never said hello")
    peer, frame = router.recv_multipart()
    if not isinstance(codec.decode_to_supervisor(frame), Hello):
        raise RuntimeError("the rehearsal pane did not open with hello")
    script: list[ToWorker] = [
        Ping(rid=1),
        Heartbeat(),
        Introduce(),
        ReadScreen(rid=2, lines=10),
        WriteInput(rid=3, text="hello", submit=True),
        Resize(rid=4, cols=worker.boot.launch.cols - 1, rows=worker.boot.launch.rows - 1),
        ReadScreen(rid=5, scrollback=True, since_input=0),
        Close(rid=6, capture_lines=5, grace_s=0.5),
    ]
    for msg in script:
        router.send_multipart([peer, codec.encode(msg)])
    with _deadline(worker, REHEARSAL_TIMEOUT_S):
        worker.run()
    while router.poll(0):  # what the worker answered: decoded as a supervisor would
        codec.decode_to_supervisor(router.recv_multipart()[1])


@contextlib.contextmanager
def _router(endpoint: str) -> Iterator[tuple[zmq.Socket[bytes], str]]:
    ctx = zmq.Context()
    try:
        router: zmq.Socket[bytes] = ctx.socket(zmq.ROUTER)
        try:
            router.setsockopt(zmq.LINGER, 0)
            router.bind(endpoint)
            yield router, endpoint
        finally:
            router.close(linger=0)
    finally:
        ctx.term()


@contextlib.contextmanager
def _deadline(worker: PaneWorker, seconds: float) -> Iterator[None]:
    """Stop the worker's loop after ``seconds`` (its loop wakes on any signal)."""

    def stop(_signum: int, _frame: object) -> None:
        worker.running = False

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# What a worker's loop installs handlers for, put back as they were after it.
WORKER_SIGNALS = (signal.SIGCHLD, signal.SIGWINCH, signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


@contextlib.contextmanager
def _signals_restored() -> Iterator[None]:
    saved = {sig: signal.getsignal(sig) for sig in WORKER_SIGNALS}
    wakeup = signal.set_wakeup_fd(-1)
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(wakeup)


@contextlib.contextmanager
def _process_name_restored() -> Iterator[None]:
    """A worker names its process ``pw-worker``; this process keeps its own name."""
    try:
        with open("/proc/self/comm", encoding="utf-8", errors="replace") as comm:
            name = comm.read().rstrip("\n")
    except OSError:
        name = ""
    try:
        yield
    finally:
        if name:
            with contextlib.suppress(OSError):
                OsCalls().set_process_name(name)


@contextlib.contextmanager
def _quiet_logs() -> Iterator[None]:
    """The rehearsal's routine INFO lines would read as a real pane's in the logs."""
    logging.disable(logging.INFO)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)
