"""A confined pane gains no authority over ctl that its grant does not give, seen from
inside real confined panes running ``panewarden ctl``: a client's released controller
is not the pane's to take (its ids are ``pane:<name>/…``), idle connections from one pane
cannot spend the service's descriptors, a pane's reviewers are no wider than itself,
at most ``MAX_REVIEWERS_PER_PANE`` of them, removable by the client and ended with it."""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from supervisor.front.ctl.server import MAX_CONNECTIONS_PER_PANE
from supervisor.lanes.reviewer import MAX_REVIEWERS_PER_PANE
from tests.conftest import REPO, Tools, stdio_params
from tests.control.test_ctl import RUNNER, SHA, PaneShell, Ran
from tests.faults import alive, key_of, supervisor_of
from tests.polling import apoll

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

FLOOD = REPO / "tests" / "confine" / "ctl_flood.py"
FLOOD_CONNECTIONS = 1100
SETTLE_S = 60
AUTHORITY = ["--authority-ref", "r", "--authority-sha256", SHA]


def _profiles(tmp: Path, runner: Path | None = None) -> Path:
    """``cshell``: a confined shell with no network whose panes run a caller argv;
    ``hostnet``: the demo agent, confined, on the host's network; ``none``: the demo
    agent, confined, no network; ``demo``: the demo agent, unconfined; with ``runner``
    (a ``PaneShell``'s directory), ``crunner``: its ctl runner (confined as ``cshell``)."""
    demo = [sys.executable, "-m", "supervisor.demo.agent"]
    confined = {"confine": True, "cwds": ["/"]}
    profiles: list[dict[str, Any]] = [
        {
            "name": "cshell",
            "agent": "generic",
            "argv": ["/bin/sh"],
            "writable": [str(tmp)],
            "network": "none",
            **confined,
        },
        {"name": "hostnet", "agent": "demo", "argv": demo, "network": "host", **confined},
        {"name": "none", "agent": "demo", "argv": demo, "network": "none", **confined},
        {"name": "demo", "agent": "demo", "argv": demo, "cwds": ["/"]},
    ]
    if runner is not None:
        argv = [sys.executable, str(RUNNER), str(runner / "requests"), str(runner)]
        profiles.append({**profiles[0], "name": "crunner", "argv": argv})
    path = tmp / "profiles.json"
    path.write_text(json.dumps({"allow_arbitrary_command": True, "profiles": profiles}))
    return path


class Shell(PaneShell):
    """A confined pane (profile ``cshell``) running ``panewarden ctl`` for the test."""

    async def start(self) -> Shell:
        argv = [sys.executable, str(RUNNER), str(self.fifo), str(self.dir)]
        self.info = (
            await self.tools.call("start_pane", name=self.name, profile="cshell", argv=argv)
        )["pane"]
        assert self.info["confined"] is True, self.info
        found = await self.tools.call(
            "wait_output", name=self.name, pattern="runner ready", timeout_s=60
        )
        assert found["matched"], found
        return self


def _code(ran: Ran) -> tuple[int, str]:
    return ran.rc, ran.error_code()


async def _pane_names(tools: Tools) -> set[str]:
    return {p["name"] for p in (await tools.call("list_panes"))["panes"]}


async def test_a_released_clients_controller_is_not_a_panes_to_take(
    tmp_path: Path, state_dir: Path
) -> None:
    params = stdio_params(state_dir, PANEWARDEN_PROFILES=str(_profiles(tmp_path)))
    async with Client(params) as client:
        tools = Tools(client)
        acquire = {"controller_id": "boss", "authority_ref": "r", "authority_sha256": SHA}
        granted = await tools.call("controller_acquire", **acquire)
        creds = {k: granted[k] for k in ("controller_id", "lease_id", "fence_token")}
        await tools.call(
            "reviewer_start", creds=creds, name="rev", profile="demo", cwd="/", purpose="x"
        )
        await tools.wait("rev", until=["idle"])
        await tools.call(
            "controller_release", creds=creds, checkpoint_ref="done", checkpoint_sha256=SHA
        )
        # A README naming the id is enough to try.
        intruder = await Shell(tools, "intruder", tmp_path).start()
        taken = await intruder.ctl("--json", "acquire", "--controller-id", "boss", *AUTHORITY)
        # Its "boss" is its own: a pane's ids live in its namespace.
        assert taken.rc == 0 and taken.json()["controller_id"] == "pane:intruder/boss", taken
        status = (await intruder.ctl("--json", "status")).json()
        assert status["reviewers"] == [], status
        asked = await intruder.ctl("--json", "ask", "rev", "--", "typed by the intruder")
        assert _code(asked) == (1, "lease_conflict"), asked
        named = await intruder.ctl(
            "--json", "ask", "--controller-id", "pane:x/boss", "rev", "--", "hi"
        )
        assert named.rc != 0, named
        assert (await tools.call("get_status", name="rev"))["turn"] == 0
        # The client that released it, acquiring it again, finds its reviewer.
        again = await tools.call("controller_acquire", **acquire)
        creds = {k: again[k] for k in ("controller_id", "lease_id", "fence_token")}
        done = await tools.call("handoff", creds=creds, name="rev", text="mine again")
        assert [c["name"] for c in done["completed"]] == ["rev"], done


