"""The worker reads its boot record from whatever fd it was given, however high."""

from __future__ import annotations

import os
import resource

import pytest

from paneworker.loop.entry import read_all

HIGH_FD = 1500  # above FD_SETSIZE (1024): what select() refuses


@pytest.mark.timeout(10)
def test_a_boot_fd_above_fd_setsize_is_read() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= HIGH_FD:
        pytest.skip(f"the hard fd limit ({hard}) allows no fd {HIGH_FD}")
    if soft != resource.RLIM_INFINITY and soft <= HIGH_FD:
        resource.setrlimit(resource.RLIMIT_NOFILE, (HIGH_FD + 1, hard))
    r, w = os.pipe()
    try:
        os.dup2(r, HIGH_FD)
        os.write(w, b"boot record")
        os.close(w)
        w = -1
        assert read_all(HIGH_FD, 5.0) == b"boot record"
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
