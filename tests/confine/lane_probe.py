"""A stand-in agent run as a lane pane's program, inside its sandbox: it does each thing it
is told and writes what the kernel (or the program it ran) said to a results file
(atomically), then waits for input so the pane stays up. Standard library only.

``lane_probe.py CHECKS RESULTS``: the checks are a JSON list of ``[name, kind, arg]``.
``lane_probe.py --obey RESULTS``: an agent that obeys what it reads: every line of the
``README.md`` in its cwd of the form ``AGENT: name kind <JSON arg>`` is a check (the prompt
injection a reviewer meets in the repository it reviews).

Kinds: ``read``, ``list``, ``write`` (``errno`` on failure, ``ok:...`` otherwise),
``connect_unix``, and ``run`` (``arg`` an argv, or ``{"argv": [...], "env": {...}}``):
``rc:<status>:<stderr>``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from typing import Any

RUN_TIMEOUT_S = 30
PREFIX = "AGENT: "


def _read(path: object) -> object:
    with open(str(path), "rb") as handle:
        return len(handle.read())


def _list(path: object) -> object:
    return len(os.listdir(str(path)))


def _write(path: object) -> object:
    with open(str(path), "w") as handle:
        return handle.write("probe\n")


def _connect_unix(path: object) -> object:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(str(path))
    return "connected"


def _run(arg: object) -> object:
    spec: dict[str, Any] = arg if isinstance(arg, dict) else {"argv": arg, "env": {}}
    env = {**os.environ, **spec.get("env", {})}
    done = subprocess.run(
        list(spec["argv"]),
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    raise _Ran(done.returncode, done.stderr.decode(errors="replace").strip())


class _Ran(Exception):
    def __init__(self, status: int, stderr: str) -> None:
        super().__init__(status, stderr)
        self.text = f"rc:{status}:{stderr}"


ACTIONS: dict[str, Callable[[object], object]] = {
    "read": _read,
    "list": _list,
    "write": _write,
    "connect_unix": _connect_unix,
    "run": _run,
}


def _outcome(kind: str, arg: object) -> str:
    try:
        value = ACTIONS[kind](arg)
    except _Ran as ran:
        return ran.text
    except OSError as exc:
        return f"{type(exc).__name__}:{exc.errno}"
    return f"ok:{value}"


def _instructions() -> list[list[object]]:
    checks: list[list[object]] = []
    with open("README.md") as handle:
        for line in handle:
            if line.startswith(PREFIX):
                name, kind, arg = line[len(PREFIX) :].strip().split(" ", 2)
                checks.append([name, kind, json.loads(arg)])
    return checks


def main() -> None:
    if sys.argv[1] == "--obey":
        checks = _instructions()
    else:
        with open(sys.argv[1]) as handle:
            checks = json.load(handle)
    results_path = sys.argv[2]
    results = {str(name): _outcome(str(kind), arg) for name, kind, arg in checks}
    with open(results_path + ".tmp", "w") as handle:
        json.dump(results, handle)
    os.replace(results_path + ".tmp", results_path)
    print("probe done", flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()