async def test_idle_connections_from_a_pane_are_refused_beyond_its_cap(
    tmp_path: Path, state_dir: Path
) -> None:
    """1,100 idle connections from one confined pane: all but the pane's cap are refused
    at once (``ctl_busy``), and the client still starts panes. The service runs with a
    soft descriptor limit of 1,024 (as many hosts do), so without the cap the flood
    exhausts it."""
    profiles = _profiles(tmp_path)
    results = tmp_path / "flood.json"
    base = stdio_params(state_dir, PANEWARDEN_PROFILES=str(profiles))
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < FLOOD_CONNECTIONS + 64:
        pytest.skip(f"the descriptor hard limit {hard} holds no flood of {FLOOD_CONNECTIONS}")
    params = StdioServerParameters(
        command="prlimit",
        args=[f"--nofile=1024:{hard}", base.command, *base.args],
        env=base.env,
        cwd=base.cwd,
    )
    async with Client(params) as client:
        tools = Tools(client)
        argv = [
            sys.executable,
            str(FLOOD),
            str(FLOOD_CONNECTIONS),
            str(MAX_CONNECTIONS_PER_PANE),
            str(results),
        ]
        pane = await tools.call("start_pane", name="flood", profile="cshell", argv=argv)
        assert pane["pane"]["confined"] is True
        held = results.with_name(results.name + ".connected")
        assert await apoll(held.exists, SETTLE_S), "the flood made no connections"
        # While the pane holds every connection it could make, the client starts panes.
        started = await tools.call("start_pane", name="after", profile="demo")
        assert started["pane"]["name"] == "after"
        await tools.wait("after", until=["idle"])
        assert await apoll(results.exists, SETTLE_S), "the flood wrote no results"
        seen = json.loads(results.read_text())
    assert seen["connected"] == FLOOD_CONNECTIONS, seen
    refused = FLOOD_CONNECTIONS - MAX_CONNECTIONS_PER_PANE
    assert seen["answers"] == {"ctl_busy": refused}, seen


async def test_a_pane_without_network_cannot_start_a_reviewer_with_network(
    tmp_path: Path, state_dir: Path
) -> None:
    params = stdio_params(state_dir, PANEWARDEN_PROFILES=str(_profiles(tmp_path)))
    async with Client(params) as client:
        tools = Tools(client)
        coord = await Shell(tools, "coord", tmp_path).start()
        acquired = await coord.ctl("--json", "acquire", "--controller-id", "c", *AUTHORITY)
        assert acquired.rc == 0, acquired
        start = ["--cwd", "/", "--purpose", "x"]
        wider = await coord.ctl("--json", "reviewer-start", "wide", "--profile", "hostnet", *start)
        assert _code(wider) == (1, "forbidden"), wider
        assert "network 'host'" in wider.err, wider
        assert "wide" not in await _pane_names(tools)
        (lease,) = (await tools.call("reviewer_list"))["leases"]
        assert lease["state"] == "failed_closed", lease
        # Within its own sandbox (no network either): allowed.
        narrow = await coord.ctl("--json", "reviewer-start", "narrow", "--profile", "none", *start)
        assert narrow.rc == 0 and narrow.json()["confined"] is True, narrow


async def _coordinator(tools: Tools, tmp: Path) -> Shell:
    coord = await Shell(tools, "coord", tmp).start()
    acquired = await coord.ctl("--json", "acquire", "--controller-id", "c", *AUTHORITY)
    assert acquired.rc == 0, acquired
    return coord


REVIEWER = ["--profile", "none", "--cwd", "/", "--purpose", "x"]


async def test_a_pane_starts_at_most_its_cap_of_reviewers(tmp_path: Path, state_dir: Path) -> None:
    params = stdio_params(state_dir, PANEWARDEN_PROFILES=str(_profiles(tmp_path)))
    async with Client(params) as client:
        tools = Tools(client)
        coord = await _coordinator(tools, tmp_path)
        for n in range(MAX_REVIEWERS_PER_PANE):
            ran = await coord.ctl("--json", "reviewer-start", f"rev{n}", *REVIEWER)
            assert ran.rc == 0, ran
        beyond = await coord.ctl("--json", "reviewer-start", "one-more", *REVIEWER)
        assert _code(beyond) == (1, "pane_limit"), beyond
        assert "one-more" not in await _pane_names(tools)
        assert len((await tools.call("reviewer_list"))["leases"]) == MAX_REVIEWERS_PER_PANE


