"""The MCP Inspector CLI, a client we did not write, lists and calls tools over HTTP.

Needs the pinned inspector from ``tests/service/install_inspector.sh`` in the prefix
``$PANEWARDEN_INSPECTOR_PREFIX`` (default ``.npm-cli/inspector`` in the repository);
skipped with a message when it is not installed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.service.conftest import REPO, Service, ServiceFactory, token_of

INSPECTOR_TIMEOUT_S = 90.0


def _prefix() -> Path:
    return Path(os.environ.get("PANEWARDEN_INSPECTOR_PREFIX") or REPO / ".npm-cli" / "inspector")


@pytest.fixture
def inspector() -> Path:
    prefix = _prefix()
    if shutil.which("npx") is None:
        pytest.skip("npx is not installed")
    if not (prefix / "node_modules" / ".bin" / "mcp-inspector").exists():
        pytest.skip(
            f"MCP Inspector not installed in {prefix}; run tests/service/install_inspector.sh"
        )
    return prefix


def _run_inspector(
    prefix: Path, service: Service, token: str, *args: str
) -> subprocess.CompletedProcess[str]:
    home = service.root / "inspector-home"
    home.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        # The inspector keeps a catalog and client config under HOME unless told otherwise.
        "MCP_CATALOG_PATH": str(home / "catalog.json"),
        "MCP_CLIENT_CONFIG_PATH": str(home / "client.json"),
        "NO_COLOR": "1",
    }
    return subprocess.run(
        [
            "npx",
            "--no-install",
            "--prefix",
            str(prefix),
            "mcp-inspector",
            "--cli",
            service.url,
            "--transport",
            "http",
            "--header",
            f"Authorization: Bearer {token}",
            *args,
        ],
        cwd=home,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=INSPECTOR_TIMEOUT_S,
        check=False,
    )


def _inspect(prefix: Path, service: Service, token: str, *args: str) -> Any:
    proc = _run_inspector(prefix, service, token, *args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_inspector_lists_and_calls_tools(inspector: Path, services: ServiceFactory) -> None:
    service = services.start()
    token = token_of(service)

    listed = _inspect(inspector, service, token, "--method", "tools/list")
    tools = {tool["name"]: tool for tool in listed["tools"]}
    assert {"start_pane", "send_input", "list_panes", "remove_pane"} <= set(tools)
    assert tools["list_panes"]["annotations"]["readOnlyHint"] is True
    assert tools["send_input"]["inputSchema"]["additionalProperties"] is False

    called = _inspect(
        inspector, service, token, "--method", "tools/call", "--tool-name", "list_panes"
    )
    assert called.get("isError") in (None, False)
    assert called["structuredContent"] == {"panes": []}


def test_inspector_with_a_wrong_token_fails(inspector: Path, services: ServiceFactory) -> None:
    service = services.start()
    proc = _run_inspector(inspector, service, "not-the-token-0123456789", "--method", "tools/list")
    assert proc.returncode != 0
    # On a 401 the inspector falls back to OAuth discovery, which this service does not
    # offer; non-interactive, it reports that authentication is required.
    assert "auth_required" in proc.stderr, proc.stderr[-2000:]
