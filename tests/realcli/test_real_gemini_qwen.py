"""Gemini CLI 0.61.0 and Qwen Code 0.24.4 in panes: start-up screens, removal, repeated starts.

Each profile gets its own fresh HOME, set up for the screen under test:

- ``gemini-trust``: API-key auth configured, the folder not trusted → the folder-trust prompt;
- ``gemini-auth``: the folder trusted, no auth → the "How would you like to authenticate"
  menu;
- ``qwen-provider``: nothing configured → the "Connect a Provider" menu;
- ``qwen-trust``: ``security.folderTrust.enabled`` → Qwen's folder-trust prompt;
- ``gemini-a``/``-b`` and ``qwen-a``/``-b``: pointed at ``tests/tools/fake_model.py`` (as
  in ``test_real_dialogs.py``), for the repeated starts.

What is checked: start-up screens read ``blocked`` with the right kind and never ``idle`` (the
pane's whole status history is searched, although both CLIs' titles say "ready" there);
``allow_once`` never trusts a folder (nothing is written to ``trustedFolders.json``); an auth
screen is never answered; ``remove_pane`` leaves no process (Gemini ignores SIGHUP, Qwen
SIGTERM: the worker's SIGKILL after its grace ends them). Twenty starts of each CLI in a row:
start-up counts no turn and the first prompt is turn 1. Skipped when a CLI is not installed.
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.conftest import Tools, stdio_params
from tests.polling import apoll
from tests.realcli import cli_path, need, procs_of, remove_and_check_nothing_left
from tests.tools.fake_model import FakeModel, cli_env, write_cli_configs

pytestmark = pytest.mark.anyio

GEMINI = "@google/gemini-cli"
QWEN = "@qwen-code/qwen-code"
PIN = ["--approval-mode", "default"]
SETTLED_OR_IDLE = ["idle", "done", "blocked", "cancelled", "error"]
REPEATS = 20  # per CLI
# How long the fake model takes per answer in the repeated starts: long enough for two
# looks of the screen rules at the working turn.
REPEAT_DELAY_S = 0.3


@dataclass
class Env:
    tools: Tools
    homes: dict[str, Path]
    work: Path


def _gemini_settings(home: Path, *, auth: bool) -> None:
    (home / ".gemini").mkdir(parents=True)
    settings: dict[str, Any] = {"general": {"enableAutoUpdate": False}}
    if auth:
        settings["security"] = {"auth": {"selectedType": "gemini-api-key"}}
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))


# Profile name -> (agent, package, extra variables); each HOME is written by _prepare.
SETUPS = {
    "gemini-trust": ("gemini", GEMINI, {"GEMINI_API_KEY": "dummy"}),
    "gemini-auth": ("gemini", GEMINI, {}),
    "qwen-provider": ("qwen", QWEN, {}),
    "qwen-trust": ("qwen", QWEN, {}),
    # Two lanes of starts per CLI, each with its own HOME. Gemini and Qwen Code without
    # their relaunch (a second node process started only for a larger heap or GC flags):
    # less start-up CPU, the same screens. The dialog and trust tests keep the relaunch,
    # so its process tree is still the one cleaned up there.
    "gemini-a": ("gemini", GEMINI, {"GEMINI_CLI_NO_RELAUNCH": "true"}),
    "gemini-b": ("gemini", GEMINI, {"GEMINI_CLI_NO_RELAUNCH": "true"}),
    "qwen-a": ("qwen", QWEN, {"QWEN_CODE_NO_RELAUNCH": "true"}),
    "qwen-b": ("qwen", QWEN, {"QWEN_CODE_NO_RELAUNCH": "true"}),
}
LANES = ("a", "b")


def _prepare(name: str, home: Path, work: Path, url: str) -> dict[str, str]:
    """Write ``name``'s HOME; return its variables (HOME and, for the fake model, more)."""
    home.mkdir()
    if name == "gemini-trust":
        _gemini_settings(home, auth=True)
    elif name == "gemini-auth":
        _gemini_settings(home, auth=False)
        (home / ".gemini" / "trustedFolders.json").write_text(
            json.dumps({str(work): "TRUST_FOLDER"})
        )
    elif name == "qwen-trust":
        (home / ".qwen").mkdir()
        (home / ".qwen" / "settings.json").write_text(
            json.dumps({"security": {"folderTrust": {"enabled": True}}})
        )
    elif name.startswith(("gemini-", "qwen-")) and name[-2:] in ("-a", "-b"):
        write_cli_configs(home, work, url)
        return cli_env(name[:-2], url, home)
    return {"HOME": str(home)}


