"""How soon ``serve --stdio`` answers ``initialize`` and ``tools/list``, from its spawn.

A client that starts panewarden on demand (Codex: its first model request ~1.1 s after
spawning its MCP servers) has its tools only if both answers come before that. Each run
spawns ``python -m supervisor serve --stdio`` on a fresh state dir with the
``initialize`` request already in its stdin, and reads the answers: the time from the
spawn to the ``initialize`` answer, and to the ``tools/list`` answer. The reference,
alternating with it in the same run, is the bare SDK echo server
(``bench.echo_server``): the SDK's own import is the floor of both.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.core import Figure, Options
from bench.service import REPO, bench_environ

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
DEADLINE_S = 60.0


def _read_answer(proc: subprocess.Popen[bytes], want_id: int, deadline: float) -> None:
    """Read stdout lines until the answer to ``want_id``."""
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("the server closed stdout before answering")
        if json.loads(line).get("id") == want_id:
            return
    raise TimeoutError(f"no answer to request {want_id}")


def time_answers(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(ms to the initialize answer, ms to the tools/list answer) from the spawn."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=str(REPO),
    )
    assert proc.stdin is not None
    try:
        proc.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
        proc.stdin.flush()
        deadline = time.monotonic() + DEADLINE_S
        _read_answer(proc, 1, deadline)
        t1 = time.perf_counter()
        proc.stdin.write((json.dumps(INITIALIZED) + "\n" + json.dumps(TOOLS_LIST) + "\n").encode())
        proc.stdin.flush()
        _read_answer(proc, 2, deadline)
        t2 = time.perf_counter()
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return (t1 - t0) * 1000, (t2 - t0) * 1000


def run(options: Options) -> Sequence[Figure]:
    runs = 2 if options.smoke else max(5, 2 * options.repeats)
    ours_init: list[float] = []
    ours_list: list[float] = []
    echo_init: list[float] = []
    echo_list: list[float] = []
    base = bench_environ() | {"PANEWARDEN_LOG_LEVEL": "WARNING"}
    with tempfile.TemporaryDirectory(prefix="pwinit-") as tmp:
        for i in range(runs):
            state = Path(tmp) / f"s{i}"
            state.mkdir(mode=0o700)
            env = base | {"PANEWARDEN_STATE_DIR": str(state)}
            init, listed = time_answers(
                [sys.executable, "-m", "supervisor", "serve", "--stdio"], env
            )
            ours_init.append(init)
            ours_list.append(listed)
            init, listed = time_answers([sys.executable, "-m", "bench.echo_server"], base)
            echo_init.append(init)
            echo_list.append(listed)
    note = f"{runs} spawns each, alternating; {os.cpu_count()} CPUs"
    return [
        Figure(
            "initialize.spawn_to_initialize",
            "ms",
            ours_init,
            reference="bare SDK echo server",
            reference_values=echo_init,
            goal="≤ 500 ms",
            limit=500.0,
            limit_on_ratio=False,
            note=note,
        ),
        Figure(
            "initialize.spawn_to_tools_list",
            "ms",
            ours_list,
            reference="bare SDK echo server",
            reference_values=echo_list,
            note="the service is started and its tools installed by then",
        ),
    ]
