"""A real coding CLI as the orchestrator: Claude Code drives panewarden's coordination tools.

Claude Code runs in a pane of an outer panewarden service (the usual real-CLI harness),
pointed at ``tests/tools/fake_model.py`` on loopback. Its own MCP server is a second,
inner ``panewarden serve --stdio`` with its own state dir and a ``demo`` profile, given
with ``--mcp-config``/``--strict-mcp-config``; ``~/.claude/settings.json`` allows
``mcp__panewarden``, so its tools run without a permission dialog. The prompt
``COORDINATE: …`` makes the fake model script the calls, each built from the results
Claude Code hands back: ``ToolSearch`` (2.1.332 offers MCP tools by name only until their
schemas are fetched, and a keyword search waits for a server still connecting),
``controller_acquire``, ``reviewer_start`` (a demo-agent pane under the inner service),
``wait_status`` idle, ``relay``, ``collect_handoffs``, then a final text repeating the
receipt and the reviewer's reply.

Checked from outside: the panewarden calls the model made, in order, under Claude Code's
names; the inner state dir's content-free records (one active controller lease of the
coordinator, held by the ``stdio`` identity, its fence token nowhere on disk; one active
reviewer lease of the pane; one receipt of that lease ``completed`` with result ``done``);
the receipt and the reviewer's reply on Claude Code's screen; and, once the outer pane is
removed, no process left (Claude Code, the inner server, its worker, the demo agent: all
run with the test's HOME). Skipped when Claude Code is not installed.
"""

from __future__ import annotations

import json
import secrets
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.conftest import Tools, stdio_params
from tests.realcli import cli_path, need, procs_of, remove_and_check_nothing_left
from tests.tools.fake_model import COORDINATOR_ID, FakeModel, cli_env, write_cli_configs

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(150)]

CLAUDE = "@anthropic-ai/claude-code"
SERVER = "panewarden"
STEPS = ["controller_acquire", "reviewer_start", "wait_status", "relay", "collect_handoffs"]
REVIEWER = "rev"


@dataclass
class Orchestrator:
    tools: Tools  # the outer service, where Claude Code's pane runs
    model: FakeModel
    home: Path
    inner_state: Path  # the state dir of Claude Code's own panewarden server
    review: Path  # where the reviewer pane may run


def _write_mcp_config(tmp: Path, home: Path) -> Path:
    """Claude Code's MCP configuration: an inner stdio service with a demo profile."""
    inner_state = tmp / "inner-state"
    inner_state.mkdir(mode=0o700)
    review = tmp / "review"
    review.mkdir()
    demo = {
        "name": "demo",
        "agent": "demo",
        "argv": [sys.executable, "-m", "supervisor.demo.agent"],
        "cwds": [str(review)],
    }
    profiles = tmp / "inner-profiles.json"
    profiles.write_text(json.dumps({"profiles": [demo]}))
    server = {
        "type": "stdio",
        "command": sys.executable,
        "args": ["-m", "supervisor", "serve", "--stdio"],
        "env": {
            "HOME": str(home),
            "PANEWARDEN_STATE_DIR": str(inner_state),
            "PANEWARDEN_PROFILES": str(profiles),
            "PANEWARDEN_LOG_LEVEL": "WARNING",
        },
    }
    config = tmp / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {SERVER: server}}))
    return config


@pytest.fixture
async def orchestrator(tmp_path: Path) -> AsyncIterator[Orchestrator]:
    need(CLAUDE)
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    await anyio.run_process(["git", "init", "-q", str(work)])
    with FakeModel(tmp_path / "model.log") as model:
        write_cli_configs(home, work, model.url)
        (home / ".claude" / "settings.json").write_text(
            json.dumps({"permissions": {"defaultMode": "default", "allow": [f"mcp__{SERVER}"]}})
        )
        mcp_config = _write_mcp_config(tmp_path, home)
        profile = {
            "name": "claude",
            "agent": "claude",
            "argv": [str(cli_path(CLAUDE)), "--mcp-config", str(mcp_config), "--strict-mcp-config"],
            "cwds": [str(work)],
            "env": cli_env("claude", model.url, home),
        }
        pfile = tmp_path / "profiles.json"
        pfile.write_text(json.dumps({"profiles": [profile]}))
        outer = tmp_path / "state"
        outer.mkdir(mode=0o700)
        try:
            async with Client(stdio_params(outer, PANEWARDEN_PROFILES=str(pfile))) as client:
                yield Orchestrator(
                    Tools(client), model, home, tmp_path / "inner-state", tmp_path / "review"
                )
        finally:
            for proc in procs_of(home):
                proc.kill()