async def test_reviewers_of_a_panes_reviewers_count_against_its_cap(
    tmp_path: Path, state_dir: Path
) -> None:
    profiles = _profiles(tmp_path, tmp_path / "shell-sub")
    async with Client(stdio_params(state_dir, PANEWARDEN_PROFILES=str(profiles))) as client:
        tools = Tools(client)
        # Makes the directory and FIFO the profile names (before its pane starts).
        nested = PaneShell(tools, "sub", tmp_path)
        assert nested.fifo == tmp_path / "shell-sub" / "requests"
        coord = await _coordinator(tools, tmp_path)
        ran = await coord.ctl(
            "--json", "reviewer-start", "sub", "--profile", "crunner", "--cwd", str(REPO),
            "--purpose", "x",
        )  # fmt: skip
        assert ran.rc == 0, ran
        found = await tools.call("wait_output", name="sub", pattern="runner ready", timeout_s=60)
        assert found["matched"], await tools.call("read_output", name="sub")
        acquired = await nested.ctl("--json", "acquire", "--controller-id", "c", *AUTHORITY)
        assert acquired.rc == 0 and acquired.json()["controller_id"] == "pane:sub/c", acquired
        for n in range(MAX_REVIEWERS_PER_PANE - 1):
            ran = await nested.ctl("--json", "reviewer-start", f"nested{n}", *REVIEWER)
            assert ran.rc == 0, ran
        for shell in (nested, coord):
            beyond = await shell.ctl("--json", "reviewer-start", "one-more", *REVIEWER)
            assert _code(beyond) == (1, "pane_limit"), beyond
        # The tree goes with its root.
        await tools.call("remove_pane", name="coord")

        async def all_gone() -> bool:
            return not await _pane_names(tools)

        assert await apoll(all_gone, SETTLE_S), await _pane_names(tools)


async def test_a_panes_reviewers_are_removable_by_the_client_and_end_with_it(
    tmp_path: Path, state_dir: Path
) -> None:
    params = stdio_params(state_dir, PANEWARDEN_PROFILES=str(_profiles(tmp_path)))
    async with Client(params) as client:
        tools = Tools(client)
        coord = await _coordinator(tools, tmp_path)
        for name in ("rev0", "rev1"):
            ran = await coord.ctl("--json", "reviewer-start", name, *REVIEWER)
            assert ran.rc == 0, ran

        async def failures() -> dict[str, tuple[str, str | None]]:
            leases = (await tools.call("reviewer_list"))["leases"]
            return {x["name"]: (x["state"], x["failure"]) for x in leases}

        # The client removes one before anything else would end it.
        await tools.call("remove_pane", name="rev0")

        async def first_ended() -> bool:
            return (await failures())["rev0"] == ("failed_closed", "removed")

        assert await apoll(first_ended, SETTLE_S), await failures()

        # The starter goes: so do its reviewers and its controller lease.
        await tools.call("remove_pane", name="coord")

        async def all_gone() -> bool:
            return not (await _pane_names(tools)) & {"coord", "rev0", "rev1"}

        assert await apoll(all_gone, SETTLE_S), await _pane_names(tools)

        async def second_ended() -> bool:
            return (await failures())["rev1"] == ("failed_closed", "starter_ended")

        assert await apoll(second_ended, SETTLE_S), await failures()
        (controller,) = (await tools.call("controller_list"))["leases"]
        assert controller["state"] == "released", controller


async def test_a_restart_ends_the_reviewers_whose_starter_did_not_come_back(
    tmp_path: Path, state_dir: Path
) -> None:
    params = stdio_params(state_dir, PANEWARDEN_PROFILES=str(_profiles(tmp_path)))
    async with Client(params) as client:
        tools = Tools(client)
        coord = await _coordinator(tools, tmp_path)
        ran = await coord.ctl("--json", "reviewer-start", "rev", *REVIEWER)
        assert ran.rc == 0, ran
        panes = {p["name"]: p for p in (await tools.call("list_panes"))["panes"]}
        rev_worker = key_of(panes["rev"]["worker_pid"])
        supervisor = key_of(supervisor_of(coord.info["worker_pid"]) or 0)
        coord_worker = key_of(coord.info["worker_pid"])
        assert supervisor is not None and coord_worker is not None and rev_worker is not None
        # A crash: the workers outlive the supervisor; then the starter's worker dies too.
        os.kill(supervisor[0], signal.SIGKILL)
        assert await apoll(lambda: not alive(supervisor), 10)
        os.kill(coord_worker[0], signal.SIGKILL)
        assert await apoll(lambda: not alive(coord_worker), 10)
    async with Client(params) as client:
        tools = Tools(client)
        await client.list_tools()  # a started service
        assert "coord" not in await _pane_names(tools)

        async def ended() -> bool:
            (lease,) = (await tools.call("reviewer_list"))["leases"]
            return (lease["state"], lease["failure"]) == ("failed_closed", "starter_ended")

        assert await apoll(ended, SETTLE_S), await tools.call("reviewer_list")
        assert "rev" not in await _pane_names(tools)
        assert await apoll(lambda: not alive(rev_worker), SETTLE_S)
