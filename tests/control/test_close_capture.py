"""One capture rule for receipts and closes: read once the program is quiet.

A CLI may report ``done`` before it has drawn its reply (Claude Code does). A receipt's
output has always been read after a quiet wait; a reviewer's close now takes its capture
the same way, so a close asked for the moment the turn settles records the whole reply.
"""

from __future__ import annotations

import hashlib

import pytest

from tests.control.conftest import Coord
from tests.control.scripted_agent import LAST_LINE
from tests.control.support import acquire
from tests.polling import apoll

pytestmark = pytest.mark.anyio

SETTLE_S = 30
PROMPT = "late-draw please"


async def final_screen(coord: Coord, name: str) -> str:
    """The pane's whole screen once its late reply is drawn and the prompt is back."""

    async def drawn() -> str | None:
        text = (await coord.tools.call("read_output", name=name, lines=10_000, scrollback=True))[
            "text"
        ]
        lines = text.splitlines()
        if LAST_LINE in lines and lines.index(LAST_LINE) + 1 < len(lines):
            return str(text) if lines[lines.index(LAST_LINE) + 1].startswith(">") else None
        return None

    text = await apoll(drawn, SETTLE_S, interval_s=0.05)
    assert text is not None, f"{name} never drew its reply"
    return text


async def test_a_close_at_the_settle_captures_the_reply_drawn_after_it(coord: Coord) -> None:
    ctl = await acquire(coord.tools, "late-close")
    # The same turn on a pane that is left to finish drawing: what the capture must be.
    await ctl.reviewer("drawn-a", profile="scripted")
    got = await ctl.call("handoff", name="drawn-a", text=PROMPT, timeout_s=SETTLE_S)
    (entry,) = got["completed"]
    assert LAST_LINE in entry["output"], entry  # receipts already follow the rule
    expected = hashlib.sha256((await final_screen(coord, "drawn-a")).encode()).hexdigest()

    lease = await ctl.reviewer("drawn-b", profile="scripted")
    receipt_id = (await ctl.call("relay", name="drawn-b", text=PROMPT))["receipt"]
    (listed,) = [
        r
        for r in (await coord.tools.call("receipt_list"))["receipts"]
        if r["receipt"] == receipt_id
    ]
    settled = await coord.tools.wait(
        "drawn-b", after=listed["cursor"], until=["done"], timeout_s=SETTLE_S
    )
    # Closed the moment the turn settled, while the reply is still being drawn.
    closed = await ctl.call(
        "reviewer_close", lease_id=lease["lease_id"], expected_seq=settled["seq"]
    )
    assert closed["state"] == "closed" and closed["closed_seq"] == settled["seq"], closed
    assert closed["capture_sha256"] == expected, "the capture missed the late-drawn reply"
