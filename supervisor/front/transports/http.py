"""``panewarden serve --http``: streamable HTTP at ``/mcp`` on a loopback address.

Everything about the protocol, bearer authentication and Host/Origin checking is
the MCP SDK's own: ``MCPServer.streamable_http_app`` with a ``TokenVerifier`` and
``AuthSettings``, and ``TransportSecuritySettings``. One thing is arranged here:
the order of the checks. The SDK puts its bearer middleware in front of the
transport's Host/Origin check, so a request from a rebinding page without a token
would get 401 instead of 421. ``HostOriginGate`` runs the SDK's own
``TransportSecurityMiddleware`` validation in front of the whole app, so the
order is Host (421) -> Origin (403) -> bearer (401), as docs/design.md §6 requires: a
request for a foreign Host is refused before anything looks at credentials.

uvicorn runs inside the same asyncio loop as the ``PaneService``. Its own signal
capture is switched off: ``serve_until_signalled`` owns SIGTERM/SIGINT (graceful
stop, panes closed unless ``--keep-panes``) and SIGHUP (profiles, clients and the
audit file reloaded). The bound URL is written to ``$STATE/run/http`` so that
``panewarden status``, ``stdio-proxy`` and tests find a ``--port 0`` service.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import logging
import socket
from collections.abc import Iterator

import uvicorn
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import (
    DEFAULT_MAX_REQUEST_BODY_SIZE,
    TransportSecurityMiddleware,
    TransportSecuritySettings,
)
from pydantic import AnyHttpUrl
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from protocol.errors import ErrorCode, PanewardenError
from supervisor.auth.http_access import ClientTokenVerifier, HttpAccess, HttpGate
from supervisor.config import ServiceConfig
from supervisor.front.feed.http_routes import FeedRoutes
from supervisor.front.mcp_server import build_server
from supervisor.front.runtime import Services, running_service, serve_until_signalled
from supervisor.front.transports.http_client import service_url_path
from supervisor.front.transports.unreadable import AnsweringHttp
from supervisor.store.statedir import atomic_write, ensure_private_dir

log = logging.getLogger(__name__)

MCP_PATH = "/mcp"
LISTEN_BACKLOG = 128
# The SDK's own bound on a request body (beyond it: 413), named here so that the
# answers to unreadable bodies record no more than it reads.
MAX_BODY_BYTES = DEFAULT_MAX_REQUEST_BODY_SIZE
# Long-lived SSE streams keep connections open; past this the stop cancels them.
GRACEFUL_HTTP_STOP_S = 3
# Longest tool wait (timeout_s max 3600) plus a margin: a client must not give up first.


def loopback_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """Parse ``--host``: a literal address in 127.0.0.0/8 or ``::1``, nothing else.

    Names (``localhost`` included) are refused: what a name resolves to is not
    under this process's control, and the check must hold before anything binds.

    Raises:
        PanewardenError: ``config_invalid`` for a name or a non-loopback address.
    """
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise PanewardenError(
            ErrorCode.CONFIG_INVALID,
            f"--host {host[:64]!r} is not a literal IP address; use 127.0.0.1 or ::1",
        ) from None
    if isinstance(address, ipaddress.IPv6Address):
        # Only ::1 itself: an IPv4-mapped address would bind a dual-stack socket.
        if address != ipaddress.IPv6Address("::1"):
            raise PanewardenError(
                ErrorCode.CONFIG_INVALID, f"--host {host} is not a loopback address; use ::1"
            )
        return address
    if not address.is_loopback:
        raise PanewardenError(
            ErrorCode.CONFIG_INVALID,
            f"--host {host} is not a loopback address (127.0.0.0/8 or ::1); "
            "panewarden never listens on a network interface",
        )
    return address


def _authority(address: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int) -> str:
    return f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"


def parse_allowed_hosts(entries: tuple[str, ...]) -> list[str]:
    """Check ``PANEWARDEN_ALLOWED_HOSTS`` entries: each ``host:port`` with a numeric port.

    Raises:
        PanewardenError: ``config_invalid`` naming the malformed entry.
    """
    hosts: list[str] = []
    for entry in entries:
        name, sep, port = entry.rpartition(":")
        if (
            not sep
            or not name
            or not port.isdigit()
            or not 0 < int(port) < 65536
            or any(c in entry for c in "/@ *")
        ):
            raise PanewardenError(
                ErrorCode.CONFIG_INVALID,
                f"PANEWARDEN_ALLOWED_HOSTS: {entry[:80]!r} is not host:port",
            )
        hosts.append(entry.lower())
    return hosts


def transport_security(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int, extra_hosts: list[str]
) -> TransportSecuritySettings:
    """Host and Origin allow-lists for the bound port (exact ports, no wildcards)."""
    loopback = [f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"]
    bound = _authority(address, port)
    if bound not in loopback:
        loopback.append(bound)
    origins = [f"http://{h}" for h in loopback]
    # Extra hosts sit behind a TLS-terminating front (e.g. tailscale serve), so a
    # browser page there has an https origin.
    origins += [f"{scheme}://{h}" for h in extra_hosts for scheme in ("https", "http")]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=loopback + extra_hosts,
        allowed_origins=origins,
    )


class HostOriginGate:
    """Pure ASGI: the SDK's Host/Origin validation, applied before authentication."""

    def __init__(self, app: ASGIApp, settings: TransportSecuritySettings) -> None:
        self._app = app
        self._security = TransportSecurityMiddleware(settings)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse a bad Host (421) or Origin (403); pass everything else to the app."""
        if scope["type"] == "http":
            # is_post=False: only Host and Origin here; the transport checks the
            # content type itself, after authentication, as before.
            refusal = await self._security.validate_request(Request(scope), is_post=False)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self._app(scope, receive, send)


class _LoopServer(uvicorn.Server):
    """uvicorn without its own signal handlers: the service's loop owns the signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _listen(address: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int) -> socket.socket:
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    # proto must say TCP: asyncio only disables Nagle on accepted sockets whose proto is
    # IPPROTO_TCP, and with proto 0 every response waited ~40 ms for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((str(address), port))
        sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise PanewardenError(
            ErrorCode.CONFIG_INVALID,
            f"cannot listen on {_authority(address, port)}: {exc.strerror}",
        ) from None
    return sock


