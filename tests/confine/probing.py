"""Run ``probe.py`` as a confined pane and read what it saw (shared by the tests of
what a pane reaches of HOME and of the user's other services)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests.conftest import REPO, Tools
from tests.polling import apoll

PROBE = REPO / "tests" / "confine" / "probe.py"
SETTLE_S = 30


def probe_profile(name: str, cwds: list[str], **fields: Any) -> dict[str, Any]:
    """A confined profile that runs the probe (``fields``: agent, network, ...)."""
    return {
        "name": name,
        "argv": [sys.executable, str(PROBE)],
        "cwds": cwds,
        "confine": True,
        "network": "none",
        **fields,
    }


def python_run(code: str, *args: str) -> list[str]:
    """A probe check that runs ``code`` (with ``args``) with this interpreter inside the
    pane; the probe reports ``rc=<code> <stdout> <stderr>``."""
    return ["run", json.dumps([sys.executable, "-c", code, *args])]


def run_output(outcome: str) -> object:
    """The JSON value a ``python_run`` check printed first (``ok:`` and ``rc=0`` off)."""
    prefix = "ok:rc=0 "
    assert outcome.startswith(prefix), outcome
    value, _end = json.JSONDecoder().raw_decode(outcome[len(prefix) :])
    return value


async def probe(
    tools: Tools, pane: str, profile: str, cwd: Path, checks: dict[str, Any]
) -> dict[str, str]:
    """Start ``pane`` in ``cwd`` with ``checks``; what the probe saw, by check."""
    results = cwd / "results.json"
    results.unlink(missing_ok=True)
    (cwd / "checks.json").write_text(json.dumps(checks))
    await tools.call("start_pane", name=pane, profile=profile, cwd=str(cwd))
    assert await apoll(results.exists, SETTLE_S), "the probe wrote no results"
    return dict(json.loads(results.read_text()))
