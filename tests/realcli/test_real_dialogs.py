"""Real tool-permission dialogs of the pinned CLIs, reached through a fake model on loopback.

Offline no CLI asks for a tool, so each runs against ``tests/tools/fake_model.py``: the
first request of a turn is answered with a shell call running the command after ``RUN:``
in the prompt, the request after the tool result with a short text. Each CLI runs in a real
pane driven by the SDK client, confined (``confine: true``: in its Bubblewrap sandbox, HOME
read-only but for the CLI's own paths), with a fresh HOME holding the config that points
it at the server and makes it ask before running shell commands:

- opencode: ``~/.config/opencode/opencode.json`` with a custom openai-compatible provider
  and ``"permission": {"bash": "ask", "edit": "ask"}``;
- claude: ``ANTHROPIC_BASE_URL`` + ``ANTHROPIC_AUTH_TOKEN``, ``~/.claude.json`` with
  onboarding done and the folder trusted, ``~/.claude/settings.json`` with
  ``permissions.defaultMode = "default"`` (2.1.332 defaults to auto mode, which asks nothing);
- codex: ``~/.codex/config.toml`` with a custom ``model_provider`` (Responses API),
  ``approval_policy = "on-request"``, ``sandbox_mode = "read-only"``, the folder trusted; the
  fake model's call asks for ``sandbox_permissions = "require_escalated"``, which is what
  makes Codex ask;
- gemini: ``GEMINI_API_KEY`` + ``GOOGLE_GEMINI_BASE_URL``, ``~/.gemini/settings.json`` with
  API-key auth and a model, the folder in ``~/.gemini/trustedFolders.json``; argv pins
  ``--approval-mode default``;
- qwen: ``OPENAI_API_KEY`` + ``OPENAI_BASE_URL`` + ``OPENAI_MODEL``, ``~/.qwen/settings.json``
  with auth type ``openai`` — and, on purpose, ``tools.approvalMode = "yolo"``: argv pins
  ``--approval-mode default``, and the dialogs still show, so the pin is what keeps them on.
  Gemini and Qwen run with the model answering after 1 s, so that their turns are seen
  working.

What is checked: ``allow_once`` runs the command exactly once (the marker appears) and the
turn ends ``done``; the same command in the next turn asks again (no rule was created);
``deny_once`` runs nothing and the turn ends ``cancelled``; ``send_input`` while the dialog
is shown is refused with ``pane_blocked``; for gemini and qwen also a plain prompt (a text
reply, no tool) ends ``done`` at turn 1 with the reply on screen, and the pane stays
``blocked`` while a dialog is shown. Skipped when a CLI is not installed.
"""

from __future__ import annotations

import json
import shutil
import tempfile
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
    "opencode": "opencode-ai",
    "claude": "@anthropic-ai/claude-code",
    "codex": "@openai/codex",
    "gemini": "@google/gemini-cli",
    "qwen": "@qwen-code/qwen-code",
}
TITLED = ["gemini", "qwen"]
# Text each CLI shows once it takes prompts (Claude: its status report says idle).
READY = {
    "opencode": "Ask anything",
    "claude": None,
    "codex": "Ask Codex to do anything",
    "gemini": "Type your message",
    "qwen": "Type your message",
}
EXTRA_ARGS = {
    "codex": ["--disable", "daemon_auto_start"],
    "gemini": ["--approval-mode", "default"],
    "qwen": ["--approval-mode", "default"],
}
SETTLED = ["done", "cancelled"]
# What the dialog shows, as a check that the screen is the measured one.
DIALOG_TEXT = {
    "opencode": "Allow always",
    "claude": "Do you want to proceed?",
    "codex": "Would you like to run the following command?",
    "gemini": "Allow execution of [Shell]?",
    "qwen": "Waiting for user confirmation",
}
# The model's answer latency for CLIs whose turns are read from the screen and title.
MODEL_DELAY_S = 1.0


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
async def dialog_env(tmp_path: Path, fake_model: FakeModel) -> AsyncIterator[Env]:
    home = tmp_path / "home"
    # The CLIs draw the working directory on screen (Codex's footer: "model · <cwd> · <the
    # session's first prompt>"): a short path of a fixed length keeps such a line from
    # wrapping, whatever the temp root is (a pytest-NNN, an xdist worker's popen-gwN).
    short = Path(tempfile.mkdtemp(prefix="pw-"))
    work = short / "work"
    home.mkdir()
    work.mkdir()
    await anyio.run_process(["git", "init", "-q", str(work)])
    write_cli_configs(home, work, fake_model.url)
    # The worst setting Qwen Code has: only the pinned --approval-mode keeps dialogs on.
    settings = home / ".qwen" / "settings.json"
    settings.write_text(
        json.dumps({**json.loads(settings.read_text()), "tools": {"approvalMode": "yolo"}})
    )
    profiles: dict[str, Any] = {"profiles": []}
    for cli, package in PACKAGES.items():
        profiles["profiles"].append(
            {
                "name": cli,
                "agent": cli,
                "argv": [str(cli_path(package)), *EXTRA_ARGS.get(cli, [])],
                "cwds": [str(work)],
                "env": cli_env(cli, fake_model.url, home),
                # The full turns run confined (docs/operations.md, "Confined panes"):
                # the CLIs must work unchanged in the sandbox.
                "confine": True,
                "network": model_network(fake_model.port),
            }
        )
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


def _need(cli: str) -> None:
    need(PACKAGES[cli])


