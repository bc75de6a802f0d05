"""A program printing the realistic stream in a pane, against the same under tmux.

Per backend and per repeat: the program's own write time (it times its writes
itself); the time from the start signal until the final screen is visible (an
event-driven ``wait_output`` in panewarden; under tmux, ``capture-pane`` every 5 ms
once the program's writes are done, never during the burst, which it would slow);
whether the final screen equals a full replay of the stream; and the worker's peak
and final resident memory (``VmHWM``/``VmRSS``: the cost of the unparsed-output
backlog during the burst). Panewarden runs as the real service over MCP stdio. The
pane and tmux are both 200x50 with a UTF-8 locale.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

from bench.core import Figure, Options
from bench.service import bench_environ
from bench.streams import COLS, ROWS, realistic_stream
from bench.throughput import installed_backends
from paneworker.screen.terminal import Terminal

REPO = Path(__file__).resolve().parent.parent
WRITER = Path(__file__).resolve().parent / "writer.py"
MARKER = "END OF STREAM"
TIMEOUT_S = 300.0
# Start -> final screen against tmux's, per backend (issue 21; ghostty's floor is the
# program's own write time plus its parse, pyte's is its throughput).
FINAL_SCREEN_GOALS = {"ghostty": 0.6, "pyte": 2.0}


def _screen_text(lines: list[str]) -> str:
    rows = [line.rstrip() for line in lines]
    while rows and not rows[-1]:
        rows.pop()
    return "\n".join(rows)


def replay_text(kind: str, stream: bytes) -> str:
    """What the pane must show: READY, then the stream as the PTY passed it (ONLCR)."""
    term = Terminal(COLS, ROWS, reply=lambda _b: None, on_report=lambda _r: None, emulator=kind)
    term.feed(b"READY\r\n" + stream.replace(b"\n", b"\r\n"))
    return _screen_text(term.display_lines())


def _wait_file(path: Path, timeout_s: float) -> float:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.005)
    return float(path.read_text())


def _memory_kib(pid: int) -> tuple[int, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.split()[0] if value.split() else "0"
    return int(fields.get("VmHWM", 0)), int(fields.get("VmRSS", 0))


# -- tmux ------------------------------------------------------------------------------


def _tmux_once(work: Path, stream_path: Path, index: int) -> tuple[float, float]:
    socket = f"pwbench-{os.getpid()}-{index}"
    fifo = work / f"go-tmux-{index}"
    timing = work / f"timing-tmux-{index}"
    os.mkfifo(fifo)
    tmux = ["tmux", "-L", socket, "-f", "/dev/null"]
    command = f"{sys.executable} {WRITER} {stream_path} {fifo} {timing}"
    env = dict(os.environ, LANG="C.UTF-8", LC_ALL="C.UTF-8")
    subprocess.run(
        [*tmux, "-u", "new-session", "-d", "-x", str(COLS), "-y", str(ROWS), command],
        check=True,
        env=env,
    )
    try:
        capture = [*tmux, "capture-pane", "-p"]
        deadline = time.monotonic() + 30
        while "READY" not in subprocess.run(capture, capture_output=True, text=True).stdout:
            if time.monotonic() > deadline:
                raise TimeoutError("the writer never started under tmux")
            time.sleep(0.01)
        start = _send_go(fifo)
        # No capture-pane during the burst: each one makes the tmux server render the
        # pane, which would slow it down. Once the program's writes are done, tmux holds
        # at most what the PTY buffered; poll for the final screen from then on.
        write = _wait_file(timing, TIMEOUT_S)
        deadline = time.monotonic() + TIMEOUT_S
        while MARKER not in subprocess.run(capture, capture_output=True, text=True).stdout:
            if time.monotonic() > deadline:
                raise TimeoutError("tmux never showed the end of the stream")
            time.sleep(0.005)
        return write, time.perf_counter() - start
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, check=False)


def _send_go(fifo: Path) -> float:
    """Release the writer; returns the clock at the release."""
    with open(fifo, "wb") as go:
        start = time.perf_counter()
        go.write(b"g")
    return start


# -- panewarden --------------------------------------------------------------------------


async def _call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args, read_timeout_seconds=TIMEOUT_S)
    if result.is_error:
        raise RuntimeError(f"{tool}: {result.content}")
    return dict(result.structured_content or {})


async def _pane_runs(kind: str, work: Path, stream_path: Path, rounds: int) -> list[dict[str, Any]]:
    state = work / f"state-{kind}"
    state.mkdir()
    fifo_dir = work / f"fifos-{kind}"
    fifo_dir.mkdir()
    profile = {
        "name": "writer",
        "agent": "generic",
        "argv": [sys.executable, str(WRITER), str(stream_path), "GO", "TIMING"],
        "cwds": [str(work)],
    }
    runs: list[dict[str, Any]] = []
    for index in range(rounds):
        fifo = fifo_dir / f"go-{index}"
        timing = fifo_dir / f"timing-{index}"
        os.mkfifo(fifo)
        argv = [sys.executable, str(WRITER), str(stream_path), str(fifo), str(timing)]
        profiles = work / f"profiles-{kind}-{index}.json"
        profiles.write_text(json.dumps({"profiles": [{**profile, "argv": argv}]}))
        env = bench_environ() | {
            "PANEWARDEN_STATE_DIR": str(state),
            "PANEWARDEN_PROFILES": str(profiles),
            "PANEWARDEN_EMULATOR": kind,
            "PANEWARDEN_LOG_LEVEL": "WARNING",
        }
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "supervisor", "serve", "--stdio"],
            env=env,
            cwd=str(REPO),
        )
        async with Client(params) as client:
            pane = (
                await _call(client, "start_pane", name="w", profile="writer", cols=COLS, rows=ROWS)
            )["pane"]
            await _call(client, "wait_output", name="w", pattern="READY", timeout_s=60)
            # Blocks only until the writer, which printed READY, opens its end.
            start = _send_go(fifo)
            found = await _call(
                client, "wait_output", name="w", pattern=MARKER, timeout_s=TIMEOUT_S
            )
            visible = time.perf_counter() - start
            if not found.get("matched"):
                raise TimeoutError(f"{kind}: the end of the stream never showed")
            write = _wait_file(timing, 60)
            text = (await _call(client, "read_output", name="w"))["text"]
            peak_kib, rss_kib = _memory_kib(pane["worker_pid"])
            await _call(client, "remove_pane", name="w")
        runs.append(
            {"write": write, "visible": visible, "text": text, "peak": peak_kib, "rss": rss_kib}
        )
    return runs


def run(options: Options) -> Sequence[Figure]:
    stream = realistic_stream(options.stream_bytes)
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="pwbench-") as tmp:
        work = Path(tmp)
        stream_path = work / "stream.bin"
        stream_path.write_bytes(stream)
        tmux_write: list[float] = []
        tmux_visible: list[float] = []
        if shutil.which("tmux"):
            for index in range(options.rounds):
                write, visible = _tmux_once(work, stream_path, index)
                tmux_write.append(write)
                tmux_visible.append(visible)
        reference = "tmux" if tmux_write else None
        for kind in installed_backends():
            runs = asyncio.run(_pane_runs(kind, work, stream_path, options.rounds))
            expected = replay_text(kind, stream)
            same = [1.0 if r["text"] == expected else 0.0 for r in runs]
            figures += [
                Figure(
                    name=f"pane.{kind}.program_write_s",
                    unit="s",
                    values=[r["write"] for r in runs],
                    reference=reference,
                    reference_values=tmux_write,
                    goal="<= 1.1x tmux",
                    limit=1.1,
                ),
                Figure(
                    name=f"pane.{kind}.final_screen_s",
                    unit="s",
                    values=[r["visible"] for r in runs],
                    reference=reference,
                    reference_values=tmux_visible,
                    goal=f"<= {FINAL_SCREEN_GOALS[kind]:g}x tmux",
                    limit=FINAL_SCREEN_GOALS[kind],
                ),
                Figure(
                    name=f"pane.{kind}.screen_equals_replay",
                    unit="fraction",
                    values=same,
                    goal="= 1",
                    lower_is_better=False,
                    limit=1.0,
                ),
                Figure(
                    name=f"pane.{kind}.worker_peak_rss",
                    unit="MiB",
                    values=[r["peak"] / 1024 for r in runs],
                    note="VmHWM of the worker over the burst (backlog included)",
                ),
                Figure(
                    name=f"pane.{kind}.worker_rss_after",
                    unit="MiB",
                    values=[r["rss"] / 1024 for r in runs],
                    note="VmRSS once the final screen was read",
                ),
            ]
    return figures
