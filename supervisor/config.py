"""The one place that reads panewarden's environment variables.

Everything else receives a validated ``ServiceConfig``; no other module looks at
``os.environ`` for settings.
"""

from __future__ import annotations

import importlib.util
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from protocol.boot import (
    DEFAULT_EMULATOR,
    DEFAULT_OUTPUT_BUFFER_MB,
    EMULATORS,
    MIB,
    OUTPUT_BUFFER_MB_MAX,
    OUTPUT_BUFFER_MB_MIN,
    OVERFLOW_POLICIES,
)
from protocol.errors import ErrorCode, PanewardenError
from protocol.timing import DEFAULT_HEARTBEAT_LOSS_S, DEFAULT_ORPHAN_GRACE_S

DEFAULT_WATCHDOG_PERIOD_S = 5.0
# The Python package each optional emulator backend needs.
_EMULATOR_PACKAGES = {"ghostty": "pyghostty"}
DEFAULT_STORE_LOCK_WAIT_S = 5.0
DEFAULT_LEASE_TTL_MIN_S = 60


@dataclass(frozen=True)
class ServiceConfig:
    """Settings taken from the environment at start (and on SIGHUP for files)."""

    state_dir: Path
    profiles_path: str | None
    orphan_grace_s: float
    log_level: str
    token_file: str | None
    clients_file: str | None
    audit_file: str | None
    allowed_hosts: tuple[str, ...]
    environ: Mapping[str, str]
    # True when PANEWARDEN_STATE_DIR names the state dir (a shared, explicit one).
    state_dir_explicit: bool = False
    # Testing/tuning knob (PANEWARDEN_WATCHDOG_PERIOD_S): seconds between watchdog passes.
    watchdog_period_s: float = DEFAULT_WATCHDOG_PERIOD_S
    # Tuning knob (PANEWARDEN_HEARTBEAT_LOSS_S): a worker silent this long is hung: killed.
    heartbeat_loss_s: float = DEFAULT_HEARTBEAT_LOSS_S
    # PANEWARDEN_EMULATOR: the panes' terminal emulator unless a profile names one.
    emulator: str = DEFAULT_EMULATOR
    # PANEWARDEN_OUTPUT_BUFFER_MB / PANEWARDEN_OUTPUT_OVERFLOW: each pane's bound on output
    # read but not yet parsed, and what happens at the bound.
    output_buffer_bytes: int = DEFAULT_OUTPUT_BUFFER_MB * MIB
    output_overflow: str = "throttle"
    # How long a coordination call waits for a busy store lock (PANEWARDEN_STORE_LOCK_WAIT_S).
    store_lock_wait_s: float = DEFAULT_STORE_LOCK_WAIT_S
    # Testing knob (PANEWARDEN_LEASE_TTL_MIN_S): the shortest controller lease ttl_s.
    lease_ttl_min_s: int = DEFAULT_LEASE_TTL_MIN_S
    # PANEWARDEN_WORKER_TEMPLATE: fork workers from a warm template (else start each cold).
    worker_template: bool = True
    # PANEWARDEN_CONFINE: whether panes whose profile does not say are confined
    # ("auto": when the host can build the sandbox).
    confine: str = "auto"
    # PANEWARDEN_NOTIFY: the notifications file (webhooks and commands), if any.
    notify_path: str | None = None
    # How notifications name this service: PANEWARDEN_SERVICE_NAME, else host/state dir.
    service_name: str = "panewarden"


def _service_name_env(environ: Mapping[str, str], state_dir: Path) -> str:
    raw = environ.get("PANEWARDEN_SERVICE_NAME")
    if raw is None or raw == "":
        return f"{socket.gethostname()}/{state_dir.name}"
    if len(raw) > 128 or not raw.isprintable():
        raise PanewardenError(
            ErrorCode.CONFIG_INVALID,
            "PANEWARDEN_SERVICE_NAME must be 1 to 128 printable characters",
        )
    return raw


def _bounded_float_env(
    environ: Mapping[str, str], name: str, default: float, low: float, high: float
) -> float:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    # NaN fails both comparisons, so a non-number lands here too.
    if not low <= value <= high:
        raise PanewardenError(
            ErrorCode.CONFIG_INVALID, f"{name} must be a number of seconds in [{low}, {high}]"
        )
    return value


def check_emulator(kind: str, where: str) -> None:
    """Refuse an unknown emulator, or one whose optional package is not installed.

    Raises:
        PanewardenError: ``config_invalid``; the message starts with ``where``.
    """
    if kind not in EMULATORS:
        raise PanewardenError(
            ErrorCode.CONFIG_INVALID, f"{where} must be one of {', '.join(EMULATORS)}"
        )
    package = _EMULATOR_PACKAGES.get(kind)
    if package is not None and not _installed(package):
        raise PanewardenError(
            ErrorCode.CONFIG_INVALID,
            f"{where}: the {kind!r} emulator needs the {package} package, which is not "
            f"installed (pip install 'panewarden[{kind}]')",
        )


def _installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # ValueError: import blocked (sys.modules entry None)
        return False


def _emulator_env(environ: Mapping[str, str]) -> str:
    kind = environ.get("PANEWARDEN_EMULATOR") or DEFAULT_EMULATOR
    check_emulator(kind, "PANEWARDEN_EMULATOR")
    return kind


