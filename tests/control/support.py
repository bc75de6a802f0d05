"""Helpers of the coordination tests, shared by the scenario, crash and concurrency
tests: launch
profiles of the demo agent (a normal one, a slow one whose turns last seconds, one that
cannot start), controller credentials, the on-disk records, and a search of anything
serialised for a secret that must not be in it.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from supervisor.control.records import ControllerLease, PaneLease, Receipt
from tests.conftest import Tools
from tests.faults import Marks, ProcKey, key_of, start_ticks

AUTHORITY_SHA = hashlib.sha256(b"issue 8: coordination").hexdigest()
CHECKPOINT_SHA = hashlib.sha256(b"checkpoint").hexdigest()
# Each step of the slow demo agent's turn (3 steps): long enough that a turn is still
# `working` when the test looks, short enough to keep the tests quick.
SLOW_STEP_S = 0.6


def demo_argv(mark: str, step_s: float | None = None) -> list[str]:
    """The bundled demo agent, marked so the test finds its processes; ``step_s`` makes
    each turn step last that long (the agent reads its step length at run time)."""
    if step_s is None:
        return [sys.executable, "-m", "supervisor.demo.agent", mark]
    code = (
        "import supervisor.demo.agent as agent; "
        f"agent.STEP_SECONDS = {step_s!r}; "
        "raise SystemExit(agent.main())"
    )
    return [sys.executable, "-c", code, mark]


SCRIPTED_AGENT = Path(__file__).with_name("scripted_agent.py")
FAKE_ACP_AGENT = Path(__file__).parent.parent / "acp" / "fake_acp_agent.py"


def coordination_profiles(marks: Marks) -> dict[str, Any]:
    """Profiles ``demo`` (turns of ~0.1 s), ``slow`` (turns of ~2 s), ``broken``
    (a program that does not exist: every start fails) and ``scripted`` (the demo agent
    with a late turn start and a late-drawn reply: ``tests/control/scripted_agent.py``)."""
    return {
        "max_panes": 64,
        "profiles": [
            {"name": "demo", "agent": "demo", "argv": demo_argv(marks.arg(0)), "cwds": ["/"]},
            {
                "name": "slow",
                "agent": "demo",
                "argv": demo_argv(marks.arg(1), SLOW_STEP_S),
                "cwds": ["/"],
            },
            {
                "name": "broken",
                "agent": "demo",
                "argv": [f"/nonexistent/{marks.run}/agent", marks.arg(2)],
                "cwds": ["/"],
            },
            {
                # The same turns on the other substrate: the fake ACP agent.
                "name": "acp",
                "agent": "generic",
                "argv": [sys.executable, str(FAKE_ACP_AGENT), marks.arg(4)],
                "cwds": ["/"],
                "protocol": "acp",
            },
            {
                "name": "scripted",
                "agent": "demo",
                "argv": [sys.executable, str(SCRIPTED_AGENT), marks.arg(3)],
                "cwds": ["/"],
            },
        ],
    }


def write_profiles(marks: Marks) -> Path:
    """The coordination profiles as a file (0600) beside the marks."""
    path = marks.tmp / f"coordination-profiles-{marks.run}.json"
    path.write_text(json.dumps(coordination_profiles(marks)))
    path.chmod(0o600)
    return path


def creds_of(granted: dict[str, Any]) -> dict[str, str]:
    """The ``creds`` argument for a lease a controller tool just granted."""
    return {k: granted[k] for k in ("controller_id", "lease_id", "fence_token")}


@dataclass
class Controller:
    """One controller's credentials over one MCP client."""

    tools: Tools
    creds: dict[str, str]

    @property
    def controller_id(self) -> str:
        return self.creds["controller_id"]

    async def call(self, tool: str, **args: Any) -> dict[str, Any]:
        return await self.tools.call(tool, creds=self.creds, **args)

    async def error(self, tool: str, **args: Any) -> dict[str, Any]:
        return await self.tools.error(tool, creds=self.creds, **args)

    async def reviewer(self, name: str, profile: str = "demo") -> dict[str, Any]:
        """Start a reviewer pane and wait until its program is idle; returns its lease."""
        lease = await self.call(
            "reviewer_start", name=name, profile=profile, cwd="/", purpose=f"review {name}"
        )
        assert lease["state"] == "active", lease
        await self.tools.wait(name, until=["idle"])
        return lease


async def acquire(tools: Tools, controller_id: str, ttl_s: int | None = None) -> Controller:
    """``controller_acquire`` and the controller it makes."""
    args: dict[str, Any] = {}
    if ttl_s is not None:
        args["ttl_s"] = ttl_s
    granted = await tools.call(
        "controller_acquire",
        controller_id=controller_id,
        authority_ref="issue-8",
        authority_sha256=AUTHORITY_SHA,
        **args,
    )
    return Controller(tools, creds_of(granted))


async def pane_info(tools: Tools, name: str) -> dict[str, Any]:
    """The pane's entry in ``list_panes``."""
    (pane,) = [p for p in (await tools.call("list_panes"))["panes"] if p["name"] == name]
    return dict(pane)


def send_signal(pid: int, signum: int) -> ProcKey:
    """Signal a live process (through a pidfd, so never a reused pid); returns its key."""
    key = key_of(pid)
    assert key is not None, f"pid {pid} is gone"
    fd = os.pidfd_open(pid)
    try:
        assert start_ticks(pid) == key[1]
        signal.pidfd_send_signal(fd, signum)
    finally:
        os.close(fd)
    return key


def leaked(secrets: list[str], *serialised: object) -> list[str]:
    """The ``secrets`` found anywhere in ``serialised`` (each dumped to JSON if needed)."""
    texts = [s if isinstance(s, str) else json.dumps(s) for s in serialised]
    return [secret for secret in secrets if any(secret in text for text in texts)]


# ---------------------------------------------------------------- the stores on disk

R = TypeVar("R", bound=msgspec.Struct)


def read_records(directory: Path, record_type: type[R]) -> dict[str, R]:
    """Every record file of a store by key, read without opening the store (opening one
    sweeps temp files, which a live service may be writing)."""
    if not directory.exists():
        return {}
    return {
        path.name[: -len(".json")]: msgspec.json.decode(path.read_bytes(), type=record_type)
        for path in sorted(directory.glob("*.json"))
    }


def controller_records(state: Path) -> dict[str, ControllerLease]:
    return read_records(state / "leases" / "controller", ControllerLease)


def pane_lease_records(state: Path, kind: str = "reviewer") -> dict[str, PaneLease]:
    return read_records(state / "leases" / kind, PaneLease)


def receipt_records(state: Path) -> dict[str, Receipt]:
    return read_records(state / "receipts", Receipt)


def record_texts(state: Path) -> list[str]:
    """The raw text of every coordination record under ``state``."""
    roots = [state / "leases", state / "receipts"]
    return [p.read_text() for root in roots if root.exists() for p in sorted(root.rglob("*.json"))]
