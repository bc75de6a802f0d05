"""Access over HTTP: the SDK token verifier and the ``Access`` the tools consult.

``HttpGate`` holds the current client table and audit log and swaps them on
SIGHUP (a bad clients or token file keeps the old table and logs why; the audit
file is reopened either way). ``ClientTokenVerifier`` is the SDK's
``TokenVerifier`` hook: the SDK's bearer middleware calls it on every HTTP
request, so a client removed by a reload is refused from its next request on; what
stays open past one request (the ``/feed`` streams) registers with ``on_reload`` and is
told after each swap, to end what the new table no longer allows.
``HttpAccess.identify`` reads the caller the middleware authenticated (the SDK's
``get_access_token``) and turns it into a ``Caller``.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken

from protocol.errors import ErrorCode, PanewardenError
from supervisor.auth.access import Caller
from supervisor.auth.audit import AuditLog
from supervisor.auth.clients import ClientTable, check_audit_path, load_client_table
from supervisor.config import ServiceConfig

log = logging.getLogger(__name__)


class HttpGate:
    """The reloadable part of HTTP access: who may call, and where calls are recorded."""

    def __init__(self, config: ServiceConfig) -> None:
        """Load the clients and open the audit file.

        Raises:
            PanewardenError: ``config_invalid`` for a missing, unsafe or malformed file.
        """
        self._config = config
        self._reload_hooks: list[Callable[[ClientTable], None]] = []
        audit_path = check_audit_path(config)
        self.table: ClientTable = load_client_table(config)
        self.audit_log: AuditLog | None = None
        if audit_path is not None:
            try:
                self.audit_log = AuditLog(audit_path)
            except OSError as exc:
                raise PanewardenError(
                    ErrorCode.CONFIG_INVALID,
                    f"PANEWARDEN_AUDIT_FILE: cannot open {str(audit_path)!r}: {exc.strerror}",
                ) from None

    def reload(self) -> bool:
        """Re-read the token and clients files; reopen the audit file. True if swapped."""
        if self.audit_log is not None:
            self.audit_log.reopen()
        try:
            table = load_client_table(self._config)
        except PanewardenError as exc:
            log.error(
                "clients reload refused, keeping the old clients: %s",
                exc.message,
                extra={"code": exc.code.value, "op": "reload"},
            )
            return False
        # One assignment: a request sees either the old table or the new one, never a mix.
        self.table = table
        log.info("clients reloaded: %s", ", ".join(table.names()), extra={"op": "reload"})
        for hook in self._reload_hooks:
            hook(table)
        return True

    def on_reload(self, hook: Callable[[ClientTable], None]) -> None:
        """Call ``hook`` with the new table after every reload that swapped it."""
        self._reload_hooks.append(hook)

    def audit_ctl(
        self, identity: str, tool: str, pane: str | None, outcome: str, code: str | None
    ) -> None:
        """Record one mutating ``panewarden ctl`` call; ``client`` is the attested pane
        identity (``pane:...``), so ctl calls never pass as an HTTP client's."""
        if self.audit_log is not None:
            self.audit_log.record(identity, tool, pane, outcome, code)

    def close(self) -> None:
        """Close the audit file."""
        if self.audit_log is not None:
            self.audit_log.close()


class ClientTokenVerifier:
    """The SDK ``TokenVerifier``: a bearer token names a client in the current table."""

    def __init__(self, gate: HttpGate) -> None:
        self._gate = gate

    async def verify_token(self, token: str) -> AccessToken | None:
        """The client's access token, or None (the SDK answers 401)."""
        caller = self._gate.table.lookup(token)
        if caller is None:
            return None
        # The SDK keeps this object for the request; store a digest, not the secret,
        # so the token itself is not carried around (or logged) beyond this check.
        return AccessToken(
            token=hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest(),
            client_id=caller.name,
            scopes=sorted(caller.scopes),
        )


class HttpAccess:
    """``Access`` for HTTP callers: identity from the SDK's auth context, audit to file."""

    def __init__(self, gate: HttpGate) -> None:
        self._gate = gate

    def identify(self) -> Caller:
        """The authenticated caller of the current request.

        Raises:
            PanewardenError: ``forbidden`` if the request carries no authenticated
                caller (cannot happen behind the SDK's bearer middleware).
        """
        token = get_access_token()
        if token is None:
            raise PanewardenError(ErrorCode.FORBIDDEN, "the request is not authenticated")
        # The current table's entry, with its tool groups; the token's scopes decide if
        # a reload removed the client between the bearer check and this call.
        caller = self._gate.table.caller(token.client_id)
        if caller is None:
            return Caller(token.client_id, frozenset(token.scopes))
        return caller

    def audit(
        self, caller: Caller, tool: str, pane: str | None, outcome: str, code: str | None
    ) -> None:
        """Append one content-free record when an audit file is configured."""
        if self._gate.audit_log is not None:
            self._gate.audit_log.record(caller.name, tool, pane, outcome, code)