@pytest.fixture
def fake_model(tmp_path: Path) -> Iterator[FakeModel]:
    with FakeModel(tmp_path / "model.log", delay_s=REPEAT_DELAY_S) as model:
        yield model


@pytest.fixture
async def env(tmp_path: Path, fake_model: FakeModel) -> AsyncIterator[Env]:
    work = tmp_path / "work"
    work.mkdir()
    await anyio.run_process(["git", "init", "-q", str(work)])
    homes: dict[str, Path] = {}
    profiles: list[dict[str, Any]] = []
    for name, (agent, package, extra) in SETUPS.items():
        homes[name] = tmp_path / f"home-{name}"
        variables = _prepare(name, homes[name], work, fake_model.url) | extra
        profiles.append(
            {
                "name": name,
                "agent": agent,
                "argv": [str(cli_path(package)), *PIN],
                "cwds": [str(work)],
                "env": variables,
            }
        )
    pfile = tmp_path / "profiles.json"
    pfile.write_text(json.dumps({"profiles": profiles}))
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    try:
        async with Client(stdio_params(state, PANEWARDEN_PROFILES=str(pfile))) as client:
            yield Env(Tools(client), homes, work)
    finally:
        for home in homes.values():
            for proc in procs_of(home):
                proc.kill()


async def _start_on(env: Env, profile: str, text: str, kind: str) -> dict[str, Any]:
    """Start ``profile`` in a pane of the same name; wait for ``text``, then for the status
    to read blocked with ``kind`` (a screen shown before it, such as Qwen's provider menu
    before its trust prompt, may still be the status when the text appears)."""
    await env.tools.call("start_pane", name=profile, profile=profile)
    shown = await env.tools.call("wait_output", name=profile, pattern=text, timeout_s=60)
    assert shown["matched"], f"{profile} never showed {text!r}"
    status = await env.tools.call("get_status", name=profile)
    for _ in range(5):
        if (status["state"], status["kind"]) == ("blocked", kind):
            break
        status = await env.tools.wait(profile, after=status["seq"], until=SETTLED_OR_IDLE)
    return status


async def _never_idle(env: Env, name: str) -> None:
    """No record of the pane's history so far reads idle or done."""
    found = await env.tools.call(
        "wait_status", name=name, after_seq=0, until=["idle", "done"], timeout_s=0.5
    )
    assert found["timed_out"], found


def _no_trust_saved(env: Env, profile: str, cli: str) -> None:
    saved = env.homes[profile] / f".{cli}" / "trustedFolders.json"
    assert not saved.exists(), saved.read_text()


async def test_gemini_folder_trust_reads_blocked_and_is_never_trusted(env: Env) -> None:
    need(GEMINI)
    status = await _start_on(
        env, "gemini-trust", "Do you trust the files in this folder?", "permission"
    )
    assert (status["state"], status["kind"], status["source"]) == (
        "blocked",
        "permission",
        "screen",
    ), status
    await _never_idle(env, "gemini-trust")
    refused = await env.tools.error("answer_dialog", name="gemini-trust", answer="allow_once")
    assert refused["code"] == "dialog_refused" and "saved for good" in refused["message"]
    assert (await env.tools.call("get_status", name="gemini-trust"))["seq"] == status["seq"]
    # deny_once presses Esc: Gemini CLI exits ("A folder trust level must be selected").
    await env.tools.call("answer_dialog", name="gemini-trust", answer="deny_once")
    ended = await env.tools.wait("gemini-trust", after=status["seq"], until=["exited"])
    assert ended["lifecycle"] == "exited"
    _no_trust_saved(env, "gemini-trust", "gemini")
    await remove_and_check_nothing_left(env.tools, "gemini-trust", env.homes["gemini-trust"])


async def test_gemini_auth_menu_reads_blocked_auth_and_is_not_answered(env: Env) -> None:
    need(GEMINI)
    status = await _start_on(env, "gemini-auth", "How would you like to authenticate", "auth")
    assert (status["state"], status["kind"]) == ("blocked", "auth"), status
    await _never_idle(env, "gemini-auth")
    for answer in ("allow_once", "deny_once"):
        refused = await env.tools.error("answer_dialog", name="gemini-auth", answer=answer)
        assert refused["code"] == "dialog_unrecognized"
    assert (await env.tools.call("get_status", name="gemini-auth"))["seq"] == status["seq"]
    # Still running: Gemini ignores SIGHUP; removal must still leave nothing.
    await remove_and_check_nothing_left(env.tools, "gemini-auth", env.homes["gemini-auth"])


