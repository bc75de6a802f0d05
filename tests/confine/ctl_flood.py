"""A confined pane's program that floods the ctl socket with idle connections.

``ctl_flood.py COUNT SILENT RESULTS``: opens COUNT connections to ``$PANEWARDEN_CTL_SOCKET``
(raising its own descriptor limit first), sends nothing, and collects what the service
says on each within a deadline (until all but SILENT are answered): refused ones are
answered at once. Writes
``RESULTS.connected`` once every connection is made, then ``{"connected",
"connect_errors", "answers": {code: n}}`` to RESULTS (atomically), keeps
every connection open, and waits for input. Standard library only.
"""

from __future__ import annotations

import json
import os
import resource
import selectors
import socket
import sys
import time

SETTLE_S = 20.0
CONNECT_S = 10.0


def _connect(sock: socket.socket, path: str) -> None:
    """Connect, waiting (bounded) while the listener's backlog is full (``EAGAIN``)."""
    sock.setblocking(False)
    deadline = time.monotonic() + CONNECT_S
    while True:
        try:
            sock.connect(path)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.005)  # the backlog drains as the service accepts


def main() -> None:
    count, silent, results_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < count + 64 <= hard or hard == resource.RLIM_INFINITY:
        resource.setrlimit(resource.RLIMIT_NOFILE, (count + 64, hard))
    path = os.environ["PANEWARDEN_CTL_SOCKET"]
    sockets: list[socket.socket] = []
    errors: dict[str, int] = {}
    for _ in range(count):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            _connect(sock, path)
        except OSError as exc:
            errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
            sock.close()
            continue
        sockets.append(sock)
    # Connected (and held): the test may now check the service still serves its client.
    with open(results_path + ".connected", "w") as handle:
        handle.write(str(len(sockets)))
    answers: dict[str, int] = {}
    selector = selectors.DefaultSelector()
    for sock in sockets:
        selector.register(sock, selectors.EVENT_READ, bytearray())
    deadline = time.monotonic() + SETTLE_S
    # Answered connections say so within the deadline; admitted idle ones stay silent
    # until the service's request timeout, later than this waits once all but those
    # few are answered.
    while selector.get_map() and time.monotonic() < deadline:
        if sum(answers.values()) >= len(sockets) - silent:
            break
        for key, _ in selector.select(timeout=0.5):
            peer, buffered = key.fileobj, key.data
            assert isinstance(peer, socket.socket)
            try:
                chunk = peer.recv(4096)
            except OSError:
                chunk = b""
            buffered.extend(chunk)
            if not chunk or b"\n" in buffered:
                selector.unregister(peer)
                line = bytes(buffered).split(b"\n", 1)[0]
                try:
                    code = str(json.loads(line)["error"]["code"])
                except (ValueError, KeyError, TypeError):
                    code = "no-answer"
                answers[code] = answers.get(code, 0) + 1
    with open(results_path + ".tmp", "w") as handle:
        json.dump({"connected": len(sockets), "connect_errors": errors, "answers": answers}, handle)
    os.replace(results_path + ".tmp", results_path)
    print("flood done", flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()
