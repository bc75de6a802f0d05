"""A probe run as a confined pane's program: it tries each thing ``checks.json`` (in its
cwd) lists and writes what the kernel said to ``results.json`` (atomically), then waits
for input so the pane stays up. Standard library only: it runs inside the sandbox."""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Callable


def _outcome(action: Callable[[str], object], arg: str) -> str:
    try:
        value = action(arg)
    except OSError as exc:
        return f"{type(exc).__name__}:{exc.errno}"
    return f"ok:{value}"


def _read(path: str) -> object:
    with open(path, "rb") as handle:
        return len(handle.read())


def _list(path: str) -> object:
    return len(os.listdir(path))


def _write(path: str) -> object:
    with open(path, "w") as handle:
        return handle.write("probe")


def _connect_unix(path: str) -> object:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(path)
    return "connected"


def _connect_tcp(address: str) -> object:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"ping\n")
        return sock.recv(64).decode(errors="replace").strip()


def _signal(pid: str) -> object:
    os.kill(int(pid), 0)
    return "alive"


def _pids(_arg: str) -> object:
    return len([name for name in os.listdir("/proc") if name.isdigit()])


def _daemon(marker: str) -> object:
    # Double fork with setsid: the daemon leaves the pane's session and process group.
    first = os.fork()
    if first == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", marker])
        os._exit(0)
    os.waitpid(first, 0)
    return "started"


def _run(argv_json: str) -> object:
    import subprocess

    done = subprocess.run(json.loads(argv_json), capture_output=True, text=True, timeout=60)
    return f"rc={done.returncode} {done.stdout.strip()[:400]} {done.stderr.strip()[:200]}"


ACTIONS: dict[str, Callable[[str], object]] = {
    "run": _run,
    "read": _read,
    "list": _list,
    "write": _write,
    "connect_unix": _connect_unix,
    "connect_tcp": _connect_tcp,
    "signal": _signal,
    "pids": _pids,
    "daemon": _daemon,
}


def main() -> None:
    with open("checks.json") as handle:
        checks = json.load(handle)
    results: dict[str, str] = {}
    for name, (kind, arg) in checks.items():
        results[name] = _outcome(ACTIONS[kind], str(arg))
    results["env_ctl"] = os.environ.get("PANEWARDEN_CTL_SOCKET", "")
    with open("results.json.tmp", "w") as handle:
        json.dump(results, handle)
    os.replace("results.json.tmp", "results.json")
    print("probe done", flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()
