"""Zero bytes lost: what a program wrote equals, byte for byte, what the emulator parsed.

The worker's real output path (``ScreenState`` draining a real PTY, catching up in
batches) runs the realistic stream written by a program in raw mode (so the PTY
passes it unchanged), once with the default backlog bound and once with a 1 MiB
bound that forces the program to be throttled. The screen model's ``feed`` is
wrapped to hash what it is given; the final screen is compared with a full replay.
"""

from __future__ import annotations

import hashlib
import os
import select
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.core import Figure, Options
from bench.streams import COLS, ROWS, realistic_stream
from bench.throughput import installed_backends
from paneworker.procs.program import Program
from paneworker.screen.state import ScreenState
from paneworker.screen.terminal import Terminal
from paneworker.status.screen_rules import RuleSet
from protocol import PROTOCOL_VERSION
from protocol.boot import BootRecord, PaneLaunch

WRITER = r"""
import os, sys, tty
tty.setraw(1)
data = open(sys.argv[1], "rb").read()
view = memoryview(data)
while view:
    view = view[os.write(1, view[:65536]):]
"""


def _once(kind: str, path: Path, limit: int) -> tuple[bool, bool, bool]:
    """(checksum equal, screen equals replay, throttled) for one run."""
    argv = [sys.executable, "-c", WRITER, str(path)]
    env = {"PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8"}
    boot = BootRecord(
        protocol_version=PROTOCOL_VERSION,
        instance="i",
        secret=b"s",
        endpoint="ipc:///nonexistent",
        launch=PaneLaunch(
            pane="bench",
            agent="generic",
            argv=argv,
            cwd=str(path.parent),
            env=env,
            cols=COLS,
            rows=ROWS,
            emulator=kind,
            output_buffer_bytes=limit,
        ),
    )
    screen = ScreenState(boot, lambda _m: None, rules=RuleSet("none", 1, (), "bench"))
    model = screen.terminal._model
    digest = hashlib.sha256()
    real_feed = model.feed

    def feed(data: bytes) -> None:
        digest.update(data)
        real_feed(data)

    model.feed = feed  # type: ignore[method-assign]
    program = Program(argv, str(path.parent), env, COLS, ROWS)
    screen.attach(program)
    throttled = False
    deadline = time.monotonic() + 600
    try:
        while not program.eof and time.monotonic() < deadline:
            if screen.accepting_output:
                select.select([program.fd], [], [], 0 if screen.has_parse_work() else 0.05)
                screen.drain()
            else:
                throttled = True
            screen.after_step()
        screen.drain_to_end()
        screen.catch_up()
    finally:
        program.close()
    stream = path.read_bytes()
    replay = Terminal(COLS, ROWS, reply=lambda _b: None, on_report=lambda _r: None, emulator=kind)
    replay.feed(stream)
    same = replay.display_lines() == screen.terminal.display_lines()
    return digest.hexdigest() == hashlib.sha256(stream).hexdigest(), same, throttled


def run(options: Options) -> Sequence[Figure]:
    figures = []
    with tempfile.TemporaryDirectory(prefix="pwbench-") as tmp:
        path = Path(tmp) / "stream.bin"
        path.write_bytes(realistic_stream(options.stream_bytes))
        for kind in installed_backends():
            for label, limit in (("default bound", 32 * 1024 * 1024), ("1 MiB bound", 1 << 20)):
                equal, same, throttled = _once(kind, path, limit)
                suffix = "default" if limit > 1 << 20 else "1mib"
                figures.append(
                    Figure(
                        name=f"lossless.{kind}.{suffix}",
                        unit="ok",
                        values=[1.0 if equal and same else 0.0],
                        goal="= 1",
                        lower_is_better=False,
                        limit=1.0,
                        note=(
                            f"{label}: sha256 of what was fed "
                            f"{'equals' if equal else 'DIFFERS FROM'} what was written; "
                            f"final screen {'equals' if same else 'DIFFERS FROM'} a full replay; "
                            f"program {'was' if throttled else 'was not'} throttled"
                        ),
                    )
                )
    return figures
