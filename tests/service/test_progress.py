"""Long calls send MCP progress notifications that say what they wait for.

A handoff to a demo pane whose turn lasts longer than one progress period, over HTTP
with the SDK client's progress callback: it hears at least one notification naming the
pane's turn before the result.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from supervisor.front.tools.tooling import PROGRESS_EVERY_S
from tests.control.support import demo_argv
from tests.service.conftest import ServiceFactory, connect, ok, run

# Three steps of this length: the turn outlasts one progress period.
STEP_S = PROGRESS_EVERY_S / 2 + 0.5


@pytest.mark.timeout(90)
def test_handoff_reports_progress_naming_the_turn(services: ServiceFactory) -> None:
    profiles = {
        "profiles": [
            {
                "name": "slow",
                "agent": "demo",
                "argv": demo_argv("h19-progress", STEP_S),
                "cwds": ["/"],
            }
        ]
    }
    service = services.start(profiles=profiles)
    token = Path(service.env["PANEWARDEN_TOKEN_FILE"]).read_text().strip()
    heard: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, total, message))

    async def scenario() -> dict[str, object]:
        async with connect(service.url, token) as client:
            granted = (
                await client.call_tool(
                    "controller_acquire",
                    {
                        "controller_id": "h19",
                        "authority_ref": "issue-19",
                        "authority_sha256": hashlib.sha256(b"issue 19").hexdigest(),
                    },
                )
            ).structured_content
            assert granted is not None and granted.get("fence_token"), granted
            creds = {k: granted[k] for k in ("controller_id", "lease_id", "fence_token")}
            lease = await client.call_tool(
                "reviewer_start",
                {"creds": creds, "name": "rev", "profile": "slow", "cwd": "/", "purpose": "p"},
            )
            assert not lease.is_error, lease
            idle = await client.call_tool("wait_status", {"name": "rev", "until": ["idle"]})
            assert not idle.is_error, idle
            result = await client.call_tool(
                "handoff",
                {"creds": creds, "name": "rev", "text": "look", "timeout_s": 60},
                read_timeout_seconds=60,
                progress_callback=on_progress,
            )
            assert not result.is_error, result
            return dict(result.structured_content or {})

    done = ok(run(scenario(), 80.0))
    assert done, done
    assert heard, "no progress notification during a turn longer than the period"
    progress, total, message = heard[0]
    assert total == 60 and 0 < progress <= 60, heard
    assert message is not None and message.startswith("waiting for rev's turn "), heard
    assert message.endswith(" to settle"), heard
