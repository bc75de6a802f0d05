"""Start-up screens that wait on a choice, on the real CLIs: recognised, answered, passed.

Claude Code 2.1.332, started a second time in one HOME with
``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`` and nothing in ``~/.claude.json`` saying
the offer was seen, opens on "Try the new fullscreen renderer?". The pane must read
``blocked`` with a ``kind``, ``allow_once`` must be refused (accepting changes Claude's
renderer setting for good), ``deny_once`` must pick "Not now" (and ``interrupt_pane``
send Esc, which cancels it), and the pane must then reach ``idle`` and take a prompt.
Runs against ``tests/tools/fake_model.py`` on loopback.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.conftest import Tools, stdio_params
from tests.polling import apoll
from tests.realcli import cli_path, model_network, need, procs_of, remove_and_check_nothing_left
from tests.tools.fake_model import FakeModel, cli_env, write_cli_configs

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

CLAUDE = "@anthropic-ai/claude-code"
NUDGE = "Try the new fullscreen renderer?"


@pytest.fixture
def fake_model(tmp_path: Path) -> Iterator[FakeModel]:
    with FakeModel(tmp_path / "model.log") as model:
        yield model


@pytest.fixture
def unseen() -> str:
    """The ~/.claude.json key that records the offer under test as seen, left out."""
    return "fullscreenUpsellSeenCount"


@pytest.fixture
async def claude_env(
    tmp_path: Path, fake_model: FakeModel, unseen: str
) -> AsyncIterator[tuple[Tools, Path, Path]]:
    need(CLAUDE)
    home = tmp_path / "home"
    short = Path(tempfile.mkdtemp(prefix="pw-"))
    work = short / "work"
    home.mkdir()
    work.mkdir()
    write_cli_configs(home, work, fake_model.url)
    # The HOME a user has: the offer's own counter is not pre-set (the other real-CLI
    # tests set it to keep their screens simple).
    config = json.loads((home / ".claude.json").read_text())
    del config[unseen]
    (home / ".claude.json").write_text(json.dumps(config))
    env = cli_env("claude", fake_model.url, home)
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    profile = {
        "name": "claude",
        "agent": "claude",
        "argv": [str(cli_path(CLAUDE))],
        "cwds": [str(work)],
        "env": env,
        "confine": True,
        # The default network (["public"]) with the loopback fake model listed.
        "network": model_network(fake_model.port),
    }
    pfile = tmp_path / "profiles.json"
    pfile.write_text(json.dumps({"profiles": [profile]}))
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    try:
        async with Client(stdio_params(state, PANEWARDEN_PROFILES=str(pfile))) as client:
            yield Tools(client), home, work
    finally:
        for proc in procs_of(home):
            proc.kill()
        shutil.rmtree(short, ignore_errors=True)


async def _screen(tools: Tools) -> str:
    return str((await tools.call("read_output", name="claude"))["text"])


async def _started_until(tools: Tools, until: list[str]) -> dict[str, Any]:
    await tools.call("start_pane", name="claude", profile="claude")
    out = await tools.call("wait_status", name="claude", until=until, timeout_s=30)
    assert not out["timed_out"], f"{out}\n{await _screen(tools)}"
    return dict(out["status"])


async def test_claude_second_start_nudge_is_blocked_and_deny_once_passes_it(
    claude_env: tuple[Tools, Path, Path],
) -> None:
    tools, home, _work = claude_env
    # Confined, the first start offers it too: interrupt_pane sends Claude's documented
    # cancel key there (Esc; Ctrl-C changed nothing). The second start is the case.
    await _passes_the_nudge(tools, home, last=False)
    await _passes_the_nudge(tools, home, last=True)


async def _passes_the_nudge(tools: Tools, home: Path, *, last: bool) -> None:
    blocked = await _started_until(tools, ["blocked", "idle"])
    shown = await tools.call("wait_output", name="claude", pattern=NUDGE, timeout_s=10)
    screen = await _screen(tools)
    assert shown["matched"], screen
    assert blocked["state"] == "blocked" and blocked["kind"], f"{blocked}\n{screen}"
    refused = await tools.error("answer_dialog", name="claude", answer="allow_once")
    assert refused["code"] == "dialog_refused", refused
    assert NUDGE in await _screen(tools)

    if last:
        await tools.call("answer_dialog", name="claude", answer="deny_once")
    else:
        await tools.call("interrupt_pane", name="claude")
    idle = await tools.wait("claude", after=blocked["seq"], until=["idle"], timeout_s=20)

    async def gone() -> bool:
        return NUDGE not in await _screen(tools)

    # Claude reports idle as it takes the answer, a frame before it redraws.
    assert await apoll(gone, timeout_s=10), await _screen(tools)
    if not last:
        await remove_and_check_nothing_left(tools, "claude", home)
        return
    sent = await tools.call("send_input", name="claude", text="SAY: past the nudge")
    done = await tools.wait("claude", after=max(sent["seq"], idle["seq"]), until=["done"])
    assert done["state"] == "done", done
    assert "past the nudge" in await _screen(tools)
    # "Not now" was chosen: the offer is not accepted in Claude's settings.
    settings = json.loads((home / ".claude" / "settings.json").read_text())
    assert "tui" not in settings, settings
    await remove_and_check_nothing_left(tools, "claude", home)


AUTO_OFFER = "Make auto mode your default permission mode?"


@pytest.mark.parametrize("unseen", ["hasSeenAutoDefaultNudge"])
async def test_claude_auto_mode_offer_is_blocked_never_accepted_and_declined(
    claude_env: tuple[Tools, Path, Path],
) -> None:
    """With the user settings pinning ``defaultMode: "default"`` (what Bash dialogs need),
    2.1.332 offers to make auto mode the default; accepting would end every dialog."""
    tools, home, _work = claude_env
    first = await _started_until(tools, ["blocked", "idle"])
    shown = await tools.call("wait_output", name="claude", pattern=AUTO_OFFER, timeout_s=10)
    assert shown["matched"], await _screen(tools)
    # It may report idle a moment before it draws the offer (then blocked).
    blocked = first
    if first["state"] != "blocked":
        blocked = await tools.wait("claude", after=first["seq"], until=["blocked"], timeout_s=10)
    assert (blocked["state"], blocked["kind"]) == ("blocked", "permission"), blocked
    refused = await tools.error("answer_dialog", name="claude", answer="allow_once")
    assert refused["code"] == "dialog_refused", refused
    await tools.call("answer_dialog", name="claude", answer="deny_once")
    idle = await tools.wait("claude", after=blocked["seq"], until=["idle"], timeout_s=20)

    async def gone() -> bool:
        return AUTO_OFFER not in await _screen(tools)

    assert await apoll(gone, timeout_s=10), await _screen(tools)
    sent = await tools.call("send_input", name="claude", text="SAY: manual mode kept")
    done = await tools.wait("claude", after=max(sent["seq"], idle["seq"]), until=["done"])
    assert done["state"] == "done", done
    settings = json.loads((home / ".claude" / "settings.json").read_text())
    assert settings["permissions"]["defaultMode"] == "default", settings
    await remove_and_check_nothing_left(tools, "claude", home)
