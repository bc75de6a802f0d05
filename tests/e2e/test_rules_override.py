"""Screen rules overridden from the profiles directory reach the pane's worker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client

from tests.conftest import Tools, stdio_params

pytestmark = pytest.mark.anyio


def _profiles(tmp_path: Path) -> Path:
    script = "printf 'tool ready: RULES-MARKER\\n'; exec sleep 60"
    pfile = tmp_path / "profiles.json"
    pfile.write_text(
        json.dumps(
            {
                "profiles": [
                    {
                        "name": "sh",
                        "agent": "generic",
                        "argv": ["/bin/sh", "-c", script],
                        "cwds": [str(tmp_path)],
                    }
                ]
            }
        )
    )
    return pfile


async def test_a_generic_pane_stays_unknown_without_rules(tmp_path: Path, state_dir: Path) -> None:
    pfile = _profiles(tmp_path)
    async with Client(stdio_params(state_dir, PANEWARDEN_PROFILES=str(pfile))) as client:
        tools = Tools(client)
        await tools.call("start_pane", name="g", profile="sh")
        assert (await tools.call("wait_output", name="g", pattern="RULES-MARKER"))["matched"]
        late = await tools.call("wait_status", name="g", until=["idle"], timeout_s=1)
        assert late["timed_out"] and late["status"]["state"] == "unknown"
        await tools.call("remove_pane", name="g")


async def test_an_override_file_beside_the_profiles_decides(
    tmp_path: Path, state_dir: Path
) -> None:
    pfile = _profiles(tmp_path)
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "generic.json").write_text(
        json.dumps(
            {
                "agent": "generic",
                "version": 1,
                "rules": [{"id": "ready", "state": "idle", "all": ["rules-marker"]}],
            }
        )
    )
    async with Client(stdio_params(state_dir, PANEWARDEN_PROFILES=str(pfile))) as client:
        tools = Tools(client)
        await tools.call("start_pane", name="g", profile="sh")
        status = await tools.wait("g", until=["idle"], timeout_s=10)
        assert (status["state"], status["source"]) == ("idle", "screen")
        await tools.call("remove_pane", name="g")
