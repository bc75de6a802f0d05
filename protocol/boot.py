"""The boot record a supervisor hands a new worker on an inherited pipe.

It carries the per-worker secret and the launch spec, so neither ever appears in
argv or the environment of any process.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from protocol.agents.table import AGENT_KINDS
from protocol.egress import Destination
from protocol.limits import ProgramLimits
from protocol.timing import DEFAULT_ORPHAN_GRACE_S, HEARTBEAT_S, KILL_GRACE_S, ORPHAN_AFTER_S

# Scrollback lines a pane keeps (the supervisor sends no other value today).
DEFAULT_HISTORY_LINES = 5000
# Terminal emulator backends; "ghostty" needs the optional pyghostty package.
EMULATORS = ("pyte", "ghostty")
DEFAULT_EMULATOR = "pyte"
# Program output read but not parsed yet is held up to a bound (PANEWARDEN_OUTPUT_BUFFER_MB);
# then the program is throttled ("throttle": reading stops, nothing is lost) or the oldest
# unparsed bytes are dropped ("drop": the screen converges from the newest).
OVERFLOW_POLICIES = ("throttle", "drop")
DEFAULT_OUTPUT_BUFFER_MB = 32
OUTPUT_BUFFER_MB_MIN, OUTPUT_BUFFER_MB_MAX = 1, 1024
MIB = 1024 * 1024


# How a pane's program is spoken to (a profile's ``protocol``).
PaneProtocol = Literal["terminal", "acp"]


class PaneLaunch(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What the pane is: its program and how its worker runs it (the supervisor decides
    every field from the launch profile and the service's settings)."""

    pane: str
    agent: str
    argv: list[str]
    cwd: str
    env: dict[str, str]
    cols: int
    rows: int
    orphan_grace_s: float = DEFAULT_ORPHAN_GRACE_S
    kill_grace_s: float = KILL_GRACE_S
    history_lines: int = DEFAULT_HISTORY_LINES
    # Operator overrides of the screen rules: ``<dir>/<agent>.json`` (None: bundled only).
    rules_dir: str | None = None
    emulator: str = DEFAULT_EMULATOR
    output_buffer_bytes: int = DEFAULT_OUTPUT_BUFFER_MB * MIB
    output_overflow: str = "throttle"
    # The program runs in a sandbox (its argv is bwrap's; supervisor.confinement): the
    # worker starts it with ^C, ^\ and ^Z ignored by the sandbox's own processes.
    confined: bool = False
    # A confined pane with a `network` list: the destinations it may reach, and the Unix
    # socket the worker's egress proxy listens on for them (bound into the sandbox).
    egress: list[Destination] = []
    egress_socket: str = ""
    # The list holds "public": any public unicast address too, through the same proxy.
    egress_public: bool = False
    # How the worker speaks to the program: a terminal on a PTY, or the Agent Client
    # Protocol over its stdin/stdout (paneworker.acp).
    protocol: PaneProtocol = "terminal"
    # A confined pane's bounds, applied by the worker before the sandbox's exec.
    limits: ProgramLimits = msgspec.field(default_factory=ProgramLimits)
    # The stand-in of hidden files in the sandbox's argv: the worker drops the stand-ins
    # of paths gone since the argv was built (protocol.sandbox_argv).
    stand_in: str = ""


class BootRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Everything a worker needs to start its pane and find its supervisor."""

    protocol_version: int
    instance: str
    secret: bytes
    endpoint: str
    launch: PaneLaunch
    heartbeat_s: float = HEARTBEAT_S
    orphan_after_s: float = ORPHAN_AFTER_S


MAX_BOOT_BYTES = 256 * 1024


def encode_boot(record: BootRecord) -> bytes:
    """Encode a boot record (msgpack)."""
    return msgspec.msgpack.encode(record)


def decode_boot(data: bytes) -> BootRecord:
    """Decode a boot record; raises ValueError on bad input (an agent kind this build does
    not know included: a pane never runs under rules it has not got)."""
    if len(data) > MAX_BOOT_BYTES:
        raise ValueError("boot record too large")
    try:
        record = msgspec.msgpack.decode(data, type=BootRecord)
    except msgspec.MsgspecError as exc:
        raise ValueError(f"bad boot record: {exc}") from exc
    if record.launch.agent not in AGENT_KINDS:
        raise ValueError(f"bad boot record: unknown agent kind {record.launch.agent[:40]!r}")
    return record
