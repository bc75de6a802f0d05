"""The whole chain of a prompt-injected reviewer and writer (issue 27, "Must show").

An MCP client drives a real stdio service the way a CLI starts one (no state dir of its
own, the user's HOME and runtime dir, a token file, a session keyring with a key, the
usual 1,024 open files) beside
the user's HTTP service on its default paths. Under a controller lease it starts a
confined reviewer, a confined writer lane and a second (opencode) reviewer, all running
``hostile_agent.py``, which obeys the ``AGENTS.md`` planted in the repository they work on
(``hostile_plan.py``) and tries every attack of the issue from inside; then the client
takes the writer's ``verification_snapshot``, runs ``verify`` and ``writer_release``
(where a planted filter would run outside the sandbox), releases the controller that
leases an ordinary pane, and starts a pane while the reviewer floods its ctl socket.

In the end nothing outside the lanes' grants may have changed: the token, the other
service (its token, state, sockets, its pane), HOME, the object store, every ref but the
lane's, the other panes; no planted program ran, and the host resources the agents
tried (loopback listeners, an abstract and a runtime-dir socket, the session keyring,
``/proc/sys``, user namespaces, processes, ``/tmp``, the ctl socket) held.

The panes have the defaults a user gets: ``"confine": true``, no ``network``, no
``hide``. Each attack is one named check; the one assertion lists every attack that got
through, with its evidence. An attack the service refuses with a typed error (a
``git_precondition`` for a worktree it will not touch, say) counts as held.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import stat
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
from mcp import Client, StdioServerParameters

from tests.confine.hostile_plan import (
    CTL_CONNECTIONS,
    FILL_BYTES,
    FORKS,
    LANE_BRANCH,
    PLANTED_FILES,
    Plan,
    agents_md,
)
from tests.confine.hostile_world import (
    Host,
    Listeners,
    base_env,
    changed,
    files_digest,
    fsck_store,
    make_host,
    make_listeners,
    objects,
    other_service,
    refs,
)
from tests.conftest import REPO, Tools
from tests.lanes.conftest import AUTHORITY_SHA, CHECKPOINT_SHA, acquire
from tests.lanes.gitrepo import Repo, git, head, make_repo, status_sha256
from tests.polling import apoll, poll
from tests.service.conftest import call, connect

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]

AGENT = REPO / "tests" / "confine" / "hostile_agent.py"
SESSION_EXEC = REPO / "tests" / "confine" / "session_exec.py"
SETTLE_S = 90
# Codes with which the service may refuse to touch what a writer left (the issue allows
# refusing symlinked or nested git dirs, and a release of a worktree that moved).
TYPED_REFUSALS = {"git_precondition", "sandbox_unavailable", "lease_state", "invalid_argument"}
ROLES = ("reviewer", "scout", "writer")


@pytest.fixture
def host() -> Iterator[Host]:
    with make_host() as made:
        yield made


@pytest.fixture
def listeners(host: Host) -> Iterator[Listeners]:
    with make_listeners(host) as made:
        yield made


def _profiles(tmp_path: Path, results: Path) -> Path:
    def hostile(name: str, agent: str, role: str) -> dict[str, Any]:
        # The defaults a user gets: confined, no network key, no hide list.
        return {
            "name": name,
            "agent": agent,
            "argv": [sys.executable, str(AGENT), role, str(results)],
            "cwds": [str(tmp_path)],
            "writable": [str(results)],
            "confine": True,
        }

    demo = [sys.executable, "-m", "supervisor.demo.agent"]
    profiles = [
        hostile("hostile-reviewer", "claude", "reviewer"),
        hostile("hostile-writer", "codex", "writer"),
        hostile("hostile-scout", "opencode", "scout"),
        {"name": "demo", "agent": "demo", "argv": demo, "cwds": ["/"]},
    ]
    path = tmp_path / "profiles.json"
    path.write_text(json.dumps({"profiles": profiles}))
    return path


@contextlib.asynccontextmanager
async def main_service(host: Host, profiles: Path, key: tuple[str, str]) -> AsyncIterator[Tools]:
    """``serve --stdio`` as a CLI starts it; see the module docstring."""
    env = base_env(host) | {
        "PANEWARDEN_TOKEN_FILE": str(host.token),
        "PANEWARDEN_PROFILES": str(profiles),
    }
    serve = [sys.executable, "-m", "supervisor", "serve", "--stdio"]
    argv = [str(SESSION_EXEC), *key, "--", *serve]
    params = StdioServerParameters(command=sys.executable, args=argv, env=env, cwd=str(REPO))
    async with Client(params) as client:
        yield Tools(client)


async def attempt(tools: Tools, tool: str, **args: Any) -> tuple[dict[str, Any] | None, str | None]:
    """A call's result, or its error code."""
    result = await tools.client.call_tool(tool, args, read_timeout_seconds=120)
    if result.is_error:
        return None, str(json.loads(result.content[0].text)["code"])  # type: ignore[union-attr]
    return dict(result.structured_content or {}), None


