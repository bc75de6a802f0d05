"""The command line: exit statuses and the doctor's checks, run as a user would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import service_env


def _run(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor", *args],
        env=service_env(state_dir),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_doctor_passes_on_this_host(state_dir: Path) -> None:
    done = _run(state_dir, "doctor")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok  subreaper" in done.stdout and "ok  pidfd" in done.stdout
    assert "ok  sandbox" in done.stdout and "no network" in done.stdout
    # How many panes the host holds, and which limit binds first.
    capacity = next(line for line in done.stdout.splitlines() if "capacity" in line)
    assert "more panes;" in capacity and "binds first" in capacity, done.stdout
    for limit in ("fds", "ptys", "pid_max", "memory"):
        assert f"    {limit} " in done.stdout, done.stdout


def test_doctor_says_when_the_sandbox_cannot_work(state_dir: Path, tmp_path: Path) -> None:
    # No bwrap on PATH: verification is unavailable, everything else still passes.
    done = subprocess.run(
        [sys.executable, "-m", "supervisor", "doctor"],
        env={**service_env(state_dir), "PATH": str(tmp_path)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "--  sandbox" in done.stdout and "not installed" in done.stdout


def test_usage_errors_exit_2(state_dir: Path) -> None:
    assert _run(state_dir, "serve").returncode == 2  # neither --stdio nor --http
    assert _run(state_dir, "serve", "--stdio", "--http").returncode == 2
    assert _run(state_dir, "no-such-command").returncode == 2


def test_a_bad_environment_value_exits_2_with_a_message(state_dir: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "supervisor", "serve", "--stdio"],
        env=service_env(state_dir, PANEWARDEN_ORPHAN_GRACE_S="soon"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "PANEWARDEN_ORPHAN_GRACE_S" in done.stderr


def test_status_without_a_service_exits_1(state_dir: Path) -> None:
    done = _run(state_dir, "status")
    assert done.returncode == 1 and "no HTTP service" in done.stderr
