"""Size of ``tools/list`` as a calling model receives it, per tool group.

Starts one ``panewarden serve --http`` with a clients file holding one client per tool
group (every scope) and one with no group limit, asks each for ``tools/list`` over real
streamable HTTP, and prints the number of tools and the characters of the JSON ``tools``
array (what a client puts in its model's context). Part of ``python -m bench``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from bench.core import Figure, Options
from bench.service import bench_environ

REPO = Path(__file__).resolve().parent.parent
SCOPES = ["read", "input", "dialog", "lifecycle", "control", "admin"]
GROUPS = {"all": None, "panes": ["panes"], "coordination": ["coordination"], "lanes": ["lanes"]}


def _secret(path: Path, text: str) -> Path:
    path.write_text(text)
    os.chmod(path, 0o600)
    return path


async def _size(url: str, token: str) -> tuple[int, int]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, trust_env=False)
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        tools = (await client.list_tools()).tools
    body = json.dumps([t.model_dump(by_alias=True, exclude_none=True) for t in tools])
    return len(tools), len(body)


def _measure() -> dict[str, tuple[int, int]]:
    """Per group: (tools, characters)."""
    with tempfile.TemporaryDirectory(prefix="pw-bench-tools-") as tmp:
        root = Path(tmp)
        tokens = {name: secrets.token_hex(32) for name in GROUPS}
        clients = [
            {
                "name": name,
                "token_sha256": hashlib.sha256(token.encode()).hexdigest(),
                "scopes": SCOPES,
                **({"tool_groups": GROUPS[name]} if GROUPS[name] else {}),
            }
            for name, token in tokens.items()
        ]
        audit = root / "audit"
        audit.mkdir(mode=0o700)
        env = bench_environ()
        env |= {
            "PANEWARDEN_STATE_DIR": str(root / "state"),
            "PANEWARDEN_CLIENTS": str(_secret(root / "clients.json", json.dumps(clients))),
            "PANEWARDEN_AUDIT_FILE": str(audit / "audit.jsonl"),
            "PANEWARDEN_LOG_LEVEL": "WARNING",
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "supervisor", "serve", "--http", "--port", "0"],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
        )
        try:
            url_file = root / "state" / "run" / "http"
            deadline = time.monotonic() + 30
            while not url_file.exists():
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("the service did not start")
                time.sleep(0.05)  # a bounded poll for the service's URL file
            url = url_file.read_text().strip()
            return {name: asyncio.run(_size(url, token)) for name, token in tokens.items()}
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


def run(options: Options) -> Sequence[Figure]:
    figures = []
    for group, (count, chars) in _measure().items():
        figures.append(Figure(f"tool_list.{group}.tools", "tools", [float(count)]))
        figures.append(
            Figure(
                f"tool_list.{group}.characters",
                "chars",
                [float(chars)],
                note="JSON of the tools array as a model receives it",
            )
        )
    return figures
