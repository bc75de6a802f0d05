"""Produce tmux goldens for the recorded CLI byte streams under tests/captured.

For every ``<cli>/<scenario>.bin`` (with its ``.json`` from record_cli.py) this replays the
bytes into a detached tmux pane of the recorded size and writes what tmux shows:

- ``<scenario>.golden.txt`` / ``.golden.json``: after the whole stream;
- ``<scenario>.at<N>.golden.txt`` / ``.json``: after the first N bytes, for every mark the
  recorder took while the program ran (a trust prompt, a home screen, a menu). These matter
  most: after exit, full-screen CLIs leave the alternate screen and little is left to see.

The ``.txt`` has exactly ``rows`` lines, each right-stripped (tmux ``capture-pane -p``: the
visible screen, text only). The ``.json`` holds the 0-based ``cursor`` as ``[row, col]``,
``alternate_on``, ``cursor_visible``, ``cols``, ``rows`` and ``bytes`` (the N replayed).

The replay is a plain ``cat`` on a pane whose tty is ``stty raw -echo``: tmux sees the
exact bytes (no LF -> CRLF translation) and whatever it answers to the queries in the
stream lands unread in the pane's input, never on screen. The end of a replay is detected
by an OSC 2 title sentinel written after the bytes, which tmux only parses after everything
before it. A prefix that would end inside a UTF-8 character or an escape sequence is moved
back to the start of that unit, so the N in a file name is always a clean cut.

Usage: python -m tests.tools.make_goldens [--captured DIR] [--only CLI/SCENARIO] [--check]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.tools.record_cli import DEFAULT_OUT, Tokenizer

SENTINEL = "pwgold-replay-done"
FORMAT = (
    "#{pane_title}\t#{cursor_x}\t#{cursor_y}\t#{alternate_on}\t#{cursor_flag}"
    "\t#{pane_width}\t#{pane_height}"
)

TMUX_CONF = """\
set -g status off
set -g default-terminal "tmux-256color"
set -g history-limit 10000
set -g escape-time 0
set -g automatic-rename off
set -g allow-rename off
"""


def clean_cut(data: bytes, n: int) -> int:
    """The largest n' <= n such that data[:n'] ends outside any UTF-8 char or sequence."""
    tok = Tokenizer()
    tok.feed(data[:n])
    return max(n - tok.pending(), 0)


class Tmux:
    """A private tmux server for replays, killed on close."""

    def __init__(self) -> None:
        self.sock = f"pwgold-{os.getpid()}"
        self.tmp = Path(tempfile.mkdtemp(prefix="pwgold-"))
        self.conf = self.tmp / "tmux.conf"
        self.conf.write_text(TMUX_CONF)
        self.env = {**os.environ, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
        self.env.pop("TMUX", None)
        self.count = 0
        # A session that lives as long as the server: without it, killing the last replay
        # session makes the server exit while the next new-session may already be talking
        # to it ("server exited unexpectedly").
        self.run("new-session", "-d", "-s", "keep", "sleep 3600")
        self.socket_path = Path(self.run("display-message", "-p", "#{socket_path}").strip())

    def run(self, *args: str) -> str:
        cmd = ["tmux", "-u", "-L", self.sock, "-f", str(self.conf), *args]
        res = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=30)
        if res.returncode != 0:
            raise RuntimeError(f"{shlex.join(cmd)} failed: {res.stderr.strip()}")
        return res.stdout

    def replay(self, data: bytes, cols: int, rows: int) -> dict[str, Any]:
        self.count += 1
        name = f"r{self.count}"
        src = self.tmp / f"{name}.bin"
        src.write_bytes(data)
        script = (
            f"stty raw -echo; cat {shlex.quote(str(src))}; "
            f"printf '\\033]2;{SENTINEL}\\033\\\\'; exec sleep 600"
        )
        self.run("new-session", "-d", "-s", name, "-x", str(cols), "-y", str(rows), script)
        try:
            deadline = time.monotonic() + 30
            while True:
                fields = self.run("display-message", "-p", "-t", name, FORMAT).rstrip("\n")
                title = fields.split("\t")[0]
                if title == SENTINEL:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"tmux replay of {len(data)} bytes did not finish")
                time.sleep(0.05)
            text = self.run("capture-pane", "-p", "-t", name)
        finally:
            self.run("kill-session", "-t", name)
        _, cx, cy, alt, cflag, width, height = fields.split("\t")
        if (int(width), int(height)) != (cols, rows):
            raise RuntimeError(f"tmux pane is {width}x{height}, wanted {cols}x{rows}")
        lines = [line.rstrip() for line in text.split("\n")]
        lines = (lines + [""] * rows)[:rows]
        return {
            "text": "\n".join(lines) + "\n",
            "meta": {
                "cursor": [int(cy), int(cx)],
                "alternate_on": alt == "1",
                "cursor_visible": cflag == "1",
                "cols": cols,
                "rows": rows,
                "bytes": len(data),
            },
        }

    def close(self) -> None:
        subprocess.run(
            ["tmux", "-L", self.sock, "kill-server"], env=self.env, capture_output=True, check=False
        )
        # tmux 3.3a leaves its socket file behind after kill-server.
        self.socket_path.unlink(missing_ok=True)
        for p in self.tmp.iterdir():
            p.unlink()
        self.tmp.rmdir()


def goldens_for(bin_path: Path, tmux: Tmux) -> dict[str, tuple[str, str]]:
    """file stem -> (txt, json) for one recording."""
    meta = json.loads(bin_path.with_suffix(".json").read_text())
    data = bin_path.read_bytes()
    cols, rows = meta["cols"], meta["rows"]
    stem = bin_path.stem
    cuts: dict[int, list[str]] = {}
    for mark in meta.get("marks", []):
        n = clean_cut(data, mark["offset"])
        if 0 < n < len(data):
            cuts.setdefault(n, []).append(mark["name"])
    out = {}
    for n, names in sorted(cuts.items()):
        g = tmux.replay(data[:n], cols, rows)
        g["meta"]["marks"] = names
        out[f"{stem}.at{n}"] = g
    g = tmux.replay(data, cols, rows)
    if clean_cut(data, len(data)) != len(data):
        g["meta"]["ends_inside_sequence"] = True
    out[stem] = g
    return {
        k: (g["text"], json.dumps(g["meta"], ensure_ascii=False) + "\n") for k, g in out.items()
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--captured", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--only", help="CLI/SCENARIO")
    ap.add_argument("--check", action="store_true", help="compare with the files, write nothing")
    args = ap.parse_args(argv)
    bins = sorted(args.captured.glob("*/*.bin"))
    if args.only:
        bins = [b for b in bins if f"{b.parent.name}/{b.stem}" == args.only]
    tmux = Tmux()
    version = subprocess.run(["tmux", "-V"], capture_output=True, text=True).stdout.strip()
    differ = 0
    try:
        for b in bins:
            goldens = goldens_for(b, tmux)
            if args.check:
                for stem, (txt, js) in goldens.items():
                    t, j = b.parent / f"{stem}.golden.txt", b.parent / f"{stem}.golden.json"
                    same = t.exists() and t.read_text() == txt and j.exists()
                    same = same and json.loads(j.read_text()) == json.loads(js)
                    if not same:
                        differ += 1
                        print(f"DIFFERS {b.parent.name}/{stem}")
                continue
            # Drop goldens of marks that no longer exist before writing the new set.
            for old in b.parent.glob(f"{b.stem}.at*.golden.*"):
                old.unlink()
            for stem, (txt, js) in goldens.items():
                (b.parent / f"{stem}.golden.txt").write_text(txt)
                (b.parent / f"{stem}.golden.json").write_text(js)
            print(f"{b.parent.name}/{b.stem}: {len(goldens)} goldens ({version})", flush=True)
    finally:
        tmux.close()
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
