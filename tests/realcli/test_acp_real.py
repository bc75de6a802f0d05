"""Real CLIs in ACP mode (profile ``protocol: "acp"``), against the loopback fake model.

The same configs as the terminal dialogs (``tests/tools/fake_model.py``:
``write_cli_configs`` and ``cli_env``), the argv measured in ``../shared/agents.md``:
``gemini --acp --approval-mode default``, ``qwen --acp --approval-mode default``,
``opencode acp``; Claude Code and Codex through ``@zed-industries/claude-code-acp`` and
``@zed-industries/codex-acp`` (no arguments). Each CLI is started once, confined, and
plays four turns in that one pane (CI time): a plain prompt ends ``done`` at turn 1 with
the reply on screen; a tool call reads ``blocked``/``permission``, ``allow_once`` runs
it once and the turn ends ``done``; the same call again asks again, ``deny_once`` runs
nothing and the turn reads ``cancelled`` (all but Codex end it ``end_turn`` themselves);
``interrupt_pane`` while the model is slow to answer ends the turn ``cancelled``.
OpenCode's ``usage`` is carried by ``get_status``. Every status is the protocol's
(``source: "acp"``); ``remove_pane`` leaves no process of the CLI.

Opt-in (``PANEWARDEN_ACP_STARTS=N``): each CLI started N times, its first prompt sent at
once, always turn 1 and ``done``, nothing left after ``remove_pane`` (``-s`` prints the
slowest start to done).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.conftest import Tools, stdio_params
from tests.realcli import cli_path, model_network, need, procs_of, remove_and_check_nothing_left
from tests.tools.fake_model import FakeModel, cli_env, write_cli_configs

pytestmark = pytest.mark.anyio

PACKAGES = {
    "gemini": "@google/gemini-cli",
    "qwen": "@qwen-code/qwen-code",
    "opencode": "opencode-ai",
    # Claude Code and Codex through Zed's adapters (they embed the agent: the Claude
    # Agent SDK's own CLI, Codex's core), with the same config and env as their TUIs.
    # Measured with 0.16.2 as root, confined or not: no IS_SANDBOX needed (it would only
    # make the adapter offer a bypassPermissions mode, docs/acp.md).
    "claude": "@zed-industries/claude-code-acp",
    "codex": "@zed-industries/codex-acp",
}
ACP_ARGS = {
    "gemini": ["--acp", "--approval-mode", "default"],
    "qwen": ["--acp", "--approval-mode", "default"],
    "opencode": ["acp"],
    "claude": [],
    "codex": [],
}
SETTLED = ["done", "cancelled", "error"]
# Opt-in: PANEWARDEN_ACP_STARTS=20 starts each CLI that many times (CI: 0, the test
# above already proves the first start; 20 starts of five CLIs cost minutes).
STARTS = int(os.environ.get("PANEWARDEN_ACP_STARTS", "0"))


@dataclass
class Env:
    tools: Tools
    home: Path
    work: Path
    model: FakeModel


@pytest.fixture
def fake_model(tmp_path: Path) -> Iterator[FakeModel]:
    with FakeModel(tmp_path / "model.log") as model:
        yield model


@pytest.fixture
async def acp_env(tmp_path: Path, fake_model: FakeModel) -> AsyncIterator[Env]:
    home = tmp_path / "home"
    short = Path(tempfile.mkdtemp(prefix="pw-"))
    work = short / "work"
    home.mkdir()
    work.mkdir()
    await anyio.run_process(["git", "init", "-q", str(work)])
    write_cli_configs(home, work, fake_model.url)
    profiles = {
        "profiles": [
            {
                "name": cli,
                "agent": cli,
                "argv": [str(cli_path(package)), *ACP_ARGS[cli]],
                "cwds": [str(work)],
                "env": cli_env(cli, fake_model.url, home),
                "confine": True,
                "network": model_network(fake_model.port),
                "protocol": "acp",
            }
            for cli, package in PACKAGES.items()
        ]
    }
    pfile = tmp_path / "profiles.json"
    pfile.write_text(json.dumps(profiles))
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    try:
        async with Client(stdio_params(state, PANEWARDEN_PROFILES=str(pfile))) as client:
            yield Env(Tools(client), home, work, fake_model)
    finally:
        for proc in procs_of(home):
            proc.kill()
        shutil.rmtree(short, ignore_errors=True)


async def _turn(env: Env, cli: str, text: str, until: list[str]) -> tuple[dict[str, Any], ...]:
    sent = await env.tools.call("send_input", name=cli, text=text)
    status = await env.tools.wait(cli, after=sent["seq"], until=until, timeout_s=90)
    return sent, status


@pytest.mark.parametrize("cli", list(PACKAGES))
async def test_plain_allow_once_and_deny_once_turns_in_acp_mode(acp_env: Env, cli: str) -> None:
    need(PACKAGES[cli])
    env = acp_env
    started = time.monotonic()
    await env.tools.call("start_pane", name=cli, profile=cli)
    status = await env.tools.call("get_status", name=cli)
    assert (status["state"], status["source"]) == ("idle", "acp"), status
    # A plain prompt, sent at once (it waits for the session): turn 1, done, the reply.
    sent, done = await _turn(env, cli, "SAY: hello from panewarden", SETTLED)
    first_turn_s = time.monotonic() - started
    screen = (await env.tools.call("read_output", name=cli))["text"]
    assert (sent["turn"], done["state"], done["turn"]) == (1, "done", 1), (done, screen)
    assert done["source"] == "acp", done
    replies = [line for line in screen.splitlines() if "hello from panewarden" in line]
    assert any("SAY:" not in line for line in replies), screen  # the reply, not the prompt
    assert env.model.tool_calls() == []
    # A tool: blocked (permission), allow_once runs it once, the turn ends done.
    marker = env.work / "allowed.marker"
    sent, blocked = await _turn(env, cli, f"RUN: touch {marker.name}", ["blocked", *SETTLED])
    screen = (await env.tools.call("read_output", name=cli))["text"]
    assert (blocked["state"], blocked["kind"], blocked["turn"]) == ("blocked", "permission", 2), (
        blocked,
        screen,
    )
    refused = await env.tools.error("send_input", name=cli, text="sneaky")
    assert refused["code"] == "pane_blocked", refused
    assert not marker.exists()
    answered = await env.tools.call("answer_dialog", name=cli, answer="allow_once")
    done = await env.tools.wait(cli, after=answered["seq"], until=SETTLED, timeout_s=90)
    assert (done["state"], done["turn"]) == ("done", 2), done
    assert marker.exists(), "allow_once did not let the command run"
    ran_at = marker.stat().st_mtime_ns
    # The same call again: it asks again (nothing remembered); deny_once runs nothing.
    sent, blocked = await _turn(env, cli, f"RUN: touch {marker.name}", ["blocked", *SETTLED])
    assert (blocked["state"], blocked["turn"]) == ("blocked", 3), blocked
    answered = await env.tools.call("answer_dialog", name=cli, answer="deny_once")
    ended = await env.tools.wait(cli, after=answered["seq"], until=SETTLED, timeout_s=90)
    assert (ended["state"], ended["turn"]) == ("cancelled", 3), ended
    assert marker.stat().st_mtime_ns == ran_at, "the denied command ran"
    # interrupt_pane mid-turn (the model slow to answer): session/cancel, cancelled.
    env.model.delay_s = 5.0
    await _turn(env, cli, "SAY: this turn is interrupted", ["working"])
    cut = await env.tools.call("interrupt_pane", name=cli)
    ended = await env.tools.wait(cli, after=cut["seq"], until=SETTLED, timeout_s=60)
    assert (ended["state"], ended["turn"]) == ("cancelled", 4), ended
    env.model.delay_s = 0.0
    if cli == "opencode":
        # Its stop results carry the token usage; get_status shows it.
        assert "usage" in (await env.tools.call("get_status", name=cli)), cli
    print(f"{cli}: first turn done {first_turn_s:.1f} s after start_pane")
    await remove_and_check_nothing_left(env.tools, cli, env.home)


@pytest.mark.skipif(STARTS == 0, reason="opt-in: PANEWARDEN_ACP_STARTS=N")
@pytest.mark.timeout(60 + 60 * max(STARTS, 1))
@pytest.mark.parametrize("cli", list(PACKAGES))
async def test_every_start_takes_its_first_prompt_as_turn_1(acp_env: Env, cli: str) -> None:
    need(PACKAGES[cli])
    env = acp_env
    took: list[float] = []
    for i in range(STARTS):
        started = time.monotonic()
        await env.tools.call("start_pane", name=cli, profile=cli)
        sent, done = await _turn(env, cli, f"SAY: start {i}", SETTLED)
        assert (sent["turn"], done["state"], done["turn"]) == (1, "done", 1), (i, sent, done)
        took.append(time.monotonic() - started)
        await remove_and_check_nothing_left(env.tools, cli, env.home)
    took.sort()
    print(f"{cli}: {STARTS} starts, turn 1 done each; median {took[len(took) // 2]:.1f} s,")
    print(f"{cli}: slowest {took[-1]:.1f} s (start_pane to done)")
