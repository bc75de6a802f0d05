"""Real Git repositories with linked worktrees for the lane tests, and what a coordinator
would read from them (HEAD, the status digest) with the ``git`` command line itself."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

GIT_TIMEOUT_S = 30
# A predictable Git for the test's own commands: no user or system configuration.
GIT_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "HOME": "/nonexistent",
    "LANG": "C",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
}

UNIT_TEST = """import unittest

from src.a import answer


class AnswerTest(unittest.TestCase):
    def test_answer(self) -> None:
        self.assertEqual(answer(), 42)
"""

WAIT_FOR_TRIGGER = (
    "import os, sys, time\n"
    "deadline = time.monotonic() + 60\n"
    "while not os.path.exists('trigger.txt'):\n"
    "    if time.monotonic() > deadline: sys.exit(3)\n"
    "    time.sleep(0.01)\n"
)


# The exit status of a recipe whose network connection or write the sandbox refused.
REFUSED_EXIT = 7


def recipes_toml(port: int) -> str:
    """The test repository's recipes: real tests, a network try (a TCP connection to
    ``127.0.0.1:port``, where the test listens on the host), a write outside and inside
    the declared outputs, a recipe that waits for the worktree to change, a sleeper."""
    # The interpreter itself, not the venv's link to it: a checkout under /tmp (a CI
    # clone) has its venv hidden by the sandbox's private /tmp, and the recipes need
    # nothing but the standard library.
    py = os.path.realpath(sys.executable)
    # The refusals exit with their own status, so a recipe that failed for another reason
    # (its interpreter not found, a typo) cannot pass for a refusal.
    connect = (
        "import socket, sys\n"
        f"try: socket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
        f"except OSError: sys.exit({REFUSED_EXIT})"
    )
    write_outside = (
        "import sys\n"
        "try: open('stray.txt', 'w').write('x')\n"
        f"except OSError: sys.exit({REFUSED_EXIT})"
    )
    recipes = {
        "tests": [py, "-m", "unittest", "discover", "-s", "tests", "-t", "."],
        "network": [py, "-c", connect],
        "write-outside": [py, "-c", write_outside],
        "write-home": [py, "-c", "import os; open(os.path.expanduser('~/x'), 'w').write('x')"],
        "wait-for-change": [py, "-c", WAIT_FOR_TRIGGER],
        "sleep": [py, "-c", "import time; time.sleep(120)"],
        # A slow suite: it outlives two of the supervisor's 1 s leftover sweeps.
        "slow-pass": [py, "-c", "import time; time.sleep(2.5)"],
    }
    lines = []
    for name, argv in recipes.items():
        lines.append(f"[recipes.{name}]")
        lines.append("argv = [" + ", ".join(_toml_string(a) for a in argv) + "]")
        lines.append("")
    lines += [
        "[recipes.write-report]",
        "argv = ["
        + ", ".join(_toml_string(a) for a in [py, "-c", "open('out/report.txt', 'w').write('ok')"])
        + "]",
        'writable = ["out"]',
        "timeout_s = 120",
        "",
        "[recipes.write-linked]",
        "argv = [" + _toml_string(py) + ', "-c", "pass"]',
        'writable = ["linked/out"]',
        "",
    ]
    return "\n".join(lines)


def _toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def git(cwd: Path, *args: str) -> str:
    """Run git in ``cwd``; its stdout, stripped."""
    done = subprocess.run(
        ["git", "-C", str(cwd), *args],
        env=GIT_ENV,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=GIT_TIMEOUT_S,
        check=True,
    )
    return done.stdout.decode().strip()


def head(cwd: Path) -> str:
    return git(cwd, "rev-parse", "HEAD")


def status_sha256(cwd: Path) -> str:
    """``git status --porcelain=v1 --untracked-files=all | sha256sum``, as a coordinator
    computes it."""
    done = subprocess.run(
        ["git", "-C", str(cwd), "status", "--porcelain=v1", "--untracked-files=all"],
        env=GIT_ENV,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=GIT_TIMEOUT_S,
        check=True,
    )
    return hashlib.sha256(done.stdout).hexdigest()


def tree_fingerprint(*roots: Path) -> dict[str, tuple[int, str]]:
    """(mode, sha256 of bytes or link target) of every entry below ``roots``, .git included:
    equal fingerprints mean byte-identical trees."""
    found: dict[str, tuple[int, str]] = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in [*dirnames, *filenames]:
                path = os.path.join(dirpath, name)
                info = os.lstat(path)
                if os.path.islink(path):
                    data = os.readlink(path).encode()
                elif os.path.isfile(path):
                    data = Path(path).read_bytes()
                else:
                    data = b""
                found[path] = (info.st_mode, hashlib.sha256(data).hexdigest())
    return found


@dataclass
class Repo:
    """A repository: its primary checkout on ``main`` and the base commit."""

    root: Path
    base: str

    @property
    def common_dir(self) -> Path:
        return self.root / ".git"

    def worktree(self, name: str, branch: str) -> Path:
        """A linked worktree at the base commit on a new ``branch``."""
        path = self.root.parent / name
        git(self.root, "worktree", "add", "-q", "-b", branch, str(path), self.base)
        return path


def make_repo(parent: Path, port: int = 9) -> Repo:
    """A small Python project with tests and a recipes file, committed on ``main``."""
    root = parent / "project"
    (root / "src").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "docs").mkdir()
    (root / ".panewarden").mkdir()
    (root / "src" / "__init__.py").write_text("")
    (root / "src" / "a.py").write_text("def answer() -> int:\n    return 42\n")
    (root / "src" / "ab.py").write_text("B = 2\n")
    (root / "tests" / "__init__.py").write_text("")
    (root / "tests" / "test_answer.py").write_text(UNIT_TEST)
    (root / "docs" / "guide.md").write_text("# Guide\n")
    (root / ".gitignore").write_text("out/\n__pycache__/\n")
    (root / ".panewarden" / "recipes.toml").write_text(recipes_toml(port))
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    return Repo(root=root, base=head(root))
