"""HTTP callers: the token file, the named-clients file and the table built from them.

The single-token mode (``PANEWARDEN_TOKEN_FILE``) gives one client, ``operator``,
every scope. ``PANEWARDEN_CLIENTS`` adds named clients, each with the sha256 of its
bearer token and a subset of the scopes. When both are given the token file is
the ``operator`` client beside the named ones. Both files must be regular files
owned by the service's user with mode exactly 0600; anything else refuses the
whole configuration (``config_invalid``), so a reload can keep the old table.

Lookups hash the presented token and compare digests with ``hmac.compare_digest``
against every entry, so neither the token's length nor the position of a match
shows in the timing.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import msgspec

from protocol.errors import ErrorCode, PanewardenError
from protocol.safe_files import FileReadError, read_regular_file
from supervisor.auth.access import SCOPES, TOOL_GROUPS, Caller
from supervisor.config import ServiceConfig

OPERATOR = "operator"
CLIENT_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")
TOKEN_MIN_CHARS = 16
SECRET_FILE_LIMIT_BYTES = 256 * 1024


class ClientEntry(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One record of the clients file."""

    name: str
    token_sha256: str
    scopes: list[str]
    # The tool groups this client sees and may call; absent: every group.
    tool_groups: list[str] | None = None


@dataclass(frozen=True)
class _Entry:
    digest: bytes
    caller: Caller


class ClientTable:
    """An immutable set of callers keyed by the sha256 of their bearer token."""

    __slots__ = ("_entries",)

    def __init__(self, entries: Iterable[tuple[bytes, Caller]]) -> None:
        built: list[_Entry] = []
        names: set[str] = set()
        digests: set[bytes] = set()
        for digest, caller in entries:
            if caller.name in names:
                raise PanewardenError(
                    ErrorCode.CONFIG_INVALID, f"client name {caller.name!r} is used twice"
                )
            if digest in digests:
                raise PanewardenError(
                    ErrorCode.CONFIG_INVALID,
                    f"client {caller.name!r} has the same token as another client",
                )
            names.add(caller.name)
            digests.add(digest)
            built.append(_Entry(digest, caller))
        if not built:
            raise PanewardenError(ErrorCode.CONFIG_INVALID, "no HTTP client is configured")
        self._entries = tuple(built)

    def names(self) -> list[str]:
        """The client names, in file order (``operator`` first when present)."""
        return [e.caller.name for e in self._entries]

    def caller(self, name: str) -> Caller | None:
        """The client called ``name``, or None."""
        return next((e.caller for e in self._entries if e.caller.name == name), None)

    def lookup(self, token: str) -> Caller | None:
        """The caller whose token is ``token``, or None; constant time per entry."""
        presented = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        found: Caller | None = None
        # No early exit: every entry is compared so timing does not reveal which matched.
        for entry in self._entries:
            if hmac.compare_digest(presented, entry.digest):
                found = entry.caller
        return found


def _config_error(message: str) -> PanewardenError:
    return PanewardenError(ErrorCode.CONFIG_INVALID, message)


def read_private_file(path: str, label: str) -> bytes:
    """Read a secret-bearing file that must be a regular file, ours, mode exactly 0600.

    Raises:
        PanewardenError: ``config_invalid`` naming the variable and the problem.
    """
    try:
        return read_regular_file(path, limit_bytes=SECRET_FILE_LIMIT_BYTES, private=True)
    except FileReadError as exc:
        hint = f" (chmod 600 {path})" if exc.reason.startswith("mode") else ""
        raise _config_error(f"{label}: {path!r}: {exc.reason}{hint}") from None


def read_token_file(path: str) -> str:
    """The bearer token held in ``path`` (surrounding whitespace removed).

    Raises:
        PanewardenError: ``config_invalid`` when the file is unsafe, empty or too short.
    """
    raw = read_private_file(path, "PANEWARDEN_TOKEN_FILE")
    try:
        token = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise _config_error(f"PANEWARDEN_TOKEN_FILE: {path!r} is not UTF-8 text") from None
    if not token:
        raise _config_error(f"PANEWARDEN_TOKEN_FILE: {path!r} is empty")
    if any(ch.isspace() or ord(ch) < 0x21 for ch in token):
        raise _config_error(f"PANEWARDEN_TOKEN_FILE: {path!r} must hold one token without spaces")
    if len(token) < TOKEN_MIN_CHARS:
        raise _config_error(
            f"PANEWARDEN_TOKEN_FILE: the token is shorter than {TOKEN_MIN_CHARS} characters"
        )
    return token