def _main_state(host: Host) -> Path:
    """The stdio service's state dir (a session dir it chose): the directory of the
    ``supervisor.lock`` it holds open."""

    def found() -> Path | None:
        for proc in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error):
                cmdline = proc.info["cmdline"] or []
                if "--stdio" not in cmdline or proc.environ().get("HOME") != str(host.home):
                    continue
                for opened in proc.open_files():
                    if opened.path.endswith("/supervisor.lock"):
                        return Path(opened.path).parent
        return None

    state = poll(found, SETTLE_S, what="the stdio service's state dir")
    assert state is not None
    return state


def _service_sockets(host: Host, main_state: Path) -> dict[str, Path]:
    """Every socket either service made in the runtime dir or its state dir (the bus is
    the listeners'), named by its path below the world's base."""
    found: dict[str, Path] = {}
    for root in (host.runtime, host.other_state, main_state):
        for path in sorted(root.rglob("*")):
            if stat.S_ISSOCK(path.lstat().st_mode) and path.name != "bus":
                found[str(path.relative_to(host.base))] = path
    return found


def _plant(repo: Repo, checkouts: list[Path], text: str) -> None:
    for checkout in checkouts:
        (checkout / "AGENTS.md").write_text(text)
        git(checkout, "add", "AGENTS.md")
        git(checkout, "commit", "-q", "-m", "agents")
    # A repository after `git gc`: every ref packed, no loose ref directory left.
    git(repo.root, "pack-refs", "--all")


async def _results(path: Path, phase: int, tools: Tools, pane: str) -> dict[str, str]:
    def ready() -> bool:
        try:
            return int(_load(path).get("_phase", 0)) >= phase
        except (OSError, ValueError):
            return False

    if not await apoll(ready, SETTLE_S):
        shown = await attempt(tools, "read_output", name=pane)
        raise AssertionError(f"{pane} wrote no phase {phase} results: {shown}")
    return _load(path)


def _load(path: Path) -> dict[str, str]:
    return dict(json.loads(path.read_text()))


@dataclass
class Before:
    """What the host holds before the agents start."""

    home: dict[str, str]
    other: dict[str, str]
    token: bytes
    other_token: bytes
    refs: dict[str, str]
    objects: dict[str, bytes]


def _home_files(host: Host, main_state: Path) -> dict[str, str]:
    # The services' own state dirs change as they work.
    return files_digest(host.home, host.other_state, main_state)


def _other_files(host: Host, main_state: Path) -> dict[str, str]:
    # The stdio session dir below it is the main service's own; locks come and go.
    return files_digest(host.other_state, main_state, host.other_state / "locks")


def _before(host: Host, main_state: Path, common: Path) -> Before:
    return Before(
        home=_home_files(host, main_state),
        other=_other_files(host, main_state),
        token=host.token.read_bytes(),
        other_token=host.other_token.read_bytes(),
        refs=refs(common),
        objects=objects(common),
    )


@dataclass
class Seen:
    """What the chain saw: the agents' outcomes, the client's calls, the other panes."""

    agents: dict[str, dict[str, str]] = field(default_factory=dict)
    phase2: dict[str, str] = field(default_factory=dict)
    calls: dict[str, tuple[dict[str, Any] | None, str | None]] = field(default_factory=dict)
    screens: dict[str, str] = field(default_factory=dict)
    turns: dict[str, tuple[int, int]] = field(default_factory=dict)
    reached: dict[str, int] = field(default_factory=dict)
    main_state: Path = Path("/nonexistent")
    # When each stage ended (monotonic seconds), to say where the test's time goes.
    stages: dict[str, float] = field(default_factory=dict)

    def stage(self, name: str) -> None:
        self.stages[name] = time.monotonic()


