"""Kilo Code 7.7.7, Aider 0.86.2 and Pi 0.73.1 in real panes against the fake model.

Each CLI is started as few times as possible (Kilo's first draw takes 25–38 s here): one
pane per CLI carries a whole session, each step checked on the pane's status:

- a plain prompt (``SAY: …``, a text reply, no tool) is turn 1 and ends ``done`` with the
  reply on screen;
- Kilo and Aider: ``RUN: touch allowed.marker`` → ``blocked``/``permission``, never
  ``idle``/``done`` while the dialog is up → ``allow_once`` → the command ran once → ``done``;
  ``RUN: touch denied.marker`` → ``blocked`` → ``deny_once`` → ``cancelled``, and it never ran
  (Kilo's Esc opens a reject panel that Enter confirms: two steps, both checked);
- Pi: ``RUN: touch ran.marker`` runs at once, with no dialog (Pi asks before nothing), and
  the turn ends ``done``; its panes run confined whatever the service's default;
- ``remove_pane`` leaves no process of the CLI (found by its fresh HOME).

Twenty consecutive starts per CLI (two lanes of ten, side by side) count no start-up
activity as a turn: the first prompt of each is turn 1. Kilo's twenty starts would take
5–6 minutes here and are marked ``drift``: only ``python -m tests.realcli.drift`` runs them,
where the time is the point; CI starts Kilo once. Every pane runs confined, as in
``test_real_dialogs.py``. Skipped when a CLI is not installed.
"""

from __future__ import annotations

import functools
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
from tests.polling import apoll
from tests.realcli import cli_path, model_network, need, procs_of, remove_and_check_nothing_left
from tests.tools.fake_model import AIDER_ARGS, FakeModel, cli_env, write_cli_configs

pytestmark = pytest.mark.anyio

PACKAGES = {"kilo": "@kilocode/cli", "aider": "aider-chat", "pi": "@mariozechner/pi-coding-agent"}
ARGS: dict[str, list[str]] = {"aider": list(AIDER_ARGS)}
# What each shows once it takes prompts; Kilo's first draw is slow.
READY = {"kilo": "Ask anything", "aider": "diff>", "pi": "fake-model"}
READY_TIMEOUT_S = {"kilo": 90, "aider": 40, "pi": 40}
DIALOG_TEXT = {"kilo": "Allow always", "aider": "Run shell command?"}
SETTLED = ["done", "cancelled"]
WHILE_SHOWN = ["idle", "done", "cancelled", "working", "unknown", "error", "exited", "lost"]
# Long enough for the screen rules to see each turn working (Aider's spinner, Pi's line).
MODEL_DELAY_S = 1.0
REPEATS = 20
LANES = ("a", "b")


@dataclass
class Env:
    tools: Tools
    home: Path
    work: Path
    model: FakeModel
    bare: Path  # an empty HOME


@pytest.fixture
def fake_model(tmp_path: Path) -> Iterator[FakeModel]:
    with FakeModel(tmp_path / "model.log", delay_s=MODEL_DELAY_S) as model:
        yield model


@pytest.fixture
async def env(tmp_path: Path, fake_model: FakeModel) -> AsyncIterator[Env]:
    home = tmp_path / "home"
    short = Path(tempfile.mkdtemp(prefix="pw-"))
    work = short / "work"
    home.mkdir()
    work.mkdir()
    await anyio.run_process(["git", "init", "-q", str(work)])
    write_cli_configs(home, work, fake_model.url)
    profiles: list[dict[str, Any]] = []
    for cli, package in PACKAGES.items():
        for name in (cli, *(f"{cli}-{lane}" for lane in LANES)):
            profiles.append(
                {
                    "name": name,
                    "agent": cli,
                    "argv": [str(cli_path(package)), *ARGS.get(cli, [])],
                    "cwds": [str(work)],
                    "env": cli_env(cli, fake_model.url, home),
                    "confine": True,
                    "network": model_network(fake_model.port),
                }
            )
    # Start-up screens: Aider asking about .gitignore (no --no-gitignore), Pi with no model.
    bare = tmp_path / "bare"
    bare.mkdir()
    gitignore = [a for a in AIDER_ARGS if a != "--no-gitignore"]
    profiles += [
        {
            "name": "aider-startup",
            "agent": "aider",
            "argv": [str(cli_path(PACKAGES["aider"])), *gitignore],
            "cwds": [str(work)],
            "env": cli_env("aider", fake_model.url, home),
            "confine": True,
            "network": model_network(fake_model.port),
        },
        {
            "name": "pi-startup",
            "agent": "pi",
            "argv": [str(cli_path(PACKAGES["pi"]))],
            "cwds": [str(work)],
            "env": {"HOME": str(bare), "PI_OFFLINE": "1"},
            "confine": True,
            "network": model_network(fake_model.port),
        },
    ]
    pfile = tmp_path / "profiles.json"
    pfile.write_text(json.dumps({"profiles": profiles}))
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    try:
        async with Client(stdio_params(state, PANEWARDEN_PROFILES=str(pfile))) as client:
            yield Env(Tools(client), home, work, fake_model, bare)
    finally:
        for proc in [*procs_of(home), *procs_of(bare)]:
            proc.kill()
        shutil.rmtree(short, ignore_errors=True)


