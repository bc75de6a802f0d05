"""Fixtures of the coordination tests: a real supervisor with the coordination profiles,
over stdio (one identity) or HTTP (named clients, one identity each).

A stdio service is shared by the tests of one module (starting one costs seconds on a
loaded machine); each test uses its own controller ids and pane names. Every process a
service started is found by its marks and reaped at teardown, and its absence checked.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from mcp import Client

from tests.conftest import Tools, stdio_params
from tests.control.support import write_profiles
from tests.faults import Marks, describe, sigkill_all
from tests.polling import apoll
from tests.service.conftest import Service, ServiceFactory, connect, digest, new_token

ALL_SCOPES = ["read", "input", "dialog", "lifecycle", "control", "admin"]
# After a service stops, its panes' processes are gone within this bound.
GONE_WITHIN_S = 20.0


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    # Module scope, so a module's tests can share one service (an async fixture).
    return "asyncio"


@dataclass
class Coord:
    """A running stdio service: its client, its marks and its state dir."""

    tools: Tools
    marks: Marks
    state: Path


def coordination_env(marks: Marks, **extra: str) -> dict[str, str]:
    """Service environment: the coordination profiles, marked workers, leases that may be
    as short as 1 s (``PANEWARDEN_LEASE_TTL_MIN_S``)."""
    return marks.env(write_profiles(marks), PANEWARDEN_LEASE_TTL_MIN_S="1", **extra)


async def reap(marks: Marks) -> None:
    """Wait (bounded) for every marked process to be gone; kill and name any survivor."""
    left = await apoll(lambda: not marks.everything(), GONE_WITHIN_S, interval_s=0.2)
    survivors = marks.everything()
    sigkill_all(survivors)
    assert left or not survivors, f"left behind: {describe(survivors)}"


@contextlib.asynccontextmanager
async def stdio_service(tmp: Path, **extra: str) -> AsyncIterator[Coord]:
    """A ``serve --stdio`` service on its own state dir; reaped on exit."""
    state = tmp / "state"
    state.mkdir(mode=0o700)
    marks = Marks(tmp)
    try:
        async with Client(stdio_params(state, **coordination_env(marks, **extra))) as client:
            yield Coord(Tools(client), marks, state)
        await reap(marks)
    finally:
        sigkill_all(marks.everything())


@pytest.fixture(scope="module")
async def coord(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Coord]:
    """One stdio service for the tests of a module."""
    async with stdio_service(tmp_path_factory.mktemp("coord")) as running:
        yield running


# ---------------------------------------------------------------- HTTP, named clients


@dataclass
class HttpCoord:
    """A running HTTP service with named clients (one identity each)."""

    service: Service
    marks: Marks
    tokens: dict[str, str] = field(default_factory=dict)

    @property
    def state(self) -> Path:
        return self.service.state_dir

    @contextlib.asynccontextmanager
    async def client(self, name: str) -> AsyncIterator[Tools]:
        """An SDK client of the named client (identity ``http:<name>``)."""
        async with connect(self.service.url, self.tokens[name]) as client:
            yield Tools(client)


def prepare_http(factory: ServiceFactory, tmp: Path, names: list[str], **extra: str) -> HttpCoord:
    """A configured (not started) HTTP service whose clients are ``names``."""
    marks = Marks(tmp)
    tokens = {name: new_token() for name in names}
    clients = [
        {"name": n, "token_sha256": digest(t), "scopes": ALL_SCOPES} for n, t in tokens.items()
    ]
    service = factory.prepare(
        token=None,
        clients=clients,
        audit=True,
        extra_env=coordination_env(marks, PANEWARDEN_ORPHAN_GRACE_S="60", **extra),
    )
    return HttpCoord(service, marks, tokens)


@dataclass
class HttpCoords:
    """Starts HTTP services with named clients; stops and reaps them at teardown."""

    factory: ServiceFactory
    tmp: Path
    made: list[HttpCoord] = field(default_factory=list)

    def prepare(self, names: list[str], **extra: str) -> HttpCoord:
        made = prepare_http(self.factory, self.tmp, names, **extra)
        self.made.append(made)
        return made

    def start(self, names: list[str], **extra: str) -> HttpCoord:
        made = self.prepare(names, **extra)
        made.service.start()
        return made


@pytest.fixture
async def http_coords(tmp_path: Path) -> AsyncIterator[HttpCoords]:
    """HTTP services with named clients, stopped (SIGTERM) and reaped at teardown."""
    coords = HttpCoords(ServiceFactory(tmp_path), tmp_path)
    try:
        yield coords
    finally:
        coords.factory.close()
        try:
            for made in coords.made:
                await reap(made.marks)
        finally:
            for made in coords.made:
                sigkill_all(made.marks.everything())
