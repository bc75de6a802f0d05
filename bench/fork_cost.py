"""What a worker forked from the template pays for in private memory, part by part.

``python -m bench.fork_cost``: this process plays the template (imports, warms up,
rehearses and lays out the worker code, builds a spare screen and settles its heap as
``paneworker.template.process`` does, then freezes the collector), and forks one child per part.
Each child builds only that part (nothing; a ZeroMQ context with a DEALER socket; the
pane's terminal at the default 120x40, built or adopted from the spare; a program
spawned on a PTY; all of them),
waits, and its dirty private memory (``Private_Dirty`` of ``/proc/<pid>/smaps_rollup``:
pages it wrote and so no longer shares with the template; clean pages that only it maps
happen to be private here but are shared by the many workers of a real service) is read. The
median over ``--repeats`` children is printed per part. This explains the PSS of an idle
worker (``python -m bench --only idle``); it is not a figure with a goal.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import signal
import statistics
import time
from collections.abc import Callable

import zmq

from paneworker.procs.program import Program
from paneworker.screen.emulator import open_model
from paneworker.template.process import PRELOAD, preload, rehearse_and_lay_out, settle_heap, warm_up
from paneworker.template.spares import SPARE_HISTORY_LINES

SETTLE_S = 1.0
COLS, ROWS = 120, 40


def _zeromq() -> object:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.connect(f"ipc:///nonexistent/panewarden-fork-cost-{os.getpid()}")
    return ctx, sock


def _terminal() -> object:
    return open_model("pyte", COLS, ROWS, SPARE_HISTORY_LINES)


def _program() -> object:
    return Program(["/bin/sleep", "60"], "/", {"PATH": "/bin:/usr/bin"}, 80, 24)


def parts(spare: object) -> dict[str, Callable[[], list[object]]]:
    """What each child builds, by name (``spare``: a screen the template built)."""
    return {
        "fork alone": lambda: [],
        "ZeroMQ context + socket": lambda: [_zeromq()],
        f"terminal model {COLS}x{ROWS} (pyte), built": lambda: [_terminal()],
        f"terminal model {COLS}x{ROWS} (pyte), adopted": lambda: [spare],
        "program on a PTY": lambda: [_program()],
        "all of the above (terminal built)": lambda: [_zeromq(), _terminal(), _program()],
    }


def private_kib(pid: int) -> int:
    """Pages ``pid`` wrote and shares with no one, in KiB."""
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith("Private_Dirty:"):
                return int(line.split()[1])
    return 0


def measure(build: Callable[[], list[object]]) -> int:
    """Fork a child that builds one part and reads its own private dirty KiB.

    The child measures itself while this process waits in one blocking read: a template
    that ran Python code meanwhile would write to pages it shares with the child, and
    every such page would count as the child's (the old copy is left to it alone).
    """
    result_r, result_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: build, settle, measure, report
        code = 0
        try:
            os.close(result_r)
            gc.enable()
            kept = build()
            time.sleep(SETTLE_S)
            os.write(result_w, b"%d" % private_kib(os.getpid()))
            del kept
        except BaseException:
            code = 1
        os._exit(code)
    os.close(result_w)
    try:
        with os.fdopen(result_r, "rb") as result:
            answer = result.read()
        if not answer:
            raise RuntimeError("the child failed to build its part")
        return int(answer)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # its PTY closes: a program gets SIGHUP
        os.waitpid(pid, 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fork_cost", description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    gc.disable()
    preload([])
    warm_up([])
    laid_out = rehearse_and_lay_out(["pyte"])
    spare = _terminal()  # as SpareScreens.build makes it
    kept = settle_heap(laid_out)
    gc.freeze()
    print(f"template: {', '.join(PRELOAD)} imported, rehearsed; {args.repeats} children each")
    floor = None
    for name, build in parts(spare).items():
        kib = statistics.median(measure(build) for _ in range(max(1, args.repeats)))
        floor = kib if floor is None else floor
        extra = "" if kib == floor else f"  (+{(kib - floor) / 1024:.2f} MiB)"
        print(f"{name:40s} {kib / 1024:6.2f} MiB private dirty{extra}")
    del kept  # held until the children were measured: freed, it would leave holes
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
