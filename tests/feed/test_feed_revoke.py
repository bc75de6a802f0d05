"""A clients reload that removes a client, or takes its ``read`` scope, ends the ``/feed``
streams it already had open at once, while another client's stream goes on."""

from __future__ import annotations

import json
import select
import signal
import socket
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.polling import poll
from tests.service.conftest import Service, ServiceFactory, digest, new_token, write_secret

# Well below the feed's 15 s keepalive: an ended stream is seen at the reload, not later.
ENDED_WITHIN_S = 5.0


def _open_feed(service: Service, token: str) -> socket.socket:
    """A raw ``GET /feed`` (every pane's statuses), read up to its first comment."""
    parts = urlsplit(service.url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=10)
    sock.sendall(
        f"GET /feed HTTP/1.1\r\nHost: {parts.netloc}\r\nAuthorization: Bearer {token}\r\n"
        "Connection: close\r\n\r\n".encode()
    )
    seen = b""
    while b": feed" not in seen:
        chunk = sock.recv(4096)
        assert chunk, seen
        seen += chunk
    assert seen.startswith(b"HTTP/1.1 200"), seen
    return sock


def _ended(sock: socket.socket) -> bool:
    """True once the stream reached its end (the peer closed)."""
    while select.select([sock], [], [], 0)[0]:
        if not sock.recv(65536):
            return True
    return False


@pytest.mark.timeout(60)
@pytest.mark.parametrize("change", ["removed", "read scope taken"])
def test_a_reload_ends_the_feeds_of_a_revoked_client(services: ServiceFactory, change: str) -> None:
    gone, kept = new_token(), new_token()
    entries = [
        {"name": "gone", "token_sha256": digest(gone), "scopes": ["read"]},
        {"name": "kept", "token_sha256": digest(kept), "scopes": ["read"]},
    ]
    service = services.start(clients=entries, audit=True)
    revoked, other = _open_feed(service, gone), _open_feed(service, kept)
    try:
        if change == "removed":
            entries = entries[1:]
        else:
            entries[0]["scopes"] = ["lifecycle"]
        write_secret(Path(service.env["PANEWARDEN_CLIENTS"]), json.dumps(entries))
        before = service.stderr().count("clients reloaded")
        service.send_signal(signal.SIGHUP)
        poll(lambda: service.stderr().count("clients reloaded") > before, 15, what="the reload")
        assert poll(lambda: _ended(revoked), ENDED_WITHIN_S), "the revoked feed is still open"
        assert not _ended(other), "the kept client's feed ended too"
    finally:
        revoked.close()
        other.close()