def _records(directory: Path) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(directory.glob("*.json"))]


def _demo_agents(home: Path) -> list[Any]:
    return [p for p in procs_of(home) if "supervisor.demo.agent" in " ".join(p.cmdline())]


async def test_claude_code_acquires_a_lease_hands_off_and_collects_the_receipt(
    orchestrator: Orchestrator,
) -> None:
    env = orchestrator
    tools = env.tools
    ask = f"review {secrets.token_hex(4)}"
    await tools.call("start_pane", name="claude", profile="claude")
    idle = await tools.wait("claude", until=["idle"], timeout_s=40)
    prompt = f"COORDINATE: name={REVIEWER} profile=demo cwd={env.review} ask={ask}"
    await tools.call("send_input", name="claude", text=prompt)
    ended = await tools.wait(
        "claude", after=idle["seq"], until=["done", "cancelled", "error"], timeout_s=90
    )
    screen = (await tools.call("read_output", name="claude"))["text"]
    assert ended["state"] == "done", (ended, screen)

    # The model's calls: panewarden's tools in order, with ToolSearch loads in between.
    calls = [next(iter(r["answer"])) for r in env.model.tool_calls()]
    assert [c for c in calls if c != "ToolSearch"] == [f"mcp__{SERVER}__{s}" for s in STEPS], calls
    answers = [r["answer"] for r in env.model.requests if isinstance(r["answer"], str)]
    final = next((a for a in answers if a.startswith("COORDINATED ")), None)
    assert final is not None, (answers, screen)

    # The inner service's records, read from its state dir.
    (controller,) = _records(env.inner_state / "leases" / "controller")
    assert (controller["controller_id"], controller["state"]) == (COORDINATOR_ID, "active")
    assert controller["identity"] == "stdio:stdio"
    (reviewer,) = _records(env.inner_state / "leases" / "reviewer")
    assert (reviewer["name"], reviewer["state"], reviewer["controller_id"]) == (
        REVIEWER,
        "active",
        COORDINATOR_ID,
    )
    (receipt,) = _records(env.inner_state / "receipts")
    assert (receipt["state"], receipt["result"]["state"]) == ("completed", "done"), receipt
    assert (receipt["lease_id"], receipt["name"], receipt["turn"]) == (
        reviewer["lease_id"],
        REVIEWER,
        1,
    )
    token = next(
        r["answer"][f"mcp__{SERVER}__relay"]["creds"]["fence_token"]
        for r in env.model.tool_calls()
        if f"mcp__{SERVER}__relay" in r["answer"]
    )
    on_disk = [p for p in env.inner_state.rglob("*") if p.is_file() and token in p.read_text()]
    assert on_disk == [], on_disk

    # What came back, on the coordinator's screen: the receipt and the reviewer's reply.
    # (Claude Code reports `done` a read before it draws the answer.)
    assert final == f"COORDINATED receipt={receipt['receipt_id']} state=done reply: {ask}"
    shown = await tools.call("wait_output", name="claude", pattern=f"reply: {ask}", timeout_s=20)
    screen = (await tools.call("read_output", name="claude"))["text"]
    assert shown["matched"] and receipt["receipt_id"] in screen, screen
    now = await tools.call("get_status", name="claude")
    assert (now["state"], now["turn"]) == ("done", ended["turn"]), now

    assert _demo_agents(env.home), "the reviewer's demo agent is not running"
    await remove_and_check_nothing_left(tools, "claude", env.home, timeout_s=20)
