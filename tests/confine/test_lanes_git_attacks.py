"""A confined writer attacks the Git the supervisor runs on its worktree, from inside its
pane: a submodule whose ``.git`` links into the lane's own admin dir, or an embedded
repository inside an embedded repository, each naming a clean filter that would hand the
service's token back; a rewritten ``commondir``; ignored files that shadow a module the
lane does not own. The filter never runs (its marker is never written, the token never
leaves), the tools answer with a typed error or a digest that holds what the lane wrote."""

from __future__ import annotations

import json
import secrets
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.conftest import REPO, Tools, stdio_params
from tests.lanes.conftest import CHECKPOINT_SHA, Lanes, acquire
from tests.lanes.gitrepo import git, head, make_repo, status_sha256
from tests.polling import apoll

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

PROBE = REPO / "tests" / "confine" / "lane_probe.py"
SETTLE_S = 30
GIT_ENV = {
    "HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "Lane",
    "GIT_AUTHOR_EMAIL": "lane@example.invalid",
    "GIT_COMMITTER_NAME": "Lane",
    "GIT_COMMITTER_EMAIL": "lane@example.invalid",
}

# Run by the writer inside its pane (cwd: the worktree). $FILTER is the clean filter.
LINKED_SUBMODULE = """
set -e
admin=$(git rev-parse --path-format=absolute --git-dir)
mkdir -p src/sub
git init -q --separate-git-dir "$admin/sub" src/sub
rm src/sub/.git
ln -s "$admin/sub" src/sub/.git
cd src/sub
echo '* filter=x' > .gitattributes
echo data > f
git add -A
git commit -q -m sub
git config filter.x.clean "$FILTER"
cd ../..
git add src/sub 2>/dev/null
touch -d 2001-01-01 src/sub/f
"""
NESTED_EMBEDDED = """
set -e
mkdir -p src/outer/inner
cd src/outer/inner
git init -q
echo '* filter=y' > .gitattributes
echo data > f
git add -A
git commit -q -m inner
git config filter.y.clean "$FILTER"
cd ..
git init -q
git add inner 2>/dev/null
echo outer > o
git add o
git commit -q -m outer
cd ../..
git add src/outer 2>/dev/null
touch -d 2001-01-01 src/outer/inner/f
"""
ATTACKS = {"linked_submodule": LINKED_SUBMODULE, "nested_embedded": NESTED_EMBEDDED}
REFUSED = {
    "linked_submodule": "src/sub/.git is a symbolic link",
    "nested_embedded": "src/outer/.git is an embedded repository",
}


@pytest.fixture
def service_home() -> Iterator[Path]:
    """The service's token outside /tmp (a confined pane's /tmp is its own)."""
    base = Path("/var/tmp") / f"pw-gitx-{secrets.token_hex(4)}"
    for name in ("home", "run"):
        (base / name).mkdir(parents=True, mode=0o700)
    token = base / "token"
    token.write_text(secrets.token_hex(16) + "\n")
    token.chmod(0o600)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _service(tmp: Path, results: Path, home: Path) -> dict[str, str]:
    profiles = tmp / "profiles.json"
    probe = {
        "name": "probe",
        "agent": "demo",
        "argv": [sys.executable, str(PROBE), str(results / "checks.json"), str(results / "w")],
        "cwds": [str(tmp)],
        "writable": [str(results)],
    }
    profiles.write_text(json.dumps({"profiles": [probe]}))
    return {
        "HOME": str(home / "home"),
        "XDG_RUNTIME_DIR": str(home / "run"),
        "PANEWARDEN_TOKEN_FILE": str(home / "token"),
        "PANEWARDEN_PROFILES": str(profiles),
    }


def _sh(script: str, **env: str) -> dict[str, Any]:
    return {"argv": ["sh", "-c", script], "env": {**GIT_ENV, **env}}


async def _answer(tools: Tools, tool: str, **args: Any) -> dict[str, Any]:
    """A tool's result or its error body, whichever it is."""
    result = await tools.client.call_tool(tool, args, read_timeout_seconds=120)
    if result.is_error:
        return dict(json.loads(result.content[0].text))  # type: ignore[union-attr]
    return dict(result.structured_content or {})


async def _probed(tools: Tools, results: Path) -> dict[str, str]:
    if not await apoll((results / "w").exists, SETTLE_S):
        shown = await tools.call("read_output", name="alpha")
        raise AssertionError(f"the probe wrote no results: {shown}")
    return dict(json.loads((results / "w").read_text()))


