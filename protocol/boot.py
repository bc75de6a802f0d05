"""The boot record a supervisor hands a new worker on an inherited pipe.

It carries the per-worker secret and the launch spec, so neither ever appears in
argv or the environment of any process.
"""

from __future__ import annotations

import msgspec

from protocol.timing import DEFAULT_ORPHAN_GRACE_S, HEARTBEAT_S, KILL_GRACE_S, ORPHAN_AFTER_S

# Scrollback lines a pane keeps (the supervisor sends no other value today).
DEFAULT_HISTORY_LINES = 5000


class BootRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Everything a worker needs to start its pane and find its supervisor."""

    protocol_version: int
    pane: str
    instance: str
    secret: bytes
    endpoint: str
    agent: str
    argv: list[str]
    cwd: str
    env: dict[str, str]
    cols: int
    rows: int
    heartbeat_s: float = HEARTBEAT_S
    orphan_after_s: float = ORPHAN_AFTER_S
    orphan_grace_s: float = DEFAULT_ORPHAN_GRACE_S
    kill_grace_s: float = KILL_GRACE_S
    history_lines: int = DEFAULT_HISTORY_LINES
    # Operator overrides of the screen rules: ``<dir>/<agent>.json`` (None: bundled only).
    rules_dir: str | None = None
    # Terminal emulator backend: "pyte" or "ghostty" (needs the pyghostty package).
    emulator: str = "pyte"
    # Program output read but not parsed yet is held up to this many bytes; then the
    # program is throttled ("throttle": reading stops, nothing is lost) or the oldest
    # unparsed bytes are dropped ("drop": the screen converges from the newest).
    output_buffer_bytes: int = 32 * 1024 * 1024
    output_overflow: str = "throttle"


EMULATORS = ("pyte", "ghostty")
OVERFLOW_POLICIES = ("throttle", "drop")
MIN_OUTPUT_BUFFER_BYTES = 64 * 1024
MAX_OUTPUT_BUFFER_BYTES = 1024 * 1024 * 1024

MAX_BOOT_BYTES = 256 * 1024


def encode_boot(record: BootRecord) -> bytes:
    """Encode a boot record (msgpack)."""
    return msgspec.msgpack.encode(record)


def decode_boot(data: bytes) -> BootRecord:
    """Decode a boot record; raises ValueError on bad input."""
    if len(data) > MAX_BOOT_BYTES:
        raise ValueError("boot record too large")
    try:
        return msgspec.msgpack.decode(data, type=BootRecord)
    except msgspec.MsgspecError as exc:
        raise ValueError(f"bad boot record: {exc}") from exc