async def _ready(env: Env, cli: str, name: str, profile: str | None = None) -> dict[str, Any]:
    await env.tools.call("start_pane", name=name, profile=profile or name)
    timeout = READY_TIMEOUT_S[cli]
    shown = await env.tools.call("wait_output", name=name, pattern=READY[cli], timeout_s=timeout)
    screen = (await env.tools.call("read_output", name=name))["text"]
    assert shown["matched"], f"{name} never showed {READY[cli]!r}\n{screen}"
    status = await env.tools.call("wait_status", name=name, until=["idle"], timeout_s=30)
    screen = (await env.tools.call("read_output", name=name))["text"]
    assert not status["timed_out"], f"{name} never read idle: {status}\n{screen}"
    assert status["status"]["turn"] == 0, status
    return dict(status["status"])


async def _say(env: Env, name: str, text: str, turn: int) -> dict[str, Any]:
    sent = await env.tools.call("send_input", name=name, text=f"SAY: {text}")
    done = await env.tools.wait(name, after=sent["seq"], until=SETTLED, timeout_s=60)
    screen = (await env.tools.call("read_output", name=name))["text"]
    assert (done["state"], done["turn"]) == ("done", turn), f"{done}\n{screen}"
    replies = [line for line in screen.splitlines() if text in line]
    assert any("SAY:" not in line for line in replies), screen  # the reply, not the prompt
    return done


async def _ask(env: Env, cli: str, marker: str, after: int) -> dict[str, Any]:
    """``RUN: touch marker``; the dialog reads blocked and stays so while it is shown."""
    await env.tools.call("send_input", name=cli, text=f"RUN: touch {marker}")
    blocked = await env.tools.wait(cli, after=after, until=["blocked"], timeout_s=60)
    assert (blocked["state"], blocked["kind"]) == ("blocked", "permission"), blocked
    shown = await env.tools.call("wait_output", name=cli, pattern=DIALOG_TEXT[cli], timeout_s=10)
    screen = (await env.tools.call("read_output", name=cli))["text"]
    assert shown["matched"] and f"touch {marker}" in screen, screen
    moved = await env.tools.call(
        "wait_status", name=cli, after_seq=blocked["seq"], until=WHILE_SHOWN, timeout_s=3
    )
    assert moved["timed_out"], moved
    return blocked


@pytest.mark.timeout(300)
@pytest.mark.parametrize("cli", ["kilo", "aider"])
async def test_prompt_allow_once_deny_once_and_removal_in_one_session(env: Env, cli: str) -> None:
    need(PACKAGES[cli])
    idle = await _ready(env, cli, cli)
    done = await _say(env, cli, f"hello from {cli}", 1)
    assert done["seq"] > idle["seq"]

    allowed = env.work / f"{cli}-allowed.marker"
    blocked = await _ask(env, cli, allowed.name, done["seq"])
    refused = await env.tools.error("send_input", name=cli, text="sneaky")
    assert refused["code"] == "pane_blocked"
    assert not allowed.exists()
    await env.tools.call(
        "answer_dialog", name=cli, answer="allow_once", expect_turn=blocked["turn"]
    )
    ended = await env.tools.wait(cli, after=blocked["seq"], until=SETTLED, timeout_s=60)
    assert (ended["state"], ended["turn"]) == ("done", blocked["turn"]), ended
    assert allowed.exists(), "allow_once did not let the command run"
    ran_at = allowed.stat().st_mtime_ns

    denied = env.work / f"{cli}-denied.marker"
    again = await _ask(env, cli, denied.name, ended["seq"])
    assert again["turn"] > blocked["turn"], again
    await env.tools.call("answer_dialog", name=cli, answer="deny_once", expect_turn=again["turn"])
    cancelled = await env.tools.wait(cli, after=again["seq"], until=SETTLED, timeout_s=60)
    screen = (await env.tools.call("read_output", name=cli))["text"]
    assert (cancelled["state"], cancelled["turn"]) == ("cancelled", again["turn"]), (
        f"{cancelled}\n{screen}"
    )
    assert not denied.exists(), "deny_once let the command run"
    assert allowed.stat().st_mtime_ns == ran_at, "the allowed command ran again"
    await remove_and_check_nothing_left(env.tools, cli, env.home)


