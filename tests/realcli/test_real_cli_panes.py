"""Real coding CLIs (installed from npm by .ci/run) in panes: screen, status, cleanup.

Each CLI starts offline with a fresh HOME and an empty git repository as cwd, as a
new user's would. The tests skip with a clear message when the pinned CLIs are not
installed (run ``bash tests/realcli/install.sh .npm-cli``).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from mcp import Client

from tests.conftest import Tools, stdio_params
from tests.polling import apoll
from tests.realcli import cli_path, need, procs_of, remove_and_check_nothing_left

pytestmark = pytest.mark.anyio


@pytest.fixture
async def cli_env(tmp_path: Path) -> AsyncIterator[tuple[Tools, Path]]:
    home = tmp_path / "home"
    work = tmp_path / "work"
    home.mkdir()
    work.mkdir()
    await anyio.run_process(["git", "init", "-q", str(work)])
    (home / ".claude.json").write_text('{"hasCompletedOnboarding": true}')
    profiles: dict[str, Any] = {"profiles": []}
    extra: list[str]
    for name, package, agent, extra in (
        ("claude", "@anthropic-ai/claude-code", "claude", []),
        ("codex", "@openai/codex", "codex", []),
        ("opencode", "opencode-ai", "opencode", []),
    ):
        path = cli_path(package)
        profiles["profiles"].append(
            {
                "name": name,
                "agent": agent,
                "argv": [str(path), *extra],
                "cwds": [str(work)],
                "env": {"HOME": str(home)},
            }
        )
    pfile = tmp_path / "profiles.json"
    pfile.write_text(json.dumps(profiles))
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    try:
        async with Client(stdio_params(state, PANEWARDEN_PROFILES=str(pfile))) as client:
            yield Tools(client), home
    finally:
        for proc in procs_of(home):
            proc.kill()


async def test_claude_trust_prompt_reads_blocked(cli_env: tuple[Tools, Path]) -> None:
    need("@anthropic-ai/claude-code")
    tools, home = cli_env
    await tools.call("start_pane", name="claude", profile="claude")
    match = await tools.call(
        "wait_output", name="claude", pattern="trust this folder", timeout_s=60
    )
    assert match["matched"], "the folder-trust prompt never showed"
    status = await tools.wait("claude", until=["blocked", "idle", "done"], timeout_s=30)
    # Claude turns its OSC 7501 reports on because the pane echoes the probe.
    assert (status["state"], status["kind"], status["source"]) == (
        "blocked",
        "permission",
        "osc7501",
    )
    text = (await tools.call("read_output", name="claude"))["text"]
    assert "Yes, I trust this folder" in text and "\x1b" not in text
    # Trusting a folder creates a rule: allow_once is refused and nothing is pressed.
    refused = await tools.error("answer_dialog", name="claude", answer="allow_once")
    assert refused["code"] == "dialog_refused"
    assert (await tools.call("get_status", name="claude"))["seq"] == status["seq"]
    # deny_once presses Esc: Claude Code declines to start in an untrusted folder.
    await tools.call("answer_dialog", name="claude", answer="deny_once")
    ended = await tools.wait("claude", after=status["seq"], until=["exited"], timeout_s=30)
    assert ended["lifecycle"] == "exited"
    shown = (await tools.call("read_output", name="claude", scrollback=True))["text"]
    assert "trusted" in shown
    await remove_and_check_nothing_left(tools, "claude", home, timeout_s=5)


async def test_codex_sign_in_reads_blocked_and_its_daemon_dies(cli_env: tuple[Tools, Path]) -> None:
    need("@openai/codex")
    tools, home = cli_env
    await tools.call("start_pane", name="codex", profile="codex")
    match = await tools.call(
        "wait_output", name="codex", pattern="Sign in with ChatGPT", timeout_s=60
    )
    assert match["matched"]
    status = await tools.wait("codex", until=["blocked", "idle", "done"], timeout_s=30)
    assert (status["state"], status["kind"]) == ("blocked", "auth"), status
    assert status["source"] == "screen"
    # Codex starts a managed app-server daemon in its own session; it must not survive.
    daemons: list[psutil.Process] = await apoll(
        lambda: [p for p in procs_of(home) if "app-server" in " ".join(p.cmdline())], 20
    )
    assert daemons, "codex started no app-server daemon this time"
    pane_pid = (await tools.call("list_panes"))["panes"][0]["pid"]
    assert all(os.getsid(p.pid) != pane_pid for p in daemons)  # escaped the pane's session
    await remove_and_check_nothing_left(tools, "codex", home, timeout_s=5)


async def test_opencode_home_screen_reads_idle(cli_env: tuple[Tools, Path]) -> None:
    need("opencode-ai")
    tools, home = cli_env
    await tools.call("start_pane", name="oc", profile="opencode")
    match = await tools.call("wait_output", name="oc", pattern="Ask anything", timeout_s=90)
    assert match["matched"]
    status = await tools.wait("oc", until=["idle", "blocked", "done"], timeout_s=30)
    assert status["state"] == "idle", status
    text = (await tools.call("read_output", name="oc"))["text"]
    assert "ctrl+p commands" in text
    await remove_and_check_nothing_left(tools, "oc", home, timeout_s=5)
