"""A repository that names a marker-writing program at every point where Git runs one:
filter drivers (one whose name holds ``=``), hooks, fsmonitor, external diff, diff
driver command and textconv, credential helper, ``core.sshCommand``, pagers, askpass,
gpg, editor. Each program appends its label to a log and passes its input through, so
plain Git still works (and shows that the setup is live)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tests.lanes.gitrepo import Repo, git

HOOKS = (
    "post-index-change", "pre-commit", "post-checkout", "post-merge", "reference-transaction",
    "pre-auto-gc", "post-rewrite", "pre-push", "fsmonitor-watchman", "post-update", "update",
)  # fmt: skip
# Files the attributes select a filter for; a touch makes Git re-read them.
FILTERED = ("src/a.py", "src/ab.py", "docs/guide.md")


@dataclass(frozen=True)
class Hostile:
    """The markers' log, and the index files Git must never write."""

    log: Path
    index_files: tuple[Path, ...]

    def ran(self) -> list[str]:
        """Every label a repository-named program logged, in order."""
        if not self.log.exists():
            return []
        return self.log.read_text().split()

    def fingerprint(self) -> list[tuple[str, bytes, int]]:
        """(path, bytes, mtime in ns) of every index file."""
        return [(str(p), p.read_bytes(), os.stat(p).st_mtime_ns) for p in self.index_files]

    def touch(self, worktree: Path) -> None:
        """Give the filtered files a new mtime (same bytes): their index stat data is
        stale, so Git would run the clean filter on them."""
        for rel in FILTERED:
            path = worktree / rel
            info = os.stat(path)
            os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns - 10_000_000_000))


def _program(bin_dir: Path, log: Path, label: str) -> str:
    """A program that logs ``label`` and copies its input (a named file, else stdin)."""
    path = bin_dir / label
    path.write_text(
        "#!/bin/sh\n"
        f"echo {label} >> '{log}'\n"
        "for last; do :; done\n"
        'if [ -n "$last" ] && [ -f "$last" ]; then cat "$last"; else cat; fi\n'
    )
    path.chmod(0o755)
    return str(path)


def make_hostile(repo: Repo, worktree: Path) -> Hostile:
    """Configure ``repo`` (its common config, so ``worktree`` too) and commit the
    attributes; returns where the markers go."""
    base = repo.root.parent / "hostile"
    bin_dir, hooks = base / "bin", base / "hooks"
    bin_dir.mkdir(parents=True)
    hooks.mkdir()
    log = base / "ran.log"
    config = {
        "filter.x.clean": "filter-clean",
        "filter.x.smudge": "filter-smudge",
        "filter.w=v.clean": "filter-eq-clean",
        "filter.w=v.smudge": "filter-eq-smudge",
        "filter.p.process": "filter-process",
        "core.fsmonitor": "fsmonitor",
        "diff.external": "diff-external",
        "diff.x.command": "diff-command",
        "diff.x.textconv": "textconv",
        "credential.helper": "credential",
        "core.sshCommand": "ssh",
        "core.pager": "pager",
        "pager.status": "pager-status",
        "pager.diff": "pager-diff",
        "core.askPass": "askpass",
        "gpg.program": "gpg",
        "core.editor": "editor",
    }
    for key, label in config.items():
        git(repo.root, "config", key, _program(bin_dir, log, label))
    git(repo.root, "config", "filter.x.required", "true")
    for name in HOOKS:
        _program(hooks, log, name)
    git(repo.root, "config", "core.hooksPath", str(hooks))
    (worktree / ".gitattributes").write_text(
        "*.py filter=x diff=x\n*.md filter=w=v diff=x\n*.bin filter=p\n"
    )
    git(worktree, "add", ".gitattributes")
    git(worktree, "-c", "core.hooksPath=/dev/null", "commit", "-q", "-m", "attributes")
    git_dir = Path(git(worktree, "rev-parse", "--path-format=absolute", "--git-dir"))
    log.unlink(missing_ok=True)
    return Hostile(log=log, index_files=(repo.common_dir / "index", git_dir / "index"))