async def test_qwen_provider_menu_reads_blocked_auth_and_is_not_answered(env: Env) -> None:
    need(QWEN)
    status = await _start_on(env, "qwen-provider", "Connect a Provider", "auth")
    assert (status["state"], status["kind"]) == ("blocked", "auth"), status
    await _never_idle(env, "qwen-provider")
    refused = await env.tools.error("answer_dialog", name="qwen-provider", answer="allow_once")
    assert refused["code"] == "dialog_unrecognized"
    await remove_and_check_nothing_left(env.tools, "qwen-provider", env.homes["qwen-provider"])


async def test_qwen_folder_trust_reads_blocked_and_neither_answer_is_sent(env: Env) -> None:
    need(QWEN)
    status = await _start_on(env, "qwen-trust", "Do you trust this folder?", "permission")
    assert (status["state"], status["kind"]) == ("blocked", "permission"), status
    await _never_idle(env, "qwen-trust")
    for answer in ("allow_once", "deny_once"):
        refused = await env.tools.error("answer_dialog", name="qwen-trust", answer=answer)
        assert refused["code"] == "dialog_refused" and "saved for good" in refused["message"]
    assert (await env.tools.call("get_status", name="qwen-trust"))["seq"] == status["seq"]
    _no_trust_saved(env, "qwen-trust", "qwen")
    # Qwen ignores Ctrl-C at this prompt and SIGTERM: removal must still leave nothing.
    await remove_and_check_nothing_left(env.tools, "qwen-trust", env.homes["qwen-trust"])


async def _starts(env: Env, profile: str, runs: int, removals: list[str]) -> None:
    """``runs`` starts of ``profile`` in a row; each pane is removed while the next starts."""
    async with anyio.create_task_group() as group:
        for run in range(runs):
            name = f"{profile}-{run}"
            await env.tools.call("start_pane", name=name, profile=profile)
            shown = await env.tools.call(
                "wait_output", name=name, pattern="Type your message", timeout_s=60
            )
            assert shown["matched"], name
            idle = await env.tools.wait(name, until=["idle"], timeout_s=30)
            assert idle["turn"] == 0, idle
            result = await env.tools.client.call_tool(
                "send_input", {"name": name, "text": f"SAY: run {run} of {name}"}
            )
            if result.is_error:
                screen = (await env.tools.call("read_output", name=name))["text"]
                status = await env.tools.call("get_status", name=name)
                raise AssertionError(f"{name}: {result.content} {status}\n{screen}")
            sent = dict(result.structured_content or {})
            waited = await env.tools.call(
                "wait_status", name=name, after_seq=sent["seq"], until=["done"], timeout_s=60
            )
            screen = (await env.tools.call("read_output", name=name))["text"]
            done = waited["status"]
            assert not waited["timed_out"], f"{name}: {done}\n{screen}"
            assert (done["turn"], done["source"]) == (1, "title"), f"{name}: {done}\n{screen}"
            removals.append(name)
            group.start_soon(functools.partial(env.tools.call, "remove_pane", name=name))


@pytest.mark.slow
@pytest.mark.timeout(480)  # about 2 min on a quiet 2-core machine; generous for a busy one
async def test_twenty_starts_each_count_no_start_up_turn(env: Env) -> None:
    """Twenty starts of each CLI (two lanes of ten consecutive starts per CLI, all four lanes
    side by side): start-up activity is never a turn, and the first prompt is always turn 1."""
    need(GEMINI)
    need(QWEN)
    removals: list[str] = []
    async with anyio.create_task_group() as group:
        for cli in ("gemini", "qwen"):
            for lane in LANES:
                group.start_soon(_starts, env, f"{cli}-{lane}", REPEATS // len(LANES), removals)
    assert len(removals) == 2 * REPEATS
    assert (await env.tools.call("list_panes"))["panes"] == []
    for profile in (f"{cli}-{lane}" for cli in ("gemini", "qwen") for lane in LANES):
        home = env.homes[profile]
        gone = await apoll(functools.partial(_nothing_left, home), timeout_s=10)
        assert gone, f"{profile} processes left behind: {[p.cmdline() for p in procs_of(home)]}"


def _nothing_left(home: Path) -> bool:
    return not procs_of(home)
