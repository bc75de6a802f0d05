"""A pane program for the ctl tests: runs ``panewarden ctl`` commands on request.

Usage: ``python ctl_runner.py FIFO OUTDIR``. Each line written to FIFO is a JSON object
``{"id": ID, "argv": [...], "detach": false}``; the runner runs
``python -m supervisor ctl ARGV...`` as its child (or, with ``detach``, from a
grandchild it double-forks away, which the pane's worker — a subreaper — adopts) and
writes ``OUTDIR/ID.out``, ``ID.err`` and, last and atomically, ``ID.rc``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def run(request: dict[str, object], outdir: Path) -> None:
    ident = str(request["id"])
    words = request["argv"]
    assert isinstance(words, list)
    argv = [sys.executable, "-m", "supervisor", "ctl", *map(str, words)]
    with open(outdir / f"{ident}.out", "wb") as out, open(outdir / f"{ident}.err", "wb") as err:
        done = subprocess.run(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, check=False)
    tmp = outdir / f".{ident}.rc"
    tmp.write_text(str(done.returncode))
    tmp.rename(outdir / f"{ident}.rc")


def detached(request: dict[str, object], outdir: Path) -> None:
    child = os.fork()
    if child == 0:
        os.setsid()
        if os.fork() == 0:
            try:
                run(request, outdir)
            finally:
                os._exit(0)
        os._exit(0)
    os.waitpid(child, 0)


def main() -> None:
    fifo, outdir = sys.argv[1], Path(sys.argv[2])
    # Open for reading and writing: the runner never sees EOF between two test writes.
    fd = os.open(fifo, os.O_RDWR)
    with os.fdopen(fd, "rb") as requests:
        print("runner ready", flush=True)
        for line in requests:
            request = json.loads(line)
            if request.get("detach"):
                detached(request, outdir)
            else:
                run(request, outdir)


if __name__ == "__main__":
    main()