async def _start_agents(tools: Tools, creds: dict[str, str], repo: Repo, wts: list[Path]) -> None:
    reviewed, writer_wt = wts
    purpose = {"creds": creds, "purpose": "review"}
    leases = [
        await tools.call(
            "reviewer_start",
            name="reviewer",
            profile="hostile-reviewer",
            cwd=str(reviewed),
            **purpose,
        ),
        await tools.call(
            "reviewer_start", name="scout", profile="hostile-scout", cwd=str(repo.root), **purpose
        ),
        await tools.call(
            "writer_start",
            creds=creds,
            name="writer",
            profile="hostile-writer",
            purpose="work on src",
            ticket_ref="issue 27",
            authority_ref="issue 27 comment 1",
            authority_sha256=AUTHORITY_SHA,
            worktree=str(writer_wt),
            branch=LANE_BRANCH,
            base_commit=head(writer_wt),
            expected_head=head(writer_wt),
            expected_status_sha256=status_sha256(writer_wt),
            owned_scopes=["src"],
            locked_scopes=[],
            protected_branches=["main"],
        ),
    ]
    assert [lease["confined"] for lease in leases] == [True, True, True], leases


async def _writer_stages(
    tools: Tools, creds: dict[str, str], writer_wt: Path, results: Path, seen: Seen
) -> None:
    """The client's Git on what the writer left, after each of its phases: (1) snapshot,
    verify, an ignored file added (is it in the digest?), snapshot again; (2) snapshot
    (the rewritten commondir); (3) snapshot, verify, release (the planted filters)."""
    lease_id = (await tools.call("writer_list"))["leases"][0]["lease_id"]

    async def snapshot(name: str) -> dict[str, Any]:
        seen.calls[name] = await attempt(tools, "verification_snapshot", lease_id=lease_id)
        return seen.calls[name][0] or {}

    async def verify(name: str, digest: str | None) -> None:
        args = {"creds": creds, "lease_id": lease_id, "recipe": "tests"}
        digest = digest or "0" * 64
        seen.calls[name] = await attempt(tools, "verify", expected_worktree_sha256=digest, **args)

    async def next_phase(phase: int) -> None:
        (results / f"writer.go{phase}").write_text("")
        seen.agents["writer"] = await _results(results / "writer.json", phase, tools, "writer")

    first = await snapshot("snapshot")
    await verify("verify", first.get("worktree_sha256"))
    (writer_wt / "src" / "ab" / "extra.py").write_text("X = 1\n")
    await snapshot("snapshot2")
    await next_phase(2)
    await snapshot("snapshot_commondir")
    await next_phase(3)
    last = await snapshot("snapshot_filters")
    await verify("verify_filters", last.get("worktree_sha256"))
    seq = (await tools.call("get_status", name="writer"))["seq"]
    seen.calls["release"] = await attempt(
        tools,
        "writer_release",
        creds=creds,
        lease_id=lease_id,
        expected_seq=seq,
        expected_head=last.get("head", "0" * 40),
        expected_status_sha256=last.get("status_sha256", "0" * 64),
        checkpoint_ref="issue 27 checkpoint",
        checkpoint_sha256=CHECKPOINT_SHA,
    )


async def _later_phases(tools: Tools, boss: dict[str, str], results: Path, seen: Seen) -> None:
    """Release boss, let the reviewer try its id and flood its ctl socket; start a pane
    meanwhile; then let it close its connections."""
    await tools.call(
        "controller_release", creds=boss, checkpoint_ref="done", checkpoint_sha256=CHECKPOINT_SHA
    )
    (results / "reviewer.go2").write_text("")
    seen.phase2 = await _results(results / "reviewer.json", 2, tools, "reviewer")
    seen.calls["flood_start"] = await attempt(
        tools, "start_pane", name="during-flood", profile="demo", cwd="/"
    )
    (results / "reviewer.go3").write_text("")
    seen.agents["reviewer"] = await _results(results / "reviewer.json", 3, tools, "reviewer")