def token_digest(token: str) -> bytes:
    """The sha256 digest a clients file records for ``token``."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def _entry_caller(index: int, entry: ClientEntry) -> tuple[bytes, Caller]:
    where = f"PANEWARDEN_CLIENTS: [{index}]"
    if not CLIENT_NAME_RE.fullmatch(entry.name):
        raise _config_error(f"{where}.name {entry.name[:64]!r} must match {CLIENT_NAME_RE.pattern}")
    digest_hex = entry.token_sha256.lower()
    if not DIGEST_RE.fullmatch(digest_hex):
        raise _config_error(f"{where}.token_sha256 must be 64 hexadecimal digits")
    unknown = sorted(set(entry.scopes) - SCOPES)
    if unknown:
        raise _config_error(
            f"{where}.scopes: unknown scope {unknown[0][:32]!r} "
            f"(allowed: {', '.join(sorted(SCOPES))})"
        )
    if not entry.scopes:
        raise _config_error(f"{where}.scopes must name at least one scope")
    if len(set(entry.scopes)) != len(entry.scopes):
        raise _config_error(f"{where}.scopes lists a scope twice")
    groups: frozenset[str] | None = None
    if entry.tool_groups is not None:
        unknown = sorted(set(entry.tool_groups) - TOOL_GROUPS)
        if unknown or not entry.tool_groups:
            raise _config_error(
                f"{where}.tool_groups must name one or more of {', '.join(sorted(TOOL_GROUPS))}"
            )
        groups = frozenset(entry.tool_groups)
    caller = Caller(entry.name, frozenset(entry.scopes), tool_groups=groups)
    return bytes.fromhex(digest_hex), caller


def parse_clients(data: bytes) -> list[tuple[bytes, Caller]]:
    """Decode and check a clients file's bytes (see the module docstring).

    Raises:
        PanewardenError: ``config_invalid`` naming the entry and field at fault.
    """
    try:
        entries = msgspec.json.decode(data, type=list[ClientEntry])
    except msgspec.ValidationError as exc:
        raise _config_error(f"PANEWARDEN_CLIENTS: {exc}") from None
    except msgspec.DecodeError as exc:
        raise _config_error(f"PANEWARDEN_CLIENTS: not valid JSON: {exc}") from None
    return [_entry_caller(i, e) for i, e in enumerate(entries)]


def load_client_table(config: ServiceConfig) -> ClientTable:
    """Build the caller table from the token file and/or the clients file.

    Raises:
        PanewardenError: ``config_invalid`` when neither is configured or either is bad.
    """
    entries: list[tuple[bytes, Caller]] = []
    if config.token_file is not None:
        entries.append((token_digest(read_token_file(config.token_file)), Caller(OPERATOR, SCOPES)))
    if config.clients_file is not None:
        named = parse_clients(read_private_file(config.clients_file, "PANEWARDEN_CLIENTS"))
        if config.token_file is not None and any(c.name == OPERATOR for _, c in named):
            raise _config_error(
                f"PANEWARDEN_CLIENTS: the name {OPERATOR!r} is taken by PANEWARDEN_TOKEN_FILE"
            )
        if not named and config.token_file is None:
            raise _config_error("PANEWARDEN_CLIENTS: the file lists no client")
        entries.extend(named)
    if not entries:
        raise _config_error(
            "serving HTTP needs PANEWARDEN_TOKEN_FILE (a 0600 file holding the bearer token) "
            "or PANEWARDEN_CLIENTS"
        )
    return ClientTable(entries)


def check_audit_path(config: ServiceConfig) -> Path | None:
    """The audit file path, checked; required whenever a clients file is configured.

    Raises:
        PanewardenError: ``config_invalid`` when missing with clients, or its directory
            is absent, not ours, or not mode 0700.
    """
    if config.audit_file is None:
        if config.clients_file is not None:
            raise _config_error("PANEWARDEN_CLIENTS requires PANEWARDEN_AUDIT_FILE")
        return None
    path = Path(config.audit_file).expanduser().absolute()
    parent = path.parent
    try:
        info = os.stat(parent)
    except OSError as exc:
        raise _config_error(
            f"PANEWARDEN_AUDIT_FILE: directory {str(parent)!r}: {exc.strerror}"
        ) from None
    if not stat.S_ISDIR(info.st_mode):
        raise _config_error(f"PANEWARDEN_AUDIT_FILE: {str(parent)!r} is not a directory")
    mode = stat.S_IMODE(info.st_mode)
    if mode != 0o700:
        raise _config_error(
            f"PANEWARDEN_AUDIT_FILE: directory {str(parent)!r} has mode {mode:04o}; it must be 0700"
        )
    if info.st_uid != os.getuid():
        raise _config_error(f"PANEWARDEN_AUDIT_FILE: {str(parent)!r} is not owned by this user")
    return path
