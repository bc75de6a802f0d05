"""Fence tokens: random 256-bit capabilities that only their holder ever sees.

A controller lease's fence token is returned once, to the call that created it
(acquire, resume, takeover). The service keeps only its SHA-256; a presented token is
hashed and compared in constant time. Tokens never appear in lists, logs, audit
records or error messages.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

TOKEN_BYTES = 32


def new_token() -> str:
    """A fresh fence token (URL-safe text, 256 bits of randomness)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def token_digest(token: str) -> str:
    """The hex SHA-256 a lease record keeps instead of the token."""
    return hashlib.sha256(token.encode()).hexdigest()


def token_matches(token: str, digest: str) -> bool:
    """True when ``token`` hashes to ``digest`` (constant-time comparison)."""
    return hmac.compare_digest(token_digest(token), digest)


def new_id(prefix: str) -> str:
    """An opaque record id such as ``ctl-3f2a…`` (128 random bits)."""
    return f"{prefix}-{secrets.token_hex(16)}"
