"""The supervisor's fd limit and the host capacity the doctor reports, on this host."""

from __future__ import annotations

import json
import resource
import subprocess
import sys

from supervisor.workers.host_limits import capacity, fd_limit_needed
from tests.conftest import REPO

PROBE = """
import json, resource, sys
from supervisor.workers.host_limits import raise_fd_limit
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), hard))
first = raise_fd_limit(int(sys.argv[2]))
again = raise_fd_limit(1)
print(json.dumps([first.before, first.soft, first.hard, again.soft]))
"""


def _probe(soft: int, max_panes: int) -> list[int]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(soft), str(max_panes)],
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return list(json.loads(done.stdout))


def test_the_soft_fd_limit_is_raised_to_what_max_panes_needs_within_the_hard_one() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    before, soft, got_hard, again = _probe(256, 1000)
    assert (before, got_hard) == (256, hard)
    want = fd_limit_needed(1000)
    assert soft == (want if hard == resource.RLIM_INFINITY else min(want, hard))
    # Never lowered: a smaller max_panes later keeps the raised limit.
    assert again == soft


def test_a_soft_limit_above_the_need_is_kept() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    start = min(hard, fd_limit_needed(8) + 100)
    before, soft, _hard, _again = _probe(start, 8)
    assert before == soft == start


def test_capacity_names_each_limit_smallest_first() -> None:
    bounds = capacity()
    names = {b.name for b in bounds}
    assert {"fds", "ptys", "pid_max", "threads-max", "memory"} <= names, names
    assert [b.panes for b in bounds] == sorted(b.panes for b in bounds)
    assert all(b.panes >= 0 and b.detail for b in bounds)
