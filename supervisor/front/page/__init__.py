"""The status page at ``GET /`` of the HTTP service: plain HTML, CSS and JS from package
data (no build step), served by :mod:`supervisor.front.feed.http_routes`.

The page asks for the token, keeps it in one JS variable (never a URL, a cookie or
browser storage), reads ``/feed`` with ``fetch`` and a ``ReadableStream`` (EventSource
cannot send an ``Authorization`` header), and shows every pane's status and the screen
of the one selected. It has no control that types into a pane; the strict CSP allows
only its own script, style and connections.
"""

from __future__ import annotations

from importlib import resources

PAGE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def _asset(name: str) -> bytes:
    return resources.files(__package__).joinpath(name).read_bytes()


# Path -> (body, media type); read once at import (three small files).
PAGE_ASSETS: dict[str, tuple[bytes, str]] = {
    "/": (_asset("index.html"), "text/html; charset=utf-8"),
    "/page.js": (_asset("page.js"), "text/javascript; charset=utf-8"),
    "/page.css": (_asset("page.css"), "text/css; charset=utf-8"),
}
