"""Which services ``panewarden top`` and ``watch`` talk to, and with which token.

``--url`` names one service; otherwise ``PANEWARDEN_SERVICES`` (a JSON file: a list of
``{name, url, token_file}``) names several (``top`` only); otherwise ``PANEWARDEN_URL``
or the default loopback URL names one. A single service's token file is
``PANEWARDEN_TOKEN_FILE``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from protocol.errors import ErrorCode, PanewardenError
from protocol.safe_files import FileReadError, read_regular_file
from supervisor.config import token_file_setting

DEFAULT_URL = "http://127.0.0.1:8765/mcp"
SERVICES_FILE_LIMIT_BYTES = 64 * 1024
MAX_SERVICES = 32


@dataclass(frozen=True)
class Target:
    """One service to watch: the name its rows carry, its MCP URL, its token file."""

    name: str
    url: str
    token_file: str | None


def _config_error(message: str) -> PanewardenError:
    return PanewardenError(ErrorCode.CONFIG_INVALID, message)


def check_url(url: str, where: str) -> str:
    """``url`` if it is an http(s) URL with a host, else a ``config_invalid`` error."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _config_error(f"{where}: {url!r} is not an http:// or https:// URL")
    return url


def _service_entry(index: int, entry: Any) -> Target:
    where = f"PANEWARDEN_SERVICES[{index}]"
    if not isinstance(entry, dict) or set(entry) - {"name", "url", "token_file"}:
        raise _config_error(f"{where}: an object with name, url and token_file is expected")
    name, url, token_file = entry.get("name"), entry.get("url"), entry.get("token_file")
    if not isinstance(name, str) or not name or len(name) > 64:
        raise _config_error(f"{where}.name: a string of 1..64 characters is expected")
    if not isinstance(url, str):
        raise _config_error(f"{where}.url: a string is expected")
    if not isinstance(token_file, str) or not token_file:
        raise _config_error(f"{where}.token_file: a path is expected")
    return Target(name, check_url(url, f"{where}.url"), token_file)


def load_services(path: str) -> list[Target]:
    """The services listed in the ``PANEWARDEN_SERVICES`` file at ``path``."""
    try:
        raw = read_regular_file(path, limit_bytes=SERVICES_FILE_LIMIT_BYTES)
        entries = json.loads(raw)
    except FileReadError as exc:
        raise _config_error(f"PANEWARDEN_SERVICES: {path!r}: {exc.reason}") from None
    except (ValueError, UnicodeDecodeError):
        raise _config_error(f"PANEWARDEN_SERVICES: {path!r} is not JSON") from None
    if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_SERVICES:
        raise _config_error(f"PANEWARDEN_SERVICES: a list of 1..{MAX_SERVICES} services expected")
    targets = [_service_entry(i, e) for i, e in enumerate(entries)]
    if len({t.name for t in targets}) != len(targets):
        raise _config_error("PANEWARDEN_SERVICES: service names must be unique")
    return targets


def single_target(url: str | None, environ: Mapping[str, str]) -> Target:
    """The one service ``--url``, else ``PANEWARDEN_URL``, else the default URL names."""
    where = "--url" if url is not None else "PANEWARDEN_URL"
    chosen = url if url is not None else environ.get("PANEWARDEN_URL") or DEFAULT_URL
    checked = check_url(chosen, where)
    return Target(urlsplit(checked).netloc or checked, checked, token_file_setting(environ))


def resolve_targets(url: str | None, environ: Mapping[str, str]) -> list[Target]:
    """The services to watch, from ``--url`` and the environment."""
    services = environ.get("PANEWARDEN_SERVICES")
    if url is None and services:
        return load_services(services)
    return [single_target(url, environ)]
