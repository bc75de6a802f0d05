"""What writer-lane evidence and verification cost: Git through the managed helpers, the
worktree digest, and the sandbox's start-up.

Builds a throw-away repository of FILES tracked files with a linked worktree in which a
tenth of them are modified and a tenth more are untracked (10 KiB each), then times, N
times each: ``git rev-parse HEAD`` through ``ManagedChildren`` against a plain
``subprocess.run``; the ``git status`` digest; the worktree digest; and ``true`` run
in the Bubblewrap sandbox against ``true`` run bare (both through ``ManagedChildren``).
Part of ``python -m bench`` (N = 20, FILES = 1000; smoke: 2 and 100).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from bench.core import Figure, Options
from supervisor.confinement.host import find_bwrap
from supervisor.confinement.policy import bwrap_argv
from supervisor.lanes import sandbox
from supervisor.lanes.repo.git import Git
from supervisor.lanes.repo.worktree_digest import worktree_digest
from supervisor.workers.subprocesses import ManagedChildren

GIT_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "HOME": "/nonexistent",
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
}


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(cwd), *args], env=GIT_ENV, capture_output=True, check=True, timeout=120
    )
    return done.stdout.decode().strip()


def _repository(root: Path, files: int) -> tuple[Path, str]:
    main = root / "main"
    for i in range(files):
        path = main / f"pkg{i % 20}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"VALUE = {i}\n" * 50)
    _git(root, "init", "-q", "-b", "main", str(main))
    _git(main, "add", "-A")
    _git(main, "commit", "-q", "-m", "base")
    base = _git(main, "rev-parse", "HEAD")
    wt = root / "wt"
    _git(main, "worktree", "add", "-q", "-b", "lane", str(wt), base)
    for i in range(0, files, 10):
        (wt / f"pkg{i % 20}" / f"mod{i}.py").write_text(f"VALUE = {i + 1}\n" * 50)
        (wt / f"pkg{i % 20}" / f"new{i}.bin").write_bytes(os.urandom(10 * 1024))
    return wt, base


async def _median_ms(n: int, work: Callable[[], Awaitable[Any]]) -> list[float]:
    """Each run's time in ms (the suite takes the median)."""
    times = []
    for _ in range(n):
        started = time.perf_counter()
        await work()
        times.append((time.perf_counter() - started) * 1000)
    return times


async def _measure(n: int, files: int) -> dict[str, list[float]]:
    children = ManagedChildren()
    git = Git(children.run, os.environ)
    with tempfile.TemporaryDirectory() as tmp:
        wt, base = _repository(Path(tmp), files)
        digest = await worktree_digest(git, str(wt), base)

        async def plain_rev_parse() -> None:
            await asyncio.to_thread(_git, wt, "rev-parse", "HEAD")

        rows = [
            ("rev_parse_managed", await _median_ms(n, lambda: git.head(str(wt)))),
            ("rev_parse_plain", await _median_ms(n, plain_rev_parse)),
            ("status_digest", await _median_ms(n, lambda: git.status(str(wt)))),
            (
                f"worktree_digest:{digest.diff_bytes}:{digest.untracked_files}",
                await _median_ms(n, lambda: worktree_digest(git, str(wt), base)),
            ),
        ]
        bwrap = find_bwrap(os.environ)
        env = {"PATH": sandbox.SANDBOX_PATH}
        rows.append(
            (
                "true_bare",
                await _median_ms(n, lambda: children.run(["true"], cwd="/", env=env, timeout_s=30)),
            )
        )
        if bwrap is not None:
            # A recipe's sandbox, the user's keys that exist here hidden as they would be.
            unreadable = Path(tmp) / "unreadable"
            unreadable.touch(mode=0o000)
            policy = sandbox.recipe_policy(
                worktree=str(wt),
                read_only=[],
                writable=[],
                home=os.environ.get("HOME") or "/",
                service_paths=(),
                unreadable_file=str(unreadable),
            )
            argv = bwrap_argv(bwrap, policy, ["true"])
            rows.append(
                (
                    "true_sandbox",
                    await _median_ms(n, lambda: children.run(argv, cwd="/", env=env, timeout_s=30)),
                )
            )
    return dict(rows)


def run(options: Options) -> Sequence[Figure]:
    n, files = (2, 100) if options.smoke else (20, 1000)
    got = asyncio.run(_measure(n, files))
    digest_key = next(key for key in got if key.startswith("worktree_digest:"))
    _name, diff_bytes, untracked = digest_key.split(":")
    figures = [
        Figure(
            "lanes.git_rev_parse_managed",
            "ms",
            got["rev_parse_managed"],
            reference="subprocess.run",
            reference_values=got["rev_parse_plain"],
        ),
        Figure("lanes.git_status_digest", "ms", got["status_digest"]),
        Figure(
            "lanes.worktree_digest",
            "ms",
            got[digest_key],
            note=f"{files} tracked files, {diff_bytes} B diff, {untracked} untracked",
        ),
    ]
    if "true_sandbox" in got:
        figures.append(
            Figure(
                "lanes.true_in_sandbox",
                "ms",
                got["true_sandbox"],
                reference="true bare",
                reference_values=got["true_bare"],
            )
        )
    return figures