def _http_app(
    services: Services,
    gate: HttpGate,
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
    port: int,
    extra_hosts: list[str],
) -> ASGIApp:
    """The SDK's streamable HTTP app with bearer auth, behind the Host/Origin gate."""
    server = build_server(
        services,
        HttpAccess(gate),
        token_verifier=ClientTokenVerifier(gate),
        # The SDK requires AuthSettings with a verifier; this service is its own issuer
        # and publishes no protected-resource metadata.
        auth=AuthSettings(
            issuer_url=AnyHttpUrl(f"http://{_authority(address, port)}"),
            resource_server_url=None,
        ),
    )
    settings = transport_security(address, port, extra_hosts)
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH, transport_security=settings, host=str(address)
    )
    # The feed and the status page sit behind the same gate as /mcp.
    routes = FeedRoutes(AnsweringHttp(app, MAX_BODY_BYTES), services.feed, gate)
    return HostOriginGate(routes, settings)


def _uvicorn(app: ASGIApp) -> _LoopServer:
    return _LoopServer(
        uvicorn.Config(
            app,
            # Keep the service's JSON log format; no per-request access lines.
            log_config=None,
            access_log=False,
            lifespan="on",
            # Nothing sits in front of a loopback listener: never trust X-Forwarded-*.
            proxy_headers=False,
            server_header=False,
            ws="none",
            timeout_graceful_shutdown=GRACEFUL_HTTP_STOP_S,
        )
    )


async def serve_http(
    config: ServiceConfig,
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
    port: int,
    keep_panes: bool,
    gate: HttpGate,
) -> None:
    """Serve until SIGTERM/SIGINT; SIGHUP reloads profiles, clients and the audit file."""
    extra_hosts = parse_allowed_hosts(config.allowed_hosts)
    async with running_service(config, keep_panes=keep_panes, audit=gate.audit_ctl) as services:
        service = services.panes
        sock = _listen(address, port)
        try:
            bound_port = int(sock.getsockname()[1])
            uv = _uvicorn(_http_app(services, gate, address, bound_port, extra_hosts))
            url = f"http://{_authority(address, bound_port)}{MCP_PATH}"
            url_file = service_url_path(config.state_dir)
            ensure_private_dir(url_file.parent)
            # Written once the socket listens: a client that reads it and connects
            # early waits in the backlog until uvicorn starts accepting.
            atomic_write(url_file, f"{url}\n".encode())
            log.info(
                "serving streamable HTTP at %s (clients: %s)",
                url,
                ", ".join(gate.table.names()),
                extra={"op": "serve"},
            )

            def reload_clients() -> None:
                gate.reload()

            async def serve() -> None:
                inner = asyncio.ensure_future(uv.serve(sockets=[sock]))
                try:
                    await asyncio.shield(inner)
                except asyncio.CancelledError:
                    # A stop signal: let uvicorn finish in-flight responses (bounded by
                    # GRACEFUL_HTTP_STOP_S) and run the app's shutdown, then stop. Feed
                    # streams never finish by themselves: they are ended first.
                    if services.feed is not None:
                        services.feed.end_viewers()
                    uv.should_exit = True
                    await inner
                    raise

            try:
                await serve_until_signalled(
                    service,
                    config,
                    serve,
                    on_reload=reload_clients,
                    notifier=services.notifier,
                )
            finally:
                url_file.unlink(missing_ok=True)
        finally:
            sock.close()


def serve_http_command(args: argparse.Namespace, config: ServiceConfig) -> int:
    """Check the address and access files, then serve; returns the exit status.

    Raises:
        PanewardenError: ``config_invalid`` (exit status 2 via ``serve_command``)
            for a non-loopback ``--host``, a bad port, or a missing or unsafe file.
    """
    address = loopback_address(args.host)
    if not 0 <= args.port <= 65535:
        raise PanewardenError(ErrorCode.CONFIG_INVALID, f"--port {args.port} is out of range")
    parse_allowed_hosts(config.allowed_hosts)
    gate = HttpGate(config)
    try:
        asyncio.run(serve_http(config, address, args.port, args.keep_panes, gate))
    finally:
        gate.close()
    return 0
