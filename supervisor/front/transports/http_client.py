"""Finding and calling the running HTTP service (``status``, ``stdio-proxy``).

The service records its URL in ``$STATE/run/http`` once it listens; a client reads
it with the one safe reader and calls with the token file's token over loopback.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from protocol.errors import ErrorCode, PanewardenError
from protocol.safe_files import FileReadError, read_regular_file
from supervisor.auth.clients import read_token_file
from supervisor.config import ServiceConfig

URL_FILE_LIMIT_BYTES = 4096
CLIENT_READ_TIMEOUT_S = 3660.0
CLIENT_CONNECT_TIMEOUT_S = 10.0


def service_url_path(state_dir: Path) -> Path:
    """Where a running HTTP service records its URL."""
    return state_dir / "run" / "http"


def read_service_url(config: ServiceConfig) -> str | None:
    """The running HTTP service's URL, or None if no service recorded one."""
    try:
        data = read_regular_file(
            service_url_path(config.state_dir),
            limit_bytes=URL_FILE_LIMIT_BYTES,
            follow_symlinks=False,
        )
    except FileReadError:
        return None
    return data.decode("utf-8", errors="replace").strip() or None


@contextlib.asynccontextmanager
async def service_client(config: ServiceConfig, url: str | None = None) -> AsyncIterator[Client]:
    """An SDK client connected to the running HTTP service with the token file's token.

    Raises:
        PanewardenError: ``not_found`` when no service recorded a URL;
            ``config_invalid`` when the token file is missing or unsafe.
    """
    target = url or read_service_url(config)
    if target is None:
        raise PanewardenError(
            ErrorCode.NOT_FOUND,
            f"no HTTP service is running for {config.state_dir} "
            f"({service_url_path(config.state_dir)} is absent)",
        )
    if config.token_file is None:
        raise PanewardenError(
            ErrorCode.CONFIG_INVALID, "PANEWARDEN_TOKEN_FILE is needed to call the HTTP service"
        )
    token = read_token_file(config.token_file)
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"},
        timeout=httpx2.Timeout(CLIENT_CONNECT_TIMEOUT_S, read=CLIENT_READ_TIMEOUT_S),
        # Loopback only: an HTTP(S)_PROXY from the environment must never see the token.
        trust_env=False,
    )
    async with http, Client(streamable_http_client(target, http_client=http)) as client:
        yield client


def connection_failure(exc: BaseException) -> str | None:
    """A one-line reason when ``exc`` (or a group member) is a transport or HTTP failure."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            reason = connection_failure(inner)
            if reason is not None:
                return reason
        return None
    if isinstance(exc, OSError | TimeoutError):
        return str(exc) or type(exc).__name__
    if isinstance(exc, MCPError):
        # The SDK client reports an HTTP refusal (401 for a wrong token) this way.
        return f"the service refused the request: {exc}"
    # httpx2's errors are not OSErrors; name them without importing its hierarchy here.
    if type(exc).__module__.startswith("httpx"):
        return str(exc) or type(exc).__name__
    return None