@pytest.mark.parametrize("attack", sorted(ATTACKS))
async def test_a_writers_submodule_filter_never_runs_in_the_supervisors_git(
    tmp_path: Path, service_home: Path, attack: str
) -> None:
    repo = make_repo(tmp_path)
    wt = repo.worktree("wt-a", "alpha/work")
    results = tmp_path / "results"
    results.mkdir()
    # Where the filter, run as the service, would leave the token: nowhere the pane writes.
    marker = service_home / "stolen"
    token = service_home / "token"
    # The lane writes its filter in its own scope; run by the service it would copy the
    # token where the lane reads it.
    filter_program = wt / "src" / "steal.sh"
    filter_text = f"#!/bin/sh\ncat '{token}' > '{marker}' 2>&1 || echo ran > '{marker}'\ncat\n"
    checks = [
        [
            "filter",
            "run",
            _sh(f"cat > src/steal.sh <<'EOF'\n{filter_text}EOF\nchmod +x src/steal.sh"),
        ],
        ["attack", "run", _sh(ATTACKS[attack], FILTER=str(filter_program))],
    ]
    (results / "checks.json").write_text(json.dumps(checks))
    env = _service(tmp_path, results, service_home)
    async with Client(stdio_params(service_home / "state", **env)) as client:
        tools = Tools(client)
        lanes = Lanes(tools, await acquire(tools), repo)
        lease = await lanes.start("alpha", wt, "alpha/work", ["src"], profile="probe")
        assert lease["confined"] is True
        seen = await _probed(tools, results)
        assert seen == {"filter": "rc:0:", "attack": "rc:0:"}, seen
        # Git run by the operator's shell would run the filter (the setup is live):
        # checked at the end, once the service's calls are done.
        snap = await _answer(tools, "verification_snapshot", lease_id=lease["lease_id"])
        # The probe never reports a state: its pane is neither working nor blocked.
        state = await tools.call("get_status", name="alpha")
        verified = await _answer(
            tools,
            "verify",
            creds=lanes.creds,
            lease_id=lease["lease_id"],
            recipe="tests",
            expected_worktree_sha256="0" * 64,
        )
        released = await _answer(
            tools,
            "writer_release",
            creds=lanes.creds,
            lease_id=lease["lease_id"],
            expected_seq=state["seq"],
            expected_head=head(wt),
            expected_status_sha256="0" * 64,
            checkpoint_ref="issue 27 checkpoint",
            checkpoint_sha256=CHECKPOINT_SHA,
        )
        ran = marker.exists()
    assert not ran, f"the service ran the lane's filter; it got {marker.read_text()!r}"
    for body in (snap, verified, released):
        assert body["code"] == "git_precondition", body
        assert REFUSED[attack] in body["message"], body
    # The same worktree, under plain Git: the filter runs (the attack was live).
    status_sha256(wt)
    assert marker.exists() and marker.read_text() == token.read_text()


async def test_a_rewritten_commondir_is_refused_not_read_through(
    tmp_path: Path, service_home: Path
) -> None:
    """The lane points its admin dir's ``commondir`` at a repository of its own whose
    ``alpha/work`` is a forged commit: the snapshot is ``git_precondition``, never that
    commit as the lane's HEAD."""
    repo = make_repo(tmp_path)
    wt = repo.worktree("wt-a", "alpha/work")
    results = tmp_path / "results"
    results.mkdir()
    forge = """
set -e
admin=$(git rev-parse --path-format=absolute --git-dir)
git init -q --bare src/fake
forged=$(git commit-tree -m forged 'HEAD^{tree}')
git push -q src/fake HEAD:refs/heads/main "$forged:refs/heads/alpha/work"
echo "$forged" > src/forged.txt
echo "$PWD/src/fake" > "$admin/commondir"
"""
    (results / "checks.json").write_text(json.dumps([["forge", "run", _sh(forge)]]))
    env = _service(tmp_path, results, service_home)
    async with Client(stdio_params(service_home / "state", **env)) as client:
        tools = Tools(client)
        lanes = Lanes(tools, await acquire(tools), repo)
        lease = await lanes.start("alpha", wt, "alpha/work", ["src"], profile="probe")
        seen = await _probed(tools, results)
        assert seen == {"forge": "rc:0:"}, seen
        body = await _answer(tools, "verification_snapshot", lease_id=lease["lease_id"])
    forged = (wt / "src" / "forged.txt").read_text().strip()
    # Plain Git reads through the rewritten file: the forged commit as HEAD.
    assert head(wt) == forged != repo.base
    assert body.get("head") != forged, body
    assert body.get("code") == "git_precondition", body
    assert "is no longer the lane's worktree" in body["message"], body
    assert str(wt / "src" / "fake") in body["message"], body


async def test_ignored_files_the_lane_writes_are_in_its_digest(
    tmp_path: Path, service_home: Path
) -> None:
    """The lane owns ``src/a`` (a new directory) and makes it a package that shadows
    ``src/a.py``, which it does not own, under a ``.gitignore`` of ``*``: the snapshot
    names those files, and a later change to them fails verify's preflight."""
    repo = make_repo(tmp_path)
    wt = repo.worktree("wt-a", "alpha/work")
    results = tmp_path / "results"
    results.mkdir()
    shadow = wt / "src" / "a"
    plant = (
        "set -e\nmkdir src/a\necho '*' > src/a/.gitignore\n"
        "printf 'def answer() -> int:\\n    return 42\\n' > src/a/__init__.py\n"
    )
    checks = [["shadow", "run", _sh(plant)]]
    (results / "checks.json").write_text(json.dumps(checks))
    env = _service(tmp_path, results, service_home)
    async with Client(stdio_params(service_home / "state", **env)) as client:
        tools = Tools(client)
        lanes = Lanes(tools, await acquire(tools), repo)
        lease = await lanes.start("alpha", wt, "alpha/work", ["src/a"], profile="probe")
        seen = await _probed(tools, results)
        assert seen == {"shadow": "rc:0:"}, seen
        # Plain Git shows nothing: the files hide behind their own .gitignore.
        assert git(wt, "status", "--porcelain=v1", "--untracked-files=all") == ""
        snap = await tools.call("verification_snapshot", lease_id=lease["lease_id"])
        assert snap["ignored_files"] == 2, snap
        assert snap["ignored_paths"] == ["src/a/.gitignore", "src/a/__init__.py"], snap
        # What the lane writes there later (as it may, unseen by Git) is seen.
        (shadow / "__init__.py").write_text("def answer() -> int:\n    return 0\n")
        record = await tools.call(
            "verify",
            creds=lanes.creds,
            lease_id=lease["lease_id"],
            recipe="tests",
            expected_worktree_sha256=snap["worktree_sha256"],
        )
    assert record["state"] == "preflight_failed", record
    assert "worktree digest" in record["reason"], record