async def _ready(env: Env, cli: str, *, start: bool = True) -> dict[str, Any]:
    """Start the pane (unless it was started already) and wait until it takes a prompt."""
    if cli in TITLED:
        env.model.delay_s = MODEL_DELAY_S
    if start:
        await env.tools.call("start_pane", name=cli, profile=cli)
    if READY[cli] is not None:
        match = await env.tools.call("wait_output", name=cli, pattern=READY[cli], timeout_s=40)
        assert match["matched"], f"{cli} never showed {READY[cli]!r}"
    status = await env.tools.call("wait_status", name=cli, until=["idle"], timeout_s=40)
    screen = (await env.tools.call("read_output", name=cli))["text"]
    assert not status["timed_out"], f"{cli} never read idle: {status}\n{screen}"
    return dict(status["status"])


async def _ask(env: Env, cli: str, marker: str, after: int) -> dict[str, Any]:
    """Send a prompt whose tool call is ``touch marker``; wait for the permission dialog."""
    await env.tools.call("send_input", name=cli, text=f"RUN: touch {marker}")
    blocked = await env.tools.wait(cli, after=after, until=["blocked"], timeout_s=40)
    assert (blocked["state"], blocked["kind"]) == ("blocked", "permission"), blocked
    # Claude reports blocked a moment before it draws the dialog.
    shown = await env.tools.call("wait_output", name=cli, pattern=DIALOG_TEXT[cli], timeout_s=10)
    screen = (await env.tools.call("read_output", name=cli))["text"]
    assert shown["matched"] and f"touch {marker}" in screen, screen
    if cli in TITLED:
        # Never idle or done while the dialog is shown (their titles say "ready" over
        # other screens): nothing new is recorded while it waits.
        moved = await env.tools.call(
            "wait_status", name=cli, after_seq=blocked["seq"], until=WHILE_SHOWN, timeout_s=3
        )
        assert moved["timed_out"], moved
        assert DIALOG_TEXT[cli] in (await env.tools.call("read_output", name=cli))["text"]
    return blocked


WHILE_SHOWN = ["idle", "done", "cancelled", "working", "unknown", "error", "exited", "lost"]


async def _remove(env: Env, cli: str) -> None:
    await remove_and_check_nothing_left(env.tools, cli, env.home)


@pytest.mark.parametrize("cli", list(PACKAGES))
async def test_allow_once_runs_the_command_once_and_the_next_call_asks_again(
    dialog_env: Env, cli: str
) -> None:
    _need(cli)
    env = dialog_env
    marker = env.work / "allowed.marker"
    idle = await _ready(env, cli)
    blocked = await _ask(env, cli, marker.name, idle["seq"])
    refused = await env.tools.error("send_input", name=cli, text="sneaky")
    assert refused["code"] == "pane_blocked"
    assert not marker.exists()

    await env.tools.call(
        "answer_dialog", name=cli, answer="allow_once", expect_turn=blocked["turn"]
    )
    done = await env.tools.wait(
        cli, after=blocked["seq"], until=["done", "cancelled"], timeout_s=40
    )
    assert (done["state"], done["turn"]) == ("done", blocked["turn"]), done
    assert marker.exists(), "allow_once did not let the command run"
    ran_at = marker.stat().st_mtime_ns

    # The identical call again: a rule-creating option would have let it run unasked.
    again = await _ask(env, cli, marker.name, done["seq"])
    # A later turn: a permission dialog straight after a finished turn opens one even when
    # the brief `working` between them is never seen on screen. (Not `== +1`: a CLI that
    # reports an idle between retries of one request would count two.)
    assert again["turn"] > blocked["turn"], again
    await env.tools.call("answer_dialog", name=cli, answer="deny_once", expect_turn=again["turn"])
    ended = await env.tools.wait(cli, after=again["seq"], until=SETTLED, timeout_s=40)
    assert (ended["state"], ended["turn"]) == ("cancelled", again["turn"]), ended
    assert marker.stat().st_mtime_ns == ran_at, "the denied command ran"
    assert len(env.model.tool_calls()) == 2
    await _remove(env, cli)


@pytest.mark.parametrize("cli", TITLED)
async def test_a_plain_prompt_is_turn_1_and_ends_done_with_the_reply_on_screen(
    dialog_env: Env, cli: str
) -> None:
    _need(cli)
    env = dialog_env
    idle = await _ready(env, cli)
    assert (idle["turn"], idle["source"]) == (0, "title"), idle
    sent = await env.tools.call("send_input", name=cli, text="SAY: hello from panewarden")
    done = await env.tools.wait(cli, after=sent["seq"], until=SETTLED, timeout_s=40)
    assert (done["state"], done["turn"], done["source"]) == ("done", 1, "title"), done
    screen = (await env.tools.call("read_output", name=cli))["text"]
    replies = [line for line in screen.splitlines() if "hello from panewarden" in line]
    assert any("SAY:" not in line for line in replies), screen  # the reply, not the prompt
    assert env.model.tool_calls() == []
    await _remove(env, cli)


@pytest.mark.parametrize("cli", list(PACKAGES))
async def test_deny_once_runs_nothing_and_cancels_the_turn(dialog_env: Env, cli: str) -> None:
    _need(cli)
    env = dialog_env
    marker = env.work / "denied.marker"
    idle = await _ready(env, cli)
    blocked = await _ask(env, cli, marker.name, idle["seq"])
    await env.tools.call("answer_dialog", name=cli, answer="deny_once")
    ended = await env.tools.wait(
        cli, after=blocked["seq"], until=["done", "cancelled"], timeout_s=40
    )
    assert (ended["state"], ended["turn"]) == ("cancelled", blocked["turn"]), ended
    assert not marker.exists(), "deny_once let the command run"
    await _remove(env, cli)
