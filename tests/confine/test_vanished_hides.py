"""A hidden path that vanishes between the sandbox's build and its exec does not stop
the pane: another service's runtime directory removed in that window once made bwrap
fail ("Can't mkdir parents ...: Read-only file system") and a confined pane of the full
suite read ``exited``. The worker drops the stand-ins of paths gone by its exec
(``protocol.sandbox_argv``); the real sandbox runs, and what still exists stays hidden."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from protocol.sandbox_argv import drop_vanished_hides
from supervisor.confinement.host import check_host
from supervisor.confinement.pane import PaneConfiner
from supervisor.profiles.confinement import ConfineSettings

pytestmark = pytest.mark.timeout(60)


def test_a_hidden_path_gone_before_the_exec_is_dropped_and_the_sandbox_runs() -> None:
    support = check_host(os.environ)
    if not support.available:
        pytest.skip(support.detail)
    # Outside /tmp (the private /tmp hides what is there already).
    base = Path("/var/tmp") / f"pw-vanish-{os.getpid()}"
    gone_dir, gone_file, kept = base / "svc" / "run", base / "secret", base / "kept"
    gone_dir.mkdir(parents=True)
    gone_file.write_text("x")
    kept.mkdir()
    runtime = base / "runtime"
    runtime.mkdir(mode=0o700)
    try:
        confiner = PaneConfiner(support, "on", runtime, (), None)
        sandbox = confiner.build(
            "p",
            agent="generic",
            argv=["/bin/sh", "-c", f"cat {kept}/x 2>&1; true"],
            cwd="/",
            env={"HOME": str(base), "PATH": "/usr/bin:/bin"},
            settings=ConfineSettings(
                network="none", hide=(str(gone_dir), str(gone_file), str(kept))
            ),
            other_cwds=[],
        )
        shutil.rmtree(base / "svc")
        gone_file.unlink()

        def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
            return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)

        # (Whether bwrap itself fails on the vanished mount points depends on the mounts
        # before them: the full suite's failure was "Can't mkdir parents"; bwrap alone,
        # `--ro-bind / / --perms 0000 --tmpfs /gone/x`, fails so here.)
        after = run(drop_vanished_hides(sandbox.argv, sandbox.stand_in))
        assert after.returncode == 0, after.stderr
        # What still exists stays hidden.
        assert "Permission denied" in after.stdout, after.stdout
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_only_stand_ins_of_missing_paths_are_dropped(tmp_path: Path) -> None:
    here, stand_in = str(tmp_path), str(tmp_path / "unreadable")
    argv = ["bwrap", "--ro-bind", "/", "/", "--perms", "0000", "--tmpfs", here]
    argv += ["--perms", "0000", "--tmpfs", "/nonexistent/a", "--ro-bind", stand_in, "/nope"]
    argv += ["--ro-bind", "/missing-src", "/missing", "--", "--perms", "0000", "--tmpfs", "/x"]
    kept = ["bwrap", "--ro-bind", "/", "/", "--perms", "0000", "--tmpfs", here]
    kept += ["--ro-bind", "/missing-src", "/missing", "--", "--perms", "0000", "--tmpfs", "/x"]
    assert drop_vanished_hides(argv, stand_in) == kept
