"""The Bubblewrap sandbox verification recipes run in, and the check that it works.

A recipe runs as ``bwrap`` with every namespace unshared (``--unshare-all``: no
network, its own pids, IPC and UTS), ``--die-with-parent`` (it ends with the
supervisor), ``--new-session`` (no terminal to inject keys into), every capability
dropped, and a cleared environment holding only ``PATH``, ``HOME``, ``TMPDIR`` and
``LANG`` (fixed values). The host is mounted read-only; ``/tmp`` is a private tmpfs
holding the private ``HOME``; the repository's common dir and the worktree are mounted
read-only again (they may live under ``/tmp``), and only the recipe's ``writable``
paths read-write on top. It runs in the worktree.

This limits accidents — a test that reaches for the network, writes where it should
not, or leaves processes behind — not a hostile process of the same user.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence

from supervisor.workers.subprocesses import ChildRunner

SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SANDBOX_HOME = "/tmp/home"
SANDBOX_ENV = {"PATH": SANDBOX_PATH, "HOME": SANDBOX_HOME, "TMPDIR": "/tmp", "LANG": "C.UTF-8"}
PROBE_TIMEOUT_S = 10.0
DEFAULT_HOST_PATH = "/usr/local/bin:/usr/bin:/bin"
REASON_LIMIT = 200


def find_bwrap(environ: Mapping[str, str]) -> str | None:
    """Where ``bwrap`` is on the supervisor's ``PATH``, if anywhere."""
    return shutil.which("bwrap", path=environ.get("PATH") or DEFAULT_HOST_PATH)


def _base(bwrap: str) -> list[str]:
    return [
        bwrap,
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--dir",
        SANDBOX_HOME,
    ]


def _environment() -> list[str]:
    args = ["--clearenv"]
    for key, value in SANDBOX_ENV.items():
        args += ["--setenv", key, value]
    return args


def sandbox_argv(
    bwrap: str,
    *,
    worktree: str,
    read_only: Sequence[str],
    writable: Sequence[str],
    argv: Sequence[str],
) -> list[str]:
    """The full command that runs ``argv`` in ``worktree`` inside the sandbox.

    ``read_only`` and ``writable`` are absolute paths that exist; ``writable`` ones must
    lie inside ``worktree``.
    """
    args = _base(bwrap)
    for path in (*read_only, worktree):
        args += ["--ro-bind", path, path]
    for path in writable:
        args += ["--bind", path, path]
    return [*args, *_environment(), "--chdir", worktree, "--", *argv]


def probe_argv(bwrap: str) -> list[str]:
    """A sandbox that runs ``true``: the same namespaces and mounts as a recipe's."""
    return [*_base(bwrap), *_environment(), "--chdir", "/tmp", "--", "true"]


def _reason(returncode: int, stderr: bytes) -> str:
    lines = stderr.decode(errors="replace").strip().splitlines()
    return (lines[0] if lines else f"exit status {returncode}")[:REASON_LIMIT]


async def probe(runner: ChildRunner, environ: Mapping[str, str]) -> tuple[str | None, str]:
    """(bwrap's path, "works") when the sandbox works here, else (None, why not)."""
    bwrap = find_bwrap(environ)
    if bwrap is None:
        return None, "bwrap (Bubblewrap) is not installed"
    result = await runner(
        probe_argv(bwrap), cwd="/", env={"PATH": SANDBOX_PATH}, timeout_s=PROBE_TIMEOUT_S
    )
    if result.timed_out:
        return None, f"bwrap did not finish a trivial run in {PROBE_TIMEOUT_S:.0f}s"
    if result.returncode != 0:
        return None, f"bwrap cannot build the sandbox: {_reason(result.returncode, result.stderr)}"
    return bwrap, "works"


def probe_blocking(environ: Mapping[str, str]) -> tuple[bool, str]:
    """The same check for a plain process (``panewarden doctor``): (works, detail)."""
    bwrap = find_bwrap(environ)
    if bwrap is None:
        return False, "bwrap (Bubblewrap) is not installed: verify is unavailable"
    try:
        done = subprocess.run(
            probe_argv(bwrap),
            env={"PATH": SANDBOX_PATH},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False, f"{bwrap} did not finish a trivial run in {PROBE_TIMEOUT_S:.0f}s"
    except OSError as exc:
        return False, f"{bwrap} cannot run: {exc}"
    if done.returncode != 0:
        return False, f"{bwrap} cannot build the sandbox: {_reason(done.returncode, done.stderr)}"
    return True, f"{bwrap}: no network, read-only host, private /tmp and HOME"
