"""A profile's ``emulator`` reaches the pane's worker, which draws with that backend."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client

from paneworker.screen.emulator import EmulatorUnavailable, check_available
from tests.conftest import Tools, stdio_params

pytestmark = pytest.mark.anyio


def _ghostty_installed() -> bool:
    try:
        check_available("ghostty")
    except EmulatorUnavailable:
        return False
    return True


def _maps(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.skipif(not _ghostty_installed(), reason="pyghostty is not installed")
async def test_profile_emulator_picks_the_backend_per_pane(tmp_path: Path, state_dir: Path) -> None:
    script = "printf 'hello from the pane\\n'; exec sleep 60"
    profiles = [
        {"name": name, "argv": ["/bin/sh", "-c", script], "cwds": [str(tmp_path)], **extra}
        for name, extra in (("native", {"emulator": "ghostty"}), ("plain", {}))
    ]
    pfile = tmp_path / "profiles.json"
    pfile.write_text(json.dumps({"profiles": profiles}))
    # Cold workers: a backend's library is then mapped only by the worker that uses it
    # (the worker template maps every backend it preloads, so its forks all show it).
    env = {
        "PANEWARDEN_PROFILES": str(pfile),
        "PANEWARDEN_EMULATOR": "pyte",
        "PANEWARDEN_WORKER_TEMPLATE": "off",
    }
    async with Client(stdio_params(state_dir, **env)) as client:
        tools = Tools(client)
        workers = {}
        for name in ("native", "plain"):
            pane = (await tools.call("start_pane", name=name, profile=name))["pane"]
            workers[name] = pane["worker_pid"]
            found = await tools.call("wait_output", name=name, pattern="hello from the pane")
            assert found["matched"]
            text = (await tools.call("read_output", name=name))["text"]
            assert text.splitlines()[0] == "hello from the pane"
        assert "libghostty-vt" in _maps(workers["native"])
        assert "libghostty-vt" not in _maps(workers["plain"])
        for name in ("native", "plain"):
            await tools.call("remove_pane", name=name)
