"""A real supervisor over stdio, a controller lease, and a real repository with linked
worktrees, for the writer-lane and verification tests."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.conftest import Tools, stdio_params
from tests.control.support import FAKE_ACP_AGENT, SCRIPTED_AGENT
from tests.lanes.gitrepo import Repo, head, make_repo, status_sha256

AUTHORITY_SHA = hashlib.sha256(b"ticket 10 accepted").hexdigest()
CHECKPOINT_SHA = hashlib.sha256(b"checkpoint").hexdigest()


def profiles_file(tmp: Path, **top: Any) -> Path:
    """``demo`` anywhere; ``editor`` (the demo agent that edits files) and ``editor-acp``
    (the fake ACP agent that edits files, an ACP pane) below ``tmp``;
    ``scripted`` (tests/control/scripted_agent.py: a late turn start, a late-drawn reply)
    anywhere. ``top``: more top-level fields (``allow_unconfined_writers``)."""
    agent = [sys.executable, "-m", "supervisor.demo.agent"]
    path = tmp / "profiles.json"
    profiles = [
        {"name": "demo", "agent": "demo", "argv": agent, "cwds": ["/"]},
        {"name": "editor", "agent": "demo", "argv": [*agent, "--edits"], "cwds": [str(tmp)]},
        {
            # The same editing agent on the other substrate (tests/acp/fake_acp_agent.py).
            "name": "editor-acp",
            "agent": "generic",
            "argv": [sys.executable, str(FAKE_ACP_AGENT), "--edits"],
            "cwds": [str(tmp)],
            "protocol": "acp",
        },
        {
            "name": "scripted",
            "agent": "demo",
            "argv": [sys.executable, str(SCRIPTED_AGENT)],
            "cwds": ["/"],
        },
    ]
    path.write_text(json.dumps({"profiles": profiles, **top}))
    return path


@dataclass
class Lanes:
    """The test's view: the MCP tools, a controller's credentials, the repository."""

    tools: Tools
    creds: dict[str, str]
    repo: Repo

    def writer_args(
        self,
        name: str,
        worktree: Path,
        branch: str,
        owned: list[str],
        locked: list[str] | None = None,
        protected: list[str] | None = None,
        profile: str = "demo",
        **evidence: str,
    ) -> dict[str, Any]:
        """writer_start's arguments, with the evidence read from Git unless given."""
        return {
            "creds": self.creds,
            "name": name,
            "profile": profile,
            "purpose": f"work on {', '.join(owned)}",
            "ticket_ref": "issue 10",
            "authority_ref": "issue 10 comment 1",
            "authority_sha256": AUTHORITY_SHA,
            "worktree": str(worktree),
            "branch": branch,
            "base_commit": evidence.get("base_commit", self.repo.base),
            "expected_head": evidence.get("expected_head") or head(worktree),
            "expected_status_sha256": evidence.get("expected_status_sha256")
            or status_sha256(worktree),
            "owned_scopes": owned,
            "locked_scopes": locked or [],
            "protected_branches": protected or ["main"],
        }

    async def start(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return await self.tools.call("writer_start", **self.writer_args(*args, **kwargs))

    async def refused(self, *args: Any, **kwargs: Any) -> str:
        """writer_start's error code for these arguments."""
        body = await self.tools.error("writer_start", **self.writer_args(*args, **kwargs))
        return str(body["code"])

    async def release(self, lease: dict[str, Any], seq: int, worktree: Path) -> dict[str, Any]:
        return await self.tools.call(
            "writer_release",
            creds=self.creds,
            lease_id=lease["lease_id"],
            expected_seq=seq,
            expected_head=head(worktree),
            expected_status_sha256=status_sha256(worktree),
            checkpoint_ref="issue 10 checkpoint",
            checkpoint_sha256=CHECKPOINT_SHA,
        )


async def acquire(tools: Tools, controller_id: str = "coordinator") -> dict[str, str]:
    """A controller lease's credentials."""
    granted = await tools.call(
        "controller_acquire",
        controller_id=controller_id,
        authority_ref="issue 10",
        authority_sha256=AUTHORITY_SHA,
    )
    return {
        "controller_id": controller_id,
        "lease_id": granted["lease_id"],
        "fence_token": granted["fence_token"],
    }


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return make_repo(tmp_path)


@pytest.fixture
async def lanes(tmp_path: Path, state_dir: Path, repo: Repo) -> AsyncIterator[Lanes]:
    params = stdio_params(state_dir, PANEWARDEN_PROFILES=str(profiles_file(tmp_path)))
    async with Client(params) as client:
        tools = Tools(client)
        yield Lanes(tools, await acquire(tools), repo)
