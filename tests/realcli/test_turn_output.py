"""A receipt's output is its own turn's, on the real CLIs: two handoffs to one reviewer
pane, each answered by the fake model with a text reply (``SAY:``), and the second
receipt's output holds the second reply and nothing of the first turn, although the first
is still on the screen. Each CLI draws its transcript its own way (opencode: a full-screen
TUI; claude, gemini, qwen: Ink, redrawing the input box; codex: ratatui inline)."""

from __future__ import annotations

import hashlib
import secrets

import pytest

from tests.realcli import test_real_dialogs as dialogs
from tests.realcli.test_real_dialogs import MODEL_DELAY_S, PACKAGES, TITLED, Env, _need, _ready

# The fixtures of the dialog tests: the fake model, and a service with a profile per CLI.
fake_model = dialogs.fake_model
dialog_env = dialogs.dialog_env

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]

AUTHORITY_SHA = hashlib.sha256(b"turn output").hexdigest()


@pytest.mark.parametrize("cli", list(PACKAGES))
async def test_a_receipt_holds_its_own_turn_and_not_the_one_before(
    dialog_env: Env, cli: str
) -> None:
    _need(cli)
    env, tools = dialog_env, dialog_env.tools
    granted = await tools.call(
        "controller_acquire",
        controller_id="c",
        authority_ref="turn-output",
        authority_sha256=AUTHORITY_SHA,
    )
    creds = {k: granted[k] for k in ("controller_id", "lease_id", "fence_token")}
    if cli in TITLED:
        env.model.delay_s = MODEL_DELAY_S
    await tools.call(
        "reviewer_start", creds=creds, name=cli, profile=cli, cwd=str(env.work), purpose="t"
    )
    await _ready(env, cli, start=False)
    first, second = f"alpha{secrets.token_hex(3)}", f"bravo{secrets.token_hex(3)}"
    outputs, cuts = [], []
    for word in (first, second):
        done = await tools.call(
            "handoff", creds=creds, name=cli, text=f"SAY: {word} reply", timeout_s=60
        )
        if len(done["completed"]) != 1:
            shown = (await tools.call("read_output", name=cli, scrollback=True))["text"]
            status = await tools.call("get_status", name=cli)
            pytest.fail(f"{cli}: {word}: {done}\n{status}\n{shown}")
        (item,) = done["completed"]
        assert item["status"]["state"] == "done", done
        outputs.append(item["output"])
        cuts.append(item["cut"])
    screen = (await tools.call("read_output", name=cli, scrollback=True))["text"]
    for word, output in zip((first, second), outputs, strict=True):
        # The reply itself (the prompt's echo holds the word too, after "SAY:").
        replies = [line for line in output.splitlines() if word in line and "SAY:" not in line]
        assert replies, f"{cli}: no reply to {word!r} in its receipt's output:\n{output}"
    # Neither the first reply nor the first prompt's line. (Codex's footer names the
    # session after its first prompt: "… · SAY: alpha… reply", part of every screen.)
    leaked = [
        line
        for line in outputs[1].splitlines()
        if first in line and not line.rstrip().endswith(f"· SAY: {first} reply")
    ]
    where = f"{cli}: the first turn leaked into the second (cut {cuts[1]})"
    assert not leaked, f"{where}:\n{outputs[1]}"
    assert first in screen or cli == "opencode", screen  # still shown, yet not returned
