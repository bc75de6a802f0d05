"""``serve --stdio`` answers ``initialize`` before it loads and starts the service.

The stdio path imports the SDK and the server shell only; the service's modules load
after the answer. A service that then cannot start still ends with exit 2 and its
message, and never leaves the client waiting on a tool request.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from supervisor.store.statedir import SupervisorLock
from tests.conftest import REPO, service_env

# Modules of the service proper: none may load before ``initialize`` is answered.
SERVICE_PACKAGES = (
    "supervisor.front.runtime",
    "supervisor.front.mcp_server",
    "supervisor.front.tools.pane_tools",
    "supervisor.control",
    "supervisor.panes",
    "supervisor.lanes",
    "supervisor.workers",
    "supervisor.notify",
)

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}


def test_the_stdio_path_imports_no_service_module() -> None:
    probe = (
        "import sys\n"
        "import supervisor.cli.main, supervisor.cli.serve, supervisor.front.transports.stdio\n"
        f"print([m for m in sys.modules if m.startswith({SERVICE_PACKAGES!r})])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == "[]", out.stdout


def test_a_start_refused_after_initialize_still_exits_2_with_its_message(
    state_dir: Path,
) -> None:
    lock = SupervisorLock(state_dir)
    lock.acquire()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "supervisor", "serve", "--stdio"],
            env=service_env(state_dir),
            cwd=str(REPO),
            input=json.dumps(INITIALIZE) + "\n",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        lock.release()
    answers = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert answers and answers[0]["id"] == 1, proc.stdout
    assert answers[0]["result"]["serverInfo"]["name"] == "panewarden"
    assert proc.returncode == 2, proc
    assert "another supervisor" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