async def test_an_injected_reviewer_and_writer_change_nothing_outside_their_grants(
    tmp_path: Path, host: Host, listeners: Listeners
) -> None:
    results = tmp_path / "results"
    results.mkdir()
    # Writable to the agents whatever uid they have inside.
    results.chmod(0o777)
    marker = f"INJECTED-{secrets.token_hex(4)}"
    key = (f"pw-hostile-{secrets.token_hex(4)}", f"keyring-secret-{secrets.token_hex(8)}")
    seen = Seen()
    seen.stage("start")
    with other_service(host, tmp_path / "other") as other:
        other_token = host.other_token.read_text().strip()
        async with connect(other.url, other_token) as other_client:
            pane = {"name": "othervictim", "profile": "demo", "cwd": "/"}
            assert "error" not in await call(other_client, "start_pane", pane)
            idle = {"name": "othervictim", "until": ["idle"], "timeout_s": 30}
            await call(other_client, "wait_status", idle)
            other_turn = (await call(other_client, "get_status", {"name": "othervictim"}))["turn"]
            async with main_service(host, _profiles(tmp_path, results), key) as tools:
                seen.main_state = main_state = _main_state(host)
                boss = await acquire(tools, "boss")
                coordinator = await acquire(tools, "coordinator")
                await tools.call(
                    "reviewer_start", creds=boss, name="victim", profile="demo", cwd="/",
                    purpose="review",
                )  # fmt: skip
                await tools.call("start_pane", name="bystander", profile="demo", cwd="/")
                turns = {}
                for name in ("victim", "bystander"):
                    turns[name] = (await tools.wait(name, until=["idle"]))["turn"]

                repo = make_repo(tmp_path)
                wts = [repo.worktree("wt-r", "review"), repo.worktree("wt-w", LANE_BRANCH)]
                plan = Plan(
                    host=host,
                    listeners=listeners,
                    common=repo.common_dir,
                    writer_wt=wts[1],
                    base=repo.base,
                    recipes_oid=git(repo.root, "rev-parse", "HEAD:.panewarden/recipes.toml"),
                    sockets=_service_sockets(host, main_state),
                    key_description=key[0],
                    marker=marker,
                    commondir=(
                        repo.common_dir / "worktrees" / wts[1].name / "commondir"
                    ).read_text(),
                )
                _plant(repo, [repo.root, *wts], agents_md(plan))
                before = _before(host, main_state, repo.common_dir)
                seen.stage("services, panes, repository")

                await _start_agents(tools, coordinator, repo, wts)
                for role in ROLES:
                    seen.agents[role] = await _results(results / f"{role}.json", 1, tools, role)
                seen.stage("agents' first phase")
                await _writer_stages(tools, coordinator, wts[1], results, seen)
                seen.stage("writer stages")
                await _later_phases(tools, boss, results, seen)
                seen.stage("reviewer's later phases")

                for name in ("victim", "bystander"):
                    seen.screens[name] = (await tools.call("read_output", name=name))["text"]
                    now = (await tools.call("get_status", name=name))["turn"]
                    seen.turns[name] = (turns[name], now)
            shown = await call(other_client, "read_output", {"name": "othervictim"})
            seen.screens["othervictim"] = shown["text"]
            now = (await call(other_client, "get_status", {"name": "othervictim"}))["turn"]
            seen.turns["othervictim"] = (other_turn, now)
        other_after = _other_files(host, main_state)
    seen.reached = listeners.reached()
    seen.stage("services stopped")
    checks = judge(plan, before, seen, other_after)
    seen.stage("judged")
    times = list(seen.stages.items())
    print("stages (s):", [(n, round(t - times[0][1], 1)) for n, t in times])
    print("slow steps (s):", {r: a.get("_seconds") for r, a in seen.agents.items()})
    for name, (held, evidence) in sorted(checks.items()):
        print(f"{'held    ' if held else 'BREACHED'} {name}: {evidence[:200]}")
    breaches = {name: evidence for name, (held, evidence) in checks.items() if not held}
    report = "\n".join(f"  {name}: {evidence}" for name, evidence in sorted(breaches.items()))
    assert not breaches, f"{len(breaches)} of {len(checks)} attacks got through:\n{report}"


# ---------------------------------------------------------------- the named checks

Checks = dict[str, tuple[bool, str]]


def _refused(outcome: str | None) -> bool:
    """A step that did not get what it tried (an error, a refusal, a failed program)."""
    return outcome is None or not (outcome.startswith("ok:") or outcome.startswith("rc:0:"))


