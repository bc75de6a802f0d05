"""Fixtures for the HTTP service tests: a real ``serve --http`` subprocess and SDK clients.

Every service is a subprocess on 127.0.0.1 with an ephemeral port and its own
state dir; the fixture waits for ``$STATE/run/http`` with a monotonic deadline and,
at teardown, stops it with SIGTERM (SIGKILL after a bound) and kills and reaps any
process it left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx2
import psutil
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent

from tests.polling import poll

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0
CALL_TIMEOUT_S = 30.0

T = TypeVar("T")


def run(coro: Awaitable[T], timeout_s: float = 60.0) -> T:
    """Run ``coro`` in a fresh event loop with an overall bound."""

    async def bounded() -> T:
        async with asyncio.timeout(timeout_s):
            return await coro

    return asyncio.run(bounded())


def write_secret(path: Path, text: str, mode: int = 0o600) -> Path:
    """Write ``text`` to ``path`` with exactly ``mode``."""
    path.write_text(text, encoding="utf-8")
    os.chmod(path, mode)
    return path


def new_token() -> str:
    """A fresh random bearer token."""
    return secrets.token_hex(32)


def digest(token: str) -> str:
    """The ``token_sha256`` a clients file records for ``token``."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass
class Service:
    """One ``panewarden serve --http`` subprocess and the files it was given."""

    root: Path
    env: dict[str, str]
    args: list[str]
    proc: subprocess.Popen[bytes] | None = None
    url: str = ""
    descendants: set[psutil.Process] = field(default_factory=set)

    @property
    def state_dir(self) -> Path:
        return Path(self.env["PANEWARDEN_STATE_DIR"])

    @property
    def url_file(self) -> Path:
        return self.state_dir / "run" / "http"

    @property
    def stderr_path(self) -> Path:
        return self.root / "service.stderr"

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def start(self) -> Service:
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "supervisor", *self.args],
                cwd=REPO,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        proc = self.proc
        poll(
            lambda: self.url_file.exists() or proc.poll() is not None,
            START_TIMEOUT_S,
            what="the service to write run/http",
        )
        if proc.poll() is not None:
            raise AssertionError(f"service exited with {proc.returncode}:\n{self.stderr()}")
        self.url = self.url_file.read_text().strip()
        return self

    def send_signal(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    def remember_children(self) -> None:
        """Record the service's descendants so teardown can reap what it leaves."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(psutil.NoSuchProcess):
            self.descendants |= set(psutil.Process(self.proc.pid).children(recursive=True))

    def stop(self, signum: int = signal.SIGTERM, *, reap: bool = True) -> int:
        """Stop the service; returns its exit status. ``reap`` also kills what it left."""
        if self.proc is None:
            return 0
        self.remember_children()
        if self.proc.poll() is None:
            self.proc.send_signal(signum)
        try:
            code = self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(timeout=STOP_TIMEOUT_S)
        if reap:
            self.reap()
        return code

    def reap(self) -> None:
        """Kill every descendant the service was seen with (a no-op for those gone)."""
        for child in self.descendants:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
        psutil.wait_procs(list(self.descendants), timeout=5)


@dataclass
class ServiceFactory:
    """Builds services with a token file, optional clients/audit files and env."""

    tmp_path: Path
    started: list[Service] = field(default_factory=list)
    counter: int = 0

    def prepare(
        self,
        *,
        token: str | None = "",
        clients: list[dict[str, Any]] | None = None,
        audit: bool = False,
        profiles: dict[str, Any] | None = None,
        extra_env: dict[str, str] | None = None,
        args: list[str] | None = None,
    ) -> Service:
        """A configured, not yet started service (``token=""`` means a fresh one)."""
        self.counter += 1
        root = self.tmp_path / f"svc{self.counter}"
        root.mkdir(mode=0o700)
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("PANEWARDEN_", "HTTP", "ALL_"))
        }
        env |= {
            "PANEWARDEN_STATE_DIR": str(root / "state"),
            "PANEWARDEN_ORPHAN_GRACE_S": "10",
            "PANEWARDEN_LOG_LEVEL": "INFO",
            # As every service under test (tests/conftest.py): unconfined unless asked.
            "PANEWARDEN_CONFINE": os.environ.get("PANEWARDEN_CONFINE", "off"),
        }
        if token is not None:
            env["PANEWARDEN_TOKEN_FILE"] = str(write_secret(root / "token", token or new_token()))
        if clients is not None:
            env["PANEWARDEN_CLIENTS"] = str(
                write_secret(root / "clients.json", json.dumps(clients))
            )
        if audit:
            audit_dir = root / "audit"
            audit_dir.mkdir(mode=0o700)
            env["PANEWARDEN_AUDIT_FILE"] = str(audit_dir / "audit.jsonl")
        if profiles is not None:
            env["PANEWARDEN_PROFILES"] = str(
                write_secret(root / "profiles.json", json.dumps(profiles))
            )
        env |= extra_env or {}
        argv = args or ["serve", "--http", "--host", "127.0.0.1", "--port", "0"]
        service = Service(root=root, env=env, args=argv)
        self.started.append(service)
        return service

    def start(self, **kwargs: Any) -> Service:
        return self.prepare(**kwargs).start()

    def successor(self, service: Service) -> Service:
        """A not yet started service on ``service``'s state dir and settings: a restart.

        Call it once ``service`` is dead: its URL file, which a SIGKILLed service leaves
        behind, is removed so that ``start`` waits for the successor's own.
        """
        self.counter += 1
        root = self.tmp_path / f"svc{self.counter}"
        root.mkdir(mode=0o700)
        service.url_file.unlink(missing_ok=True)
        successor = Service(root=root, env=dict(service.env), args=list(service.args))
        self.started.append(successor)
        return successor

    def close(self) -> None:
        for service in reversed(self.started):
            service.stop()


@pytest.fixture
def services(tmp_path: Path) -> Iterator[ServiceFactory]:
    """A factory of services, each stopped and reaped at teardown."""
    factory = ServiceFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture(scope="module")
def module_services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceFactory]:
    """Like ``services``, shared by the tests of one module."""
    factory = ServiceFactory(tmp_path_factory.mktemp("svc"))
    try:
        yield factory
    finally:
        factory.close()


def token_of(service: Service) -> str:
    return Path(service.env["PANEWARDEN_TOKEN_FILE"]).read_text().strip()


@contextlib.asynccontextmanager
async def connect(url: str, token: str | None) -> AsyncIterator[Client]:
    """An SDK client over streamable HTTP with a bearer token."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    http = httpx2.AsyncClient(
        headers=headers, timeout=httpx2.Timeout(CALL_TIMEOUT_S), trust_env=False
    )
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        yield client


async def call(client: Client, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    """Call ``tool``; returns structured content, or ``{"error": {...}}`` for an error result."""
    result: CallToolResult = await client.call_tool(
        tool, args or {}, read_timeout_seconds=CALL_TIMEOUT_S
    )
    if result.is_error:
        text = next(c.text for c in result.content if isinstance(c, TextContent))
        return {"error": json.loads(text)}
    return dict(result.structured_content or {})


def ok(result: dict[str, Any]) -> dict[str, Any]:
    """Assert a call succeeded and return its result."""
    assert "error" not in result, result
    return result


def read_audit(path: Path) -> list[dict[str, Any]]:
    """The audit file's records (none if it does not exist yet)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line]
