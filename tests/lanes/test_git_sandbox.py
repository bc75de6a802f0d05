"""The supervisor's own Git runs in Bubblewrap where the host has it: read-only, no
network, the service's paths hidden. A setting the neutralising missed (simulated here by
a filter listing that finds nothing) then runs a program that can read no secret and
leave nothing behind."""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from supervisor.confinement.host import check_host
from supervisor.lanes.repo import git_command
from supervisor.lanes.repo.git import Git
from supervisor.lanes.repo.worktree_digest import worktree_digest
from supervisor.lanes.sandbox import GitSandbox
from supervisor.workers.subprocesses import ManagedChildren
from tests.lanes.gitrepo import Repo, git, make_repo
from tests.lanes.hostile import make_hostile

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
HOST = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


@pytest.fixture
def service() -> Iterator[Path]:
    """A service dir outside /tmp holding its token and the unreadable stand-in."""
    base = Path("/var/tmp") / f"pw-gitsb-{secrets.token_hex(4)}"
    base.mkdir(mode=0o700)
    (base / "token").write_text(secrets.token_hex(16) + "\n")
    (base / "unreadable").touch(mode=0o000)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _box(service: Path) -> GitSandbox:
    bwrap = check_host(os.environ).bwrap
    if bwrap is None:
        pytest.skip("this host cannot build the sandbox")
    return GitSandbox(
        bwrap=bwrap,
        home=str(service),
        service_paths=(str(service / "token"),),
        unreadable_file=str(service / "unreadable"),
    )


async def test_a_filter_the_listing_missed_runs_with_nothing_to_take(
    tmp_path: Path, service: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo: Repo = make_repo(tmp_path)
    wt = repo.worktree("wt-a", "lane-a")
    hostile = make_hostile(repo, wt)
    stolen = wt / "stolen"
    # One more filter, where the sandbox shows it (the common dir): it would copy the
    # token into the worktree.
    thief = repo.common_dir / "thief.sh"
    thief.write_text(f"#!/bin/sh\ncat '{service / 'token'}' > '{stolen}'\ncat\n")
    thief.chmod(0o755)
    git(repo.root, "config", "filter.x.clean", str(thief))
    git(repo.root, "config", "filter.x.required", "false")

    def missed(keys: Sequence[str]) -> list[str]:
        return []

    monkeypatch.setattr(git_command, "filter_drivers", missed)
    hostile.touch(wt)
    before = hostile.fingerprint()
    box = _box(service)
    gitq = Git(ManagedChildren().run, HOST, sandbox_of=lambda: box)
    assert (await gitq.status(str(wt))).size == 0  # the filters are identities
    await worktree_digest(gitq, str(wt), repo.base, ["src"])
    # The programs ran (nothing neutralised them) but in the sandbox: the log they append
    # to is not there, the worktree is read-only, the token hidden.
    assert hostile.ran() == []
    assert not stolen.exists()
    assert hostile.fingerprint() == before
    # Without the sandbox the same miss hands the token over: the setup is live.
    await Git(ManagedChildren().run, HOST).status(str(wt))
    assert stolen.read_text() == (service / "token").read_text()


async def test_every_query_works_in_the_sandbox(tmp_path: Path, service: Path) -> None:
    repo = make_repo(tmp_path)
    wt = repo.worktree("wt-a", "lane-a")
    (wt / "src" / "a.py").write_text("edited\n")
    (wt / "notes.txt").write_text("untracked\n")
    box = _box(service)
    boxed = Git(ManagedChildren().run, HOST, sandbox_of=lambda: box)
    plain = Git(ManagedChildren().run, HOST)
    for gitq in (boxed, plain):
        assert (await gitq.layout(str(wt))).linked
        assert await gitq.branch(str(wt)) == "lane-a"
        assert await gitq.show(str(wt), repo.base, "src/a.py", 4096) is not None
    assert await boxed.status(str(wt)) == await plain.status(str(wt))
    boxed_digest = await worktree_digest(boxed, str(wt), repo.base, ["src"])
    assert boxed_digest == await worktree_digest(plain, str(wt), repo.base, ["src"])
