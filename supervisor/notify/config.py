"""The notifications file (``PANEWARDEN_NOTIFY``): its model, bounds and validation.

The file is JSON, a regular file owned by this user with mode 0600 (webhook headers may
hold tokens): ``{"webhooks": [{"url", "events", "headers"?}], "commands": [{"argv",
"events"}]}``. Every field is checked here and a bad one refused with ``config_invalid``
naming it; unknown fields are refused too, so a typo never silently drops a target.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from protocol.errors import ErrorCode, PanewardenError
from protocol.safe_files import FileReadError, read_regular_file

EVENTS: tuple[str, ...] = (
    "blocked",
    "done",
    "cancelled",
    "error",
    "exited",
    "lost",
    "watchdog_gave_up",
    "receipt_ambiguous",
)
FILE_LIMIT_BYTES = 64 * 1024
MAX_TARGETS = 16  # of each kind
MAX_URL_CHARS = 2048
MAX_HEADERS = 32
MAX_HEADER_VALUE_CHARS = 4096
MAX_ARGV = 64
MAX_ARG_CHARS = 4096
# RFC 9110 token characters: a header name.
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")


@dataclass(frozen=True)
class WebhookTarget:
    """POST the event's JSON to ``url`` (with ``headers``) for each of ``events``."""

    url: str
    events: frozenset[str]
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        """How reports name it: scheme and host only (a path or query may be a secret)."""
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


@dataclass(frozen=True)
class CommandTarget:
    """Run ``argv`` (no shell) with the event's JSON on stdin for each of ``events``."""

    argv: tuple[str, ...]
    events: frozenset[str]

    @property
    def label(self) -> str:
        """How reports name it: the program."""
        return self.argv[0]


Target = WebhookTarget | CommandTarget


@dataclass(frozen=True)
class NotifyConfig:
    """Every target of the notifications file (none without one)."""

    webhooks: tuple[WebhookTarget, ...] = ()
    commands: tuple[CommandTarget, ...] = ()

    @property
    def targets(self) -> tuple[Target, ...]:
        """Webhooks, then commands, in file order."""
        return (*self.webhooks, *self.commands)


def _invalid(field: str, why: str) -> PanewardenError:
    return PanewardenError(ErrorCode.CONFIG_INVALID, f"PANEWARDEN_NOTIFY: {field}: {why}")


def load_notify(path: str | None) -> NotifyConfig:
    """Read and check the notifications file (no file: no targets).

    Raises:
        PanewardenError: ``config_invalid`` naming the file or the field at fault.
    """
    if path is None:
        return NotifyConfig()
    try:
        data = read_regular_file(path, limit_bytes=FILE_LIMIT_BYTES, private=True)
    except FileReadError as exc:
        raise _invalid("file", f"{path}: {exc.reason}") from None
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _invalid("file", f"not valid JSON ({exc})") from None
    return parse_notify(doc)


def parse_notify(doc: Any) -> NotifyConfig:
    """Check a parsed notifications document; see ``load_notify``."""
    if not isinstance(doc, dict):
        raise _invalid("file", "must be a JSON object")
    _no_unknown(doc, {"webhooks", "commands"}, "")
    webhooks = _list(doc.get("webhooks", []), "webhooks")
    commands = _list(doc.get("commands", []), "commands")
    return NotifyConfig(
        webhooks=tuple(_webhook(item, f"webhooks[{i}]") for i, item in enumerate(webhooks)),
        commands=tuple(_command(item, f"commands[{i}]") for i, item in enumerate(commands)),
    )


def _list(value: Any, field: str) -> list[Any]:
    if not isinstance(value, list):
        raise _invalid(field, "must be a list")
    if len(value) > MAX_TARGETS:
        raise _invalid(field, f"at most {MAX_TARGETS} targets")
    return value


def _no_unknown(item: dict[str, Any], known: set[str], where: str) -> None:
    for key in item:
        if key not in known:
            raise _invalid(f"{where}{key}", "unknown field")


def _target(item: Any, field: str, known: set[str]) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise _invalid(field, "must be an object")
    _no_unknown(item, known, f"{field}.")
    return item


def _events(value: Any, field: str) -> frozenset[str]:
    if not isinstance(value, list) or not value:
        raise _invalid(field, "must be a non-empty list of event names")
    for name in value:
        if not isinstance(name, str) or name not in EVENTS:
            shown = name if isinstance(name, str) else type(name).__name__
            raise _invalid(field, f"unknown event {str(shown)[:40]!r} (one of {', '.join(EVENTS)})")
    if len(set(value)) != len(value):
        raise _invalid(field, "an event is named twice")
    return frozenset(value)


def _text(value: Any, field: str, limit: int) -> str:
    if not isinstance(value, str) or not value:
        raise _invalid(field, "must be a non-empty string")
    if len(value) > limit:
        raise _invalid(field, f"longer than {limit} characters")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise _invalid(field, "holds a control character")
    return value


def _webhook(item: Any, field: str) -> WebhookTarget:
    target = _target(item, field, {"url", "events", "headers"})
    if "url" not in target:
        raise _invalid(f"{field}.url", "missing")
    url = _text(target["url"], f"{field}.url", MAX_URL_CHARS)
    try:
        parts = urlsplit(url)
        port_ok = parts.port is None or parts.port > 0
    except ValueError as exc:
        raise _invalid(f"{field}.url", f"not a URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise _invalid(f"{field}.url", "only http:// and https:// URLs")
    if not parts.hostname or not port_ok:
        raise _invalid(f"{field}.url", "has no host")
    if parts.fragment or " " in url:
        raise _invalid(f"{field}.url", "must not hold a fragment or a space")
    headers = target.get("headers", {})
    if not isinstance(headers, dict):
        raise _invalid(f"{field}.headers", "must be an object of strings")
    if len(headers) > MAX_HEADERS:
        raise _invalid(f"{field}.headers", f"at most {MAX_HEADERS} headers")
    pairs: list[tuple[str, str]] = []
    for name, value in headers.items():
        if not HEADER_NAME.match(name):
            raise _invalid(f"{field}.headers", f"bad header name {name[:40]!r}")
        if name.lower() in ("content-type", "content-length", "host", "transfer-encoding"):
            raise _invalid(f"{field}.headers.{name}", "is set by the service")
        pairs.append((name, _text(value, f"{field}.headers.{name}", MAX_HEADER_VALUE_CHARS)))
    return WebhookTarget(url, _events(target.get("events"), f"{field}.events"), tuple(pairs))


def _command(item: Any, field: str) -> CommandTarget:
    target = _target(item, field, {"argv", "events"})
    argv = target.get("argv")
    if not isinstance(argv, list) or not argv or len(argv) > MAX_ARGV:
        raise _invalid(f"{field}.argv", f"must be a list of 1 to {MAX_ARGV} strings")
    for i, arg in enumerate(argv):
        if not isinstance(arg, str) or "\0" in arg or len(arg) > MAX_ARG_CHARS:
            raise _invalid(f"{field}.argv[{i}]", "must be a string without NUL")
    if not argv[0]:
        raise _invalid(f"{field}.argv[0]", "names no program")
    return CommandTarget(tuple(argv), _events(target.get("events"), f"{field}.events"))