def _output_buffer_env(environ: Mapping[str, str]) -> int:
    raw = environ.get("PANEWARDEN_OUTPUT_BUFFER_MB") or str(DEFAULT_OUTPUT_BUFFER_MB)
    if not raw.isdigit() or not OUTPUT_BUFFER_MB_MIN <= int(raw) <= OUTPUT_BUFFER_MB_MAX:
        raise PanewardenError(
            ErrorCode.CONFIG_INVALID,
            "PANEWARDEN_OUTPUT_BUFFER_MB must be a whole number of MiB in "
            f"[{OUTPUT_BUFFER_MB_MIN}, {OUTPUT_BUFFER_MB_MAX}]",
        )
    return int(raw) * MIB


def _overflow_env(environ: Mapping[str, str]) -> str:
    policy = environ.get("PANEWARDEN_OUTPUT_OVERFLOW") or "throttle"
    if policy not in OVERFLOW_POLICIES:
        raise PanewardenError(
            ErrorCode.CONFIG_INVALID,
            f"PANEWARDEN_OUTPUT_OVERFLOW must be one of {', '.join(OVERFLOW_POLICIES)}",
        )
    return policy


def _switch_env(environ: Mapping[str, str], name: str, default: bool) -> bool:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    if raw not in ("on", "off"):
        raise PanewardenError(ErrorCode.CONFIG_INVALID, f"{name} must be on or off")
    return raw == "on"


def _bounded_int_env(
    environ: Mapping[str, str], name: str, default: int, low: int, high: int
) -> int:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise PanewardenError(
            ErrorCode.CONFIG_INVALID, f"{name} must be a whole number in [{low}, {high}]"
        )
    return int(raw)


def _confine_env(environ: Mapping[str, str]) -> str:
    raw = environ.get("PANEWARDEN_CONFINE") or "auto"
    if raw not in ("auto", "on", "off"):
        raise PanewardenError(
            ErrorCode.CONFIG_INVALID, "PANEWARDEN_CONFINE must be auto, on or off"
        )
    return raw


def default_state_dir(environ: Mapping[str, str]) -> Path:
    """``${XDG_STATE_HOME:-~/.local/state}/panewarden``."""
    base = environ.get("XDG_STATE_HOME") or str(Path(environ.get("HOME", "~")) / ".local/state")
    return Path(base).expanduser() / "panewarden"


def token_file_setting(env: Mapping[str, str]) -> str | None:
    """``PANEWARDEN_TOKEN_FILE``: the bearer token's file, for the service and its clients."""
    return env.get("PANEWARDEN_TOKEN_FILE") or None


def load_config(environ: Mapping[str, str] | None = None) -> ServiceConfig:
    """Read and validate the environment; raises PanewardenError(config_invalid)."""
    env = dict(os.environ if environ is None else environ)
    state = env.get("PANEWARDEN_STATE_DIR") or str(default_state_dir(env))
    hosts = tuple(
        h.strip() for h in env.get("PANEWARDEN_ALLOWED_HOSTS", "").split(",") if h.strip()
    )
    state_dir = Path(state).expanduser().absolute()
    return ServiceConfig(
        state_dir=state_dir,
        profiles_path=env.get("PANEWARDEN_PROFILES") or None,
        orphan_grace_s=_bounded_float_env(
            env, "PANEWARDEN_ORPHAN_GRACE_S", DEFAULT_ORPHAN_GRACE_S, 0.1, 86400.0
        ),
        heartbeat_loss_s=_bounded_float_env(
            env, "PANEWARDEN_HEARTBEAT_LOSS_S", DEFAULT_HEARTBEAT_LOSS_S, 2.0, 600.0
        ),
        log_level=(env.get("PANEWARDEN_LOG_LEVEL") or "INFO").upper(),
        token_file=token_file_setting(env),
        clients_file=env.get("PANEWARDEN_CLIENTS") or None,
        audit_file=env.get("PANEWARDEN_AUDIT_FILE") or None,
        allowed_hosts=hosts,
        environ=env,
        state_dir_explicit=bool(env.get("PANEWARDEN_STATE_DIR")),
        store_lock_wait_s=_bounded_float_env(
            env, "PANEWARDEN_STORE_LOCK_WAIT_S", DEFAULT_STORE_LOCK_WAIT_S, 0.1, 120.0
        ),
        lease_ttl_min_s=_bounded_int_env(
            env, "PANEWARDEN_LEASE_TTL_MIN_S", DEFAULT_LEASE_TTL_MIN_S, 1, DEFAULT_LEASE_TTL_MIN_S
        ),
        watchdog_period_s=_bounded_float_env(
            env, "PANEWARDEN_WATCHDOG_PERIOD_S", DEFAULT_WATCHDOG_PERIOD_S, 0.05, 3600.0
        ),
        emulator=_emulator_env(env),
        output_buffer_bytes=_output_buffer_env(env),
        output_overflow=_overflow_env(env),
        confine=_confine_env(env),
        worker_template=_switch_env(env, "PANEWARDEN_WORKER_TEMPLATE", True),
        notify_path=env.get("PANEWARDEN_NOTIFY") or None,
        service_name=_service_name_env(env, state_dir),
    )
