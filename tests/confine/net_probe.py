"""A probe of a confined pane's network, run as its program: it tries each thing
``checks.json`` (in its cwd) lists and writes what happened to ``results.json``
(atomically), then waits for input so the pane stays up. Standard library only: it runs
inside the sandbox.

Checks: ``tcp HOST:PORT`` (send ``ping``, what comes back), ``abstract NAME`` (connect
to the abstract Unix socket ``@NAME``), ``proxy HOST:PORT`` (an HTTP ``CONNECT`` through
``$HTTPS_PROXY``: its status line, then ``ping`` echoed through it when it is 200),
``get URL`` (an absolute-URI request through ``$HTTP_PROXY``: the status line and the
body), ``env NAME``, ``caps`` (the capability sets and ``NoNewPrivs``) and ``run ARGV``
(a JSON argv: ``rc=N``, then its stdout and stderr).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from urllib.parse import urlsplit

TIMEOUT_S = 10


def _outcome(action: Callable[[str], object], arg: str) -> str:
    try:
        value = action(arg)
    except OSError as exc:
        return f"{type(exc).__name__}:{exc.errno}"
    return f"ok:{value}"


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def _tcp(address: str) -> object:
    with socket.create_connection(_split(address), timeout=TIMEOUT_S) as sock:
        sock.sendall(b"ping")
        sock.shutdown(socket.SHUT_WR)
        return _read_all(sock).decode(errors="replace")


def _abstract(name: str) -> object:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(TIMEOUT_S)
        sock.connect("\0" + name)
    return "connected"


def _proxy_socket(variable: str) -> socket.socket:
    url = urlsplit(os.environ.get(variable, ""))
    if url.hostname is None or url.port is None:
        raise OSError(f"no proxy in {variable}")
    return socket.create_connection((url.hostname, url.port), timeout=TIMEOUT_S)


def _proxy(target: str) -> object:
    with _proxy_socket("HTTPS_PROXY") as sock:
        sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        head = _read_head(sock)
        status = head.split(b"\r\n", 1)[0].decode()
        if " 200 " not in status:
            return status
        sock.sendall(b"ping")
        sock.shutdown(socket.SHUT_WR)
        return f"{status} | {_read_all(sock).decode(errors='replace')}"


def _get(url: str) -> object:
    with _proxy_socket("HTTP_PROXY") as sock:
        host = urlsplit(url).netloc
        sock.sendall(f"GET {url} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        sock.shutdown(socket.SHUT_WR)
        reply = _read_all(sock).decode(errors="replace")
        return reply.split("\r\n", 1)[0] + " | " + reply.rpartition("\r\n\r\n")[2]


def _env(name: str) -> object:
    return os.environ.get(name, "")


def _caps(_arg: str) -> object:
    with open("/proc/self/status") as status:
        lines = [line.split() for line in status if line.startswith(("Cap", "NoNewPrivs"))]
    return " ".join(f"{name}{value}" for name, value in lines)


def _run(argv_json: str) -> object:
    done = subprocess.run(
        json.loads(argv_json), capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    return f"rc={done.returncode} {done.stdout.strip()} {done.stderr.strip()}"


def _read_head(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data and len(data) < 65536:
        chunk = sock.recv(1)
        if not chunk:
            break
        data += chunk
    return data


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while data := sock.recv(65536):
        chunks.append(data)
    return b"".join(chunks)


ACTIONS: dict[str, Callable[[str], object]] = {
    "tcp": _tcp,
    "abstract": _abstract,
    "proxy": _proxy,
    "get": _get,
    "env": _env,
    "caps": _caps,
    "run": _run,
}


def main() -> None:
    with open("checks.json") as handle:
        checks = json.load(handle)
    results = {name: _outcome(ACTIONS[kind], str(arg)) for name, (kind, arg) in checks.items()}
    with open("results.json.tmp", "w") as handle:
        json.dump(results, handle)
    os.replace("results.json.tmp", "results.json")
    print("probe done", flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()