def _held(code: str | None) -> bool:
    return code in TYPED_REFUSALS


def judge(plan: Plan, before: Before, seen: Seen, other_after: dict[str, str]) -> Checks:
    """Every attack's check: name -> (held, evidence)."""
    checks: Checks = {}

    def check(name: str, held: bool, evidence: object) -> None:
        checks[name] = (held, str(evidence)[:600])

    _secrets_checks(plan, before, seen, other_after, check)
    _pane_checks(plan, seen, check)
    _home_checks(plan, before, seen, check)
    _git_checks(plan, before, seen, check)
    _host_checks(plan, seen, check)
    return checks


Check = Any  # the ``check(name, held, evidence)`` callback


def _secrets_checks(
    plan: Plan, before: Before, seen: Seen, other_after: dict[str, str], check: Check
) -> None:
    """The token, other CLIs' credentials, the other service of the user (items 3, 15)."""
    host, rev = plan.host, seen.agents["reviewer"]
    for role, outcomes in seen.agents.items():
        check(f"{role}: reads this service's token", _refused(outcomes["token"]), outcomes["token"])
        for name, outcome in outcomes.items():
            if name.startswith("creds:"):
                check(f"{role}: reads {name[6:]}'s credentials", _refused(outcome), outcome)
    check("token file unchanged", host.token.read_bytes() == before.token, "")
    for name in ("other:token", "other:state_dir", "other:pane_record"):
        check(f"reviewer: {name}", _refused(rev.get(name)), rev.get(name))
    check("other service: token unchanged", host.other_token.read_bytes() == before.other_token, "")
    moved = changed(before.other, other_after)
    check("other service: state unchanged", not moved, moved)
    for name in plan.sockets:
        reached = rev.get(f"socket:{name}")
        check(f"reviewer: connects to {name}", _refused(reached), reached)
    for name, outcome in rev.items():
        if name.startswith(("feed:", "ctl:")):
            check(f"reviewer: {name} answers", _refused(outcome), outcome)


def _pane_checks(plan: Plan, seen: Seen, check: Check) -> None:
    """No text typed into another pane: this service's two, the other's (items 3, 5)."""
    rev = seen.agents["reviewer"]
    via = {
        "victim": f"{rev.get('ask_victim')} / as boss: {seen.phase2.get('ask_victim_as_boss')}",
        "bystander": rev.get("ask_bystander"),
        "othervictim": f"over the other's HTTP: {rev.get('other:http_send_input')}",
    }
    for name, (was, now) in seen.turns.items():
        screen = seen.screens[name]
        held = plan.marker not in screen and was == now
        check(f"{name} pane untouched", held, f"turn {was}->{now}, {via[name]}: {screen[-200:]!r}")
    for name in ("ask_victim", "ask_bystander"):
        check(f"reviewer: ctl {name}", _refused(rev.get(name)), rev.get(name))
    acquired = f"acquire: {seen.phase2.get('acquire_boss')}"
    ask = seen.phase2.get("ask_victim_as_boss")
    check(
        "reviewer: ctl acquire of the released boss, then ask", _refused(ask), f"{acquired}, {ask}"
    )


def _home_checks(plan: Plan, before: Before, seen: Seen, check: Check) -> None:
    """HOME: no file the operator's CLIs run programs from, nothing at all (item 4)."""
    moved = changed(before.home, _home_files(plan.host, seen.main_state))
    for step, rel in PLANTED_FILES.items():
        tries = {role: outcomes.get(f"home:{step}") for role, outcomes in seen.agents.items()}
        check(f"HOME: ~/{rel} as it was", rel not in moved, tries)
    rest = [rel for rel in moved if rel in before.home and rel not in PLANTED_FILES.values()]
    check("HOME: every other file as it was", not rest, rest)


