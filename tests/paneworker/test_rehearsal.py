"""The template's dress rehearsal leaves nothing behind in the process that plays it.

A fresh interpreter plays ``rehearse`` (a real pane: its program on a PTY, its ZeroMQ
link to a ROUTER, the worker's own loop) and reports what it holds before and after:
children, threads, descriptors, signal handlers, the wake-up descriptor, its process
name, the logging switch and the socket directory. A template forks right after, so
any of them left over would be in every worker (a ZeroMQ thread would not survive the
fork at all).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PLAY = r"""
import json, logging, os, signal, sys, threading
from paneworker.screen.emulator import EMULATORS, EmulatorUnavailable, check_available
from paneworker.procs.oscalls import OsCalls
from paneworker.template.rehearsal import WORKER_SIGNALS, rehearse

def wakeup_fd():
    fd = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(fd)
    return fd

def state():
    pid = os.getpid()
    with open(f"/proc/{pid}/task/{pid}/children") as listing:  # zombies included
        children = listing.read().split()
    return {
        "children": children,
        "threads": len(os.listdir("/proc/self/task")),
        "python_threads": threading.active_count(),
        "fds": sorted(os.listdir("/proc/self/fd")),
        "handlers": [repr(signal.getsignal(s)) for s in WORKER_SIGNALS],
        "wakeup": wakeup_fd(),
        "name": open("/proc/self/comm").read().strip(),
        "logging_disabled": logging.root.manager.disable,
        "socket_dir": sorted(os.listdir(sys.argv[1])),
    }

OsCalls().set_process_name("pw-rehearser")
wake_r, wake_w = os.pipe()
os.set_blocking(wake_w, False)
signal.set_wakeup_fd(wake_w)
before = state()
kinds = []
for kind in EMULATORS:
    try:
        check_available(kind)
    except EmulatorUnavailable:
        continue
    rehearse(kind, sys.argv[1])
    kinds.append(kind)
after = state()
print(json.dumps({"before": before, "after": after, "kinds": kinds}))
"""


@pytest.mark.timeout(60)
def test_a_rehearsal_leaves_the_process_as_it_found_it(tmp_path: Path) -> None:
    socket_dir = tmp_path / "s"
    socket_dir.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", PLAY, str(socket_dir)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    before, after = report["before"], report["after"]
    assert "pyte" in report["kinds"]
    # No program left, reaped or not; no ZeroMQ thread; no descriptor.
    assert after["children"] == [] == before["children"]
    assert after["threads"] == 1 and after["python_threads"] == 1
    assert after["fds"] == before["fds"]
    # The process's own settings, as they were.
    assert after["handlers"] == before["handlers"]
    assert after["wakeup"] == before["wakeup"] != -1
    assert after["name"] == before["name"] == "pw-rehearser"
    assert after["logging_disabled"] == before["logging_disabled"] == 0
    assert after["socket_dir"] == []
    # Quiet: a rehearsal's routine lines would read as a real pane's.
    assert "rehearsal" not in done.stderr
