"""An agent kind's HOME from inside its confined pane, as a prompt-injected agent would
attack it (a reviewer's HOME is the same as any pane's of its kind): the files that
name programs the kind's CLI runs (hooks, notify, plugins, MCP servers) are written
only in the pane's private copy, their directories are read-only, the kind's own
state stays writable, and no other kind's credentials can be read (issue 27, items 4 and 15)."""

from __future__ import annotations

import json
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mcp.client.client import Client

from tests.confine.probing import probe, probe_profile, python_run
from tests.conftest import Tools, stdio_params

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

DENIED = "PermissionError:13"
READ_ONLY = "OSError:30"  # EROFS
HOST_SETTINGS = '{"theme": "dark"}\n'
# A directory the CLI reads programs from may be missing: make it, then plant a file.
MKDIR_WRITE = """
import os, sys
try:
    os.makedirs(sys.argv[1], exist_ok=True)
    with open(os.path.join(sys.argv[1], sys.argv[2]), "w") as handle:
        handle.write("probe")
    print("written")
except OSError as exc:
    print(f"OSError:{exc.errno}")
"""
CREDENTIALS = {
    "claude": ".claude/.credentials.json",
    "codex": ".codex/auth.json",
    "opencode": ".local/share/opencode/auth.json",
    "gemini": ".gemini/oauth_creds.json",
}


@dataclass
class Home:
    base: Path
    home: Path
    work: Path
    state: Path

    def env(self) -> dict[str, str]:
        return {
            "HOME": str(self.home),
            "PANEWARDEN_PROFILES": str(self.base / "profiles.json"),
            "PANEWARDEN_CONFINE": "on",
        }


@pytest.fixture
def home() -> Iterator[Home]:
    # Outside /tmp: the private /tmp must not be what hides these.
    base = Path("/var/tmp") / f"pw-homes-{secrets.token_hex(4)}"
    home, work, state = base / "home", base / "work", base / "state"
    for path in (home, work, state):
        path.mkdir(parents=True, mode=0o700)
    for kind, relative in CREDENTIALS.items():
        path = home / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{kind}-SECRET\n")
    (home / ".claude" / "settings.json").write_text(HOST_SETTINGS)
    # Directories the operator's CLI made already; ``commands/`` and the rest are not there.
    for made in (".claude/hooks", ".claude/plugins", ".config/opencode/plugin"):
        (home / made).mkdir(parents=True)
    (home / ".codex" / "config.toml").write_text('model = "o3"\n')
    profiles = {
        "profiles": [
            probe_profile(kind, [str(work)], agent=kind) for kind in ("claude", "codex", "opencode")
        ]
    }
    (base / "profiles.json").write_text(json.dumps(profiles))
    try:
        yield Home(base, home, work, state)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _pane_cwd(home: Home, kind: str) -> Path:
    path = home.work / kind
    path.mkdir(exist_ok=True)
    return path


async def test_a_pane_plants_nothing_its_kind_runs_and_reads_no_other_kinds_keys(
    home: Home,
) -> None:
    h = home.home
    async with Client(stdio_params(home.state, **home.env())) as client:
        tools = Tools(client)
        claude = await probe(
            tools,
            "claude",
            "claude",
            _pane_cwd(home, "claude"),
            {
                "settings": ["write", str(h / ".claude/settings.json")],
                "settings_local": ["write", str(h / ".claude/settings.local.json")],
                "hook_script": ["write", str(h / ".claude/hooks/start.sh")],
                "plugin": ["write", str(h / ".claude/plugins/evil.js")],
                "command": python_run(MKDIR_WRITE, str(h / ".claude/commands"), "evil.md"),
                "state": ["write", str(h / ".claude/history.jsonl")],
                "own_keys": ["read", str(h / CREDENTIALS["claude"])],
                **{f"keys {k}": ["read", str(h / r)] for k, r in CREDENTIALS.items()},
            },
        )
        # The CLI writes its settings as it likes, into the pane's own copy.
        assert claude["settings"] == "ok:5", claude
        assert claude["settings_local"] == "ok:5", claude
        for name in ("hook_script", "plugin"):
            assert claude[name] == READ_ONLY, (name, claude)
        assert claude["command"].strip() == "ok:rc=0 OSError:30", claude
        assert claude["state"] == "ok:5", claude
        assert claude["own_keys"].startswith("ok:"), claude
        for kind in ("codex", "opencode", "gemini"):
            assert claude[f"keys {kind}"] == DENIED, (kind, claude)
        codex = await probe(
            tools,
            "codex",
            "codex",
            _pane_cwd(home, "codex"),
            {
                "notify": ["write", str(h / ".codex/config.toml")],
                "prompt": python_run(MKDIR_WRITE, str(h / ".codex/prompts"), "evil.md"),
                "sessions": ["write", str(h / ".codex/history.jsonl")],
                **{f"keys {k}": ["read", str(h / r)] for k, r in CREDENTIALS.items()},
            },
        )
        assert codex["notify"] == "ok:5", codex
        assert codex["prompt"].strip() == "ok:rc=0 OSError:30", codex
        assert codex["sessions"] == "ok:5", codex
        assert codex["keys codex"].startswith("ok:"), codex
        for kind in ("claude", "opencode", "gemini"):
            assert codex[f"keys {kind}"] == DENIED, (kind, codex)
        opencode = await probe(
            tools,
            "opencode",
            "opencode",
            _pane_cwd(home, "opencode"),
            {
                "config": ["write", str(h / ".config/opencode/opencode.json")],
                "plugin": ["write", str(h / ".config/opencode/plugin/evil.ts")],
                "data": ["write", str(h / ".local/share/opencode/log.txt")],
            },
        )
        assert opencode["config"] == "ok:5", opencode
        assert opencode["plugin"] == READ_ONLY, opencode
        assert opencode["data"] == "ok:5", opencode
        for pane in ("claude", "codex", "opencode"):
            await tools.call("remove_pane", name=pane)
    # The host's files never saw a byte of it: what the operator's CLI reads next.
    assert (h / ".claude/settings.json").read_text() == HOST_SETTINGS
    assert "probe" not in (h / ".claude/settings.local.json").read_text()
    assert (h / ".codex/config.toml").read_text() == 'model = "o3"\n'
    assert "probe" not in (h / ".config/opencode/opencode.json").read_text()
    for planted in (
        ".claude/hooks/start.sh",
        ".claude/plugins/evil.js",
        ".claude/commands/evil.md",
        ".codex/prompts/evil.md",
    ):
        assert not (h / planted).exists(), planted
    assert not (h / ".config/opencode/plugin/evil.ts").exists()
    assert (h / ".claude/history.jsonl").read_text() == "probe"


async def test_a_program_naming_file_that_is_a_link_in_a_writable_dir_refuses_the_start(
    home: Home,
) -> None:
    # The pane could replace the link by a file of its own: the start is refused.
    settings = home.home / ".claude" / "settings.json"
    real = home.base / "dotfiles-settings.json"
    settings.rename(real)
    settings.symlink_to(real)
    async with Client(stdio_params(home.state, **home.env())) as client:
        tools = Tools(client)
        cwd = _pane_cwd(home, "claude")
        refused = await tools.error("start_pane", name="c", profile="claude", cwd=str(cwd))
        assert refused["code"] == "sandbox_unavailable", refused
        assert "symbolic link" in refused["message"], refused
        # Another kind starts: only claude's path is a link.
        await probe(tools, "x", "codex", _pane_cwd(home, "codex"), {})
    assert real.read_text() == HOST_SETTINGS