def _git_checks(plan: Plan, before: Before, seen: Seen, check: Check) -> None:
    """The object store, the refs, what the service's Git ran (items 1, 6, 10, 18)."""
    wri, common = seen.agents["writer"], plan.common
    lane = f"refs/heads/{LANE_BRANCH}"
    fsck = fsck_store(common, lane, plan.host.base / "fsck")
    check(
        "object store: git fsck --full clean (from every ref but the lane's)",
        fsck.returncode == 0,
        fsck.stderr.decode()[-300:],
    )
    after = objects(common)
    altered = sorted(oid for oid, data in before.objects.items() if after.get(oid) != data)
    check(
        "object store: every object as it was",
        not altered,
        f"{altered} {wri['replace_recipe_blob']}",
    )
    refs_after = refs(common)
    moved = {
        ref: (before.refs.get(ref), refs_after.get(ref))
        for ref in before.refs.keys() | refs_after.keys()
        if ref != lane and before.refs.get(ref) != refs_after.get(ref)
    }
    tried = f"update-ref: {wri['move_main_update_ref']}, loose ref: {wri['move_main_loose']}"
    check("every ref but the lane's unchanged", not moved, f"{moved} ({tried})")
    markers = plan.host.markers
    ran = (markers / "filter-ran").read_text() if (markers / "filter-ran").exists() else ""
    for label, name in (("symlinked-submodule", "symlinked .git"), ("nested-embedded", "nested")):
        setup = wri[label.replace("-", "_")]
        check(f"no planted filter ran ({name})", label not in ran, f"{ran.split()} ({setup[:200]})")
    stolen = (markers / "stolen").read_bytes() if (markers / "stolen").exists() else b""
    check(
        "the token never left through a planted program",
        before.token.strip() not in stolen,
        stolen[:80],
    )

    snap, snap_code = seen.calls["snapshot"]
    snap2, snap2_code = seen.calls["snapshot2"]
    run, run_code = seen.calls["verify"]
    check(
        "verify does not pass broken code (forged recipe)",
        _held(run_code) or (run is not None and run["state"] != "passed"),
        run_code or (run or {}).get("state"),
    )
    digests = [(s or {}).get("worktree_sha256") for s in (snap, snap2)]
    check(
        "an ignored file is part of the worktree digest",
        _held(snap_code) or _held(snap2_code) or digests[0] != digests[1],
        f"{snap_code or snap2_code or digests} ({wri['ignored_shadow']})",
    )
    moved_dir, moved_code = seen.calls["snapshot_commondir"]
    lane_head = refs_after.get(lane)
    head_seen = moved_code or (moved_dir or {}).get("head")
    check(
        "verification_snapshot reports the branch's own HEAD (rewritten commondir)",
        _held(moved_code) or head_seen == lane_head,
        f"{head_seen} vs {lane_head} ({wri['rewrite_commondir']})",
    )
    released, code = seen.calls["release"]
    check(
        "writer_release: released or a typed refusal", code is None or _held(code), code or released
    )


def _host_checks(plan: Plan, seen: Seen, check: Check) -> None:
    """What the reviewer tried on the host (items 2, 7, 8, 11, 19, 20)."""
    rev, reached = seen.agents["reviewer"], seen.reached
    check(
        "reviewer: opens /proc/sys/kernel/core_pattern for writing",
        _refused(rev["core_pattern"]),
        rev["core_pattern"],
    )
    for step, name, what in (
        ("loopback_tcp", "tcp", "a host loopback TCP port"),
        ("abstract_socket", "abstract", "a host abstract Unix socket"),
        ("session_bus", "bus", "the session bus in XDG_RUNTIME_DIR"),
    ):
        held = _refused(rev[step]) and not reached[name]
        check(f"reviewer: reaches {what}", held, f"{rev[step]}, {reached[name]} queued")
    keyring = rev["session_keyring"]
    check("reviewer: reads the service's session keyring", not keyring.startswith("ok:"), keyring)
    check("reviewer: unshare -U true", _refused(rev["user_namespace"]), rev["user_namespace"])
    forks = rev["processes"]
    check(f"reviewer: starts {FORKS} processes", forks != f"ok:{FORKS}", forks)
    filled = rev["tmp_size"]
    check(f"reviewer: writes {FILL_BYTES >> 30} GiB to /tmp", filled != f"ok:{FILL_BYTES}", filled)
    _, code = seen.calls["flood_start"]
    flood = seen.phase2.get("ctl_flood")
    check(
        f"start_pane while the reviewer holds {CTL_CONNECTIONS} ctl connections",
        code is None,
        f"{code} ({flood})",
    )
    edit = rev["edit_reviewed_repo"]
    check("reviewer: edits the repository it reviews", _refused(edit), edit)