@pytest.mark.timeout(180)
async def test_pi_runs_tools_unasked_so_it_gets_status_and_turns_only(env: Env) -> None:
    need(PACKAGES["pi"])
    await _ready(env, "pi", "pi")
    await _say(env, "pi", "hello from pi", 1)
    marker = env.work / "ran.marker"
    sent = await env.tools.call("send_input", name="pi", text=f"RUN: touch {marker}")
    done = await env.tools.wait("pi", after=sent["seq"], until=SETTLED, timeout_s=60)
    assert (done["state"], done["turn"]) == ("done", 2), done
    assert marker.exists(), "Pi did not run the command"
    status = await env.tools.call("get_status", name="pi")
    assert status["confined"] is True, status
    refused = await env.tools.error("answer_dialog", name="pi", answer="allow_once")
    assert refused["code"] == "no_dialog", refused
    await remove_and_check_nothing_left(env.tools, "pi", env.home)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("profile", "text", "kind"),
    [
        ("aider-startup", "Add .aider* to .gitignore", "question"),
        ("pi-startup", "No models available", "auth"),
    ],
)
async def test_start_up_screens_read_blocked_and_never_idle(
    env: Env, profile: str, text: str, kind: str
) -> None:
    cli = profile.split("-")[0]
    need(PACKAGES[cli])
    await env.tools.call("start_pane", name=profile, profile=profile)
    shown = await env.tools.call("wait_output", name=profile, pattern=text, timeout_s=40)
    assert shown["matched"], (await env.tools.call("read_output", name=profile))["text"]
    status = await env.tools.call("get_status", name=profile)
    if (status["state"], status["kind"]) != ("blocked", kind):
        status = await env.tools.wait(profile, after=status["seq"], until=["blocked"])
    assert (status["state"], status["kind"], status["turn"]) == ("blocked", kind, 0), status
    found = await env.tools.call(
        "wait_status", name=profile, after_seq=0, until=["idle", "done"], timeout_s=0.5
    )
    assert found["timed_out"], found
    for answer in ("allow_once", "deny_once"):
        refused = await env.tools.error("answer_dialog", name=profile, answer=answer)
        assert refused["code"] == "dialog_unrecognized", refused
        assert f"this one is a {kind} dialog" in refused["message"], refused
    home = env.bare if cli == "pi" else env.home
    await remove_and_check_nothing_left(env.tools, profile, home)


async def _starts(env: Env, cli: str, profile: str, runs: int, removals: list[str]) -> None:
    """``runs`` starts of ``profile`` in a row; each pane is removed while the next starts."""
    async with anyio.create_task_group() as group:
        for run in range(runs):
            name = f"{profile}-{run}"
            await _ready(env, cli, name, profile)
            await _say(env, name, f"run {run} of {name}", 1)
            removals.append(name)
            group.start_soon(functools.partial(env.tools.call, "remove_pane", name=name))


async def _twenty_starts(env: Env, cli: str) -> None:
    need(PACKAGES[cli])
    removals: list[str] = []
    async with anyio.create_task_group() as group:
        for lane in LANES:
            group.start_soon(_starts, env, cli, f"{cli}-{lane}", REPEATS // len(LANES), removals)
    assert len(removals) == REPEATS
    gone = await apoll(lambda: not procs_of(env.home), timeout_s=15)
    assert gone, f"processes left behind: {[p.cmdline() for p in procs_of(env.home)]}"


@pytest.mark.slow
@pytest.mark.timeout(420)
@pytest.mark.parametrize("cli", ["aider", "pi"])
async def test_twenty_starts_each_count_no_start_up_turn(env: Env, cli: str) -> None:
    await _twenty_starts(env, cli)


@pytest.mark.drift
@pytest.mark.timeout(900)
async def test_twenty_starts_of_kilo_count_no_start_up_turn(env: Env) -> None:
    await _twenty_starts(env, "kilo")


@pytest.mark.timeout(180)
async def test_aider_allowed_command_that_prints_ends_done_with_the_reply(env: Env) -> None:
    """Aider asks "Add command output to the chat?" after a command that printed: the
    ``allow_once`` that ran it answers that too, and the turn ends ``done``."""
    need(PACKAGES["aider"])
    idle = await _ready(env, "aider", "aider")
    marker = env.work / "printed.marker"
    sent = await env.tools.call(
        "send_input",
        name="aider",
        text=f"RUN: echo ran >> {marker.name}; sleep 0.5; echo printed-by-it",
    )
    blocked = await env.tools.wait("aider", after=max(idle["seq"], sent["seq"]), until=["blocked"])
    assert (blocked["state"], blocked["kind"]) == ("blocked", "permission"), blocked
    shown = await env.tools.call(
        "wait_output", name="aider", pattern="Run shell command?", timeout_s=10
    )
    assert shown["matched"]
    await env.tools.call(
        "answer_dialog", name="aider", answer="allow_once", expect_turn=blocked["turn"]
    )
    ended = await env.tools.wait("aider", after=blocked["seq"], until=SETTLED, timeout_s=60)
    screen = (await env.tools.call("read_output", name="aider"))["text"]
    assert (ended["state"], ended["turn"]) == ("done", blocked["turn"]), f"{ended}\n{screen}"
    assert marker.read_text() == "ran\n", "the command did not run exactly once"
    assert "Added 2 lines of output to the chat" in screen, screen
    assert "Don't ask again" not in screen.splitlines()[-1]
    # The pane takes the next prompt: nothing is left waiting.
    await _say(env, "aider", "after the command", blocked["turn"] + 1)
    await remove_and_check_nothing_left(env.tools, "aider", env.home)
