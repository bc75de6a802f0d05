"""``panewarden demo``: a scripted tour of the built-in demo agent, over real MCP.

It starts ``panewarden serve --stdio`` as a subprocess with a throw-away state
directory, connects the official MCP SDK client to it, and walks through every
pane tool, printing each step and what came back.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any

from mcp import Client, StdioServerParameters

STEP_TIMEOUT_S = 30


def _say(step: str, detail: object = "") -> None:
    text = detail if isinstance(detail, str) else json.dumps(detail)
    print(f"==> {step}" + (f"\n    {text}" if text else ""), flush=True)


async def _call(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, args, read_timeout_seconds=STEP_TIMEOUT_S + 10)
    if result.is_error:
        text = result.content[0].text if result.content else "{}"  # type: ignore[union-attr]
        return {"error": json.loads(text)}
    return dict(result.structured_content or {})


async def run_tour() -> int:
    """Run the tour; returns 0 when every step behaved as expected."""
    with tempfile.TemporaryDirectory(prefix="panewarden-demo-") as state:
        env = dict(os.environ)
        env["PANEWARDEN_STATE_DIR"] = state
        env.pop("PANEWARDEN_PROFILES", None)
        env.setdefault("PANEWARDEN_LOG_LEVEL", "WARNING")
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "supervisor", "serve", "--stdio"], env=env
        )
        async with Client(params) as client:
            return await _tour(client)


async def _tour(client: Client) -> int:
    tools = await client.list_tools()
    _say("tools offered", ", ".join(t.name for t in tools.tools))
    started = await _call(client, "start_pane", {"name": "tour", "profile": "demo"})
    pane = started["pane"]
    _say(
        "start_pane demo",
        {k: pane[k] for k in ("name", "pid", "worker_pid", "lifecycle", "confined")},
    )
    idle = await _call(
        client, "wait_status", {"name": "tour", "until": ["idle"], "timeout_s": STEP_TIMEOUT_S}
    )
    _say("wait_status -> idle", idle["status"])
    seq = idle["status"]["seq"]
    sent = await _call(client, "send_input", {"name": "tour", "text": "hello panewarden"})
    _say("send_input 'hello panewarden'", sent)
    done = await _call(
        client,
        "wait_status",
        {"name": "tour", "after_seq": seq, "until": ["done"], "timeout_s": STEP_TIMEOUT_S},
    )
    _say("wait_status -> done", done["status"])
    screen = await _call(client, "read_output", {"name": "tour", "lines": 8})
    _say("read_output (last 8 lines)", "\n    ".join(screen["text"].splitlines()))
    seq = done["status"]["seq"]
    await _call(client, "send_input", {"name": "tour", "text": "dialog rm -rf build"})
    blocked = await _call(
        client,
        "wait_status",
        {"name": "tour", "after_seq": seq, "until": ["blocked"], "timeout_s": STEP_TIMEOUT_S},
    )
    _say("a prompt that asks permission -> blocked", blocked["status"])
    refused = await _call(client, "send_input", {"name": "tour", "text": "typing into a dialog"})
    _say("send_input while blocked is refused", refused)
    answered = await _call(client, "answer_dialog", {"name": "tour", "answer": "allow_once"})
    _say("answer_dialog allow_once", answered)
    seq = blocked["status"]["seq"]
    after = await _call(
        client, "wait_status", {"name": "tour", "after_seq": seq, "timeout_s": STEP_TIMEOUT_S}
    )
    _say("the turn finishes", after["status"])
    removed = await _call(client, "remove_pane", {"name": "tour"})
    _say("remove_pane", removed)
    listed = await _call(client, "list_panes", {})
    _say("list_panes", listed)
    ok = (
        after["status"]["state"] == "done"
        and refused.get("error", {}).get("code") == "pane_blocked"
        and not listed["panes"]
    )
    _say("tour " + ("finished: every step behaved" if ok else "FAILED"))
    return 0 if ok else 1
