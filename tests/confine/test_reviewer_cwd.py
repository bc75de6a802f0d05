"""A read-only (reviewer) cwd never brings the host's ``/tmp`` back: a reviewer whose cwd
is ``/`` once had ``/`` bound read-only again over the whole sandbox, its private
``/tmp`` included, so the host's ``/tmp`` (other panes' files, sockets) was there. The
sandbox the confiner builds is run for real and lists its ``/tmp``."""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

import pytest

from supervisor.confinement.host import check_host
from supervisor.confinement.pane import LaneGrant, PaneConfiner
from supervisor.profiles.confinement import ConfineSettings

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("cwd", ["/", "/usr"])
def test_a_read_only_cwd_does_not_show_the_hosts_tmp(tmp_path: Path, cwd: str) -> None:
    support = check_host(os.environ)
    if not support.available:
        pytest.skip(support.detail)
    marker = Path("/tmp") / f"pw-host-only-{secrets.token_hex(4)}"
    marker.write_text("host")
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    confiner = PaneConfiner(support, "on", runtime, (), None)
    try:
        sandbox = confiner.build(
            "reviewer",
            agent="generic",
            argv=["/bin/sh", "-c", "ls -a /tmp"],
            cwd=cwd,
            env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
            settings=ConfineSettings(network="none"),
            other_cwds=[],
            grant=LaneGrant(cwd_writable=False),
        )
        done = subprocess.run(sandbox.argv, capture_output=True, text=True, timeout=30, check=False)
    finally:
        marker.unlink()
        confiner.forget(str(runtime / "panes" / "reviewer"))
    assert done.returncode == 0, done.stderr
    assert marker.name not in done.stdout, done.stdout
