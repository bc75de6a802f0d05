"""Helpers shared by the tests that run the pinned real coding CLIs.

Where the CLIs are installed (``PANEWARDEN_CLI_PREFIX``, default ``.npm-cli`` in the
repo; ``tests/realcli/install.sh`` puts them there), a skip with the install command
when one is absent, and the check that a removed pane left no process of its CLI
behind (found by the fresh HOME every test gives the CLI).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO, Tools
from tests.polling import apoll

PREFIX = Path(os.environ.get("PANEWARDEN_CLI_PREFIX", REPO / ".npm-cli"))
VERSIONS: dict[str, dict[str, str]] = json.loads(
    (Path(__file__).parent / "versions.json").read_text()
)


def cli_path(package: str) -> Path:
    """Where ``package``'s binary is installed (it may be absent)."""
    return PREFIX / VERSIONS[package]["path"]


def need(package: str) -> Path:
    """``package``'s binary; skips the test with the install command when it is absent."""
    path = cli_path(package)
    if not path.exists():
        pytest.skip(f"{package} is not installed: run `bash tests/realcli/install.sh {PREFIX}`")
    return path


def model_network(port: int) -> list[str]:
    """A confined CLI's ``network``: the default ``["public"]`` and the fake model on
    loopback as a listed destination (the operator's choice: a listed loopback address
    is reached; ``"public"`` alone refuses every loopback one)."""
    return ["public", f"127.0.0.1:{port}"]


def procs_of(home: Path) -> list[psutil.Process]:
    """Every live process whose HOME is ``home`` (the CLI and anything it started)."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get("HOME") == str(home) and proc.status() != "zombie":
                found.append(proc)
        except psutil.Error:
            continue
    return found


async def remove_and_check_nothing_left(
    tools: Tools, name: str, home: Path, timeout_s: float = 10
) -> None:
    """``remove_pane``, then assert no process of that CLI survives."""
    await tools.call("remove_pane", name=name)
    gone = await apoll(lambda: not procs_of(home), timeout_s=timeout_s)
    assert gone, f"processes left behind: {[p.cmdline() for p in procs_of(home)]}"
