"""The launch-profile file schema and its load-time policy checks (docs/design.md §5).

This module turns an already-parsed JSON/TOML document into validated, immutable
``Profile`` values, or refuses the whole document with ``config_invalid`` and a message
that starts with the offending field path (``profiles[1].cwds[0]: must be absolute``).
It does no I/O: reading files and resolving credentials happen elsewhere
(``supervisor.profiles.policy``, ``supervisor.profiles.launch``).
"""

from __future__ import annotations

import os
import re
import unicodedata
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

from protocol.agents.table import AGENT_KINDS, GENERIC, launch_rules_for
from protocol.errors import ErrorCode, PanewardenError
from protocol.names import is_valid_name
from supervisor.config import check_emulator
from supervisor.profiles.confinement import ConfineSettings, build_confinement
from supervisor.profiles.limits import LimitsEntry, PaneLimits, build_limits

if TYPE_CHECKING:
    AgentKind = str
else:
    # The kinds of protocol.agents.table, as msgspec checks them when the file loads.
    AgentKind = Literal[AGENT_KINDS]
PermissionMode = Literal["normal", "accept-edits", "bypass"]
EnvScheme = Literal["literal", "env", "file", "keychain"]
EmulatorKind = Literal["pyte", "ghostty"]

ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

MAX_PANES_MIN, MAX_PANES_MAX = 1, 4096
COLS_MIN, COLS_MAX = 20, 500
ROWS_MIN, ROWS_MAX = 5, 200

# Nudges are typed into the pane. If a dialog appears between the watchdog's check and
# its keystrokes, a nudge that reads as an answer would approve or pick an option, so
# such texts are refused. Compared after case-folding and dropping everything that is
# not a letter or digit; any single character and any all-digit text are refused too.
BARE_ANSWERS = frozenset(
    {
        "y", "yes", "yep", "yeah", "yup", "sure", "n", "no", "nope", "ok", "okay",
        "allow", "allowonce", "allowalways", "alwaysallow", "allowall", "always",
        "approve", "approved", "accept", "acceptall", "acceptedits", "confirm",
        "deny", "reject", "cancel", "trust", "bypass", "continue", "proceed", "go",
        "goahead", "doit", "yestoall", "yesalways", "yesdontaskagain", "dontaskagain",
    }
)  # fmt: skip

ENV_SCHEMES: tuple[Literal["env", "file", "keychain"], ...] = ("env", "file", "keychain")

# These describe the pane's own terminal, which panewarden controls; `colorterm` is the
# profile's switch for the second one.
RESERVED_ENV_NAMES = frozenset({"TERM", "COLORTERM"})

NonEmptyStr = Annotated[str, Meta(min_length=1)]


class WatchdogEntry(Struct, forbid_unknown_fields=True, frozen=True):
    """The ``watchdog`` table of a profile, as written in the file."""

    idle_timeout_secs: Annotated[int, Meta(ge=10)]
    nudge_text: NonEmptyStr
    todo_file: str | None = None
    max_consecutive_nudges: Annotated[int, Meta(ge=1, le=100)] = 3


class ProfileEntry(Struct, forbid_unknown_fields=True, frozen=True):
    """One element of ``profiles``, as written in the file."""

    # Checked by hand, not with Meta(pattern=...): Python's `$` accepts a trailing
    # newline, and the hand check can quote the rule in plain words.
    name: str
    argv: Annotated[tuple[NonEmptyStr, ...], Meta(min_length=1)]
    agent: AgentKind = GENERIC
    extra_args: tuple[NonEmptyStr, ...] = ()
    cwds: tuple[str, ...] = ()
    # Values typed `Any` so a bad value is reported under its own key rather than
    # msgspec's anonymous `env[...]`.
    env: dict[str, Any] = {}
    permission_mode: PermissionMode = "normal"
    cols: Annotated[int, Meta(ge=COLS_MIN, le=COLS_MAX)] = 120
    rows: Annotated[int, Meta(ge=ROWS_MIN, le=ROWS_MAX)] = 40
    watchdog: WatchdogEntry | None = None
    colorterm: bool = False
    # The pane's terminal emulator; None: the service's (PANEWARDEN_EMULATOR).
    emulator: EmulatorKind | None = None
    # Confinement (supervisor.profiles.confinement); confine None: the service's.
    confine: bool | Literal["auto"] | None = None
    writable: tuple[str, ...] = ()
    hide: tuple[str, ...] = ()
    # "host", "none" or a list; unset: ["public"] (checked by supervisor.profiles.confinement).
    network: str | tuple[str, ...] = ("public",)
    # How the worker speaks to the program (docs/operations.md, "ACP panes").
    protocol: Literal["terminal", "acp"] = "terminal"
    # A confined pane's bounds (supervisor.profiles.limits); None: the defaults.
    limits: LimitsEntry | None = None


class ProfilesDocument(Struct, forbid_unknown_fields=True, frozen=True):
    """The whole profiles file, as written."""

    allow_arbitrary_command: bool = False
    # A writer pane is always confined unless this says it may run without.
    allow_unconfined_writers: bool = False
    max_panes: Annotated[int, Meta(ge=MAX_PANES_MIN, le=MAX_PANES_MAX)] = 32
    profiles: tuple[ProfileEntry, ...] = ()


@dataclass(frozen=True)
class WatchdogConfig:
    """Validated watchdog settings of a profile (the watchdog component interprets them)."""

    idle_timeout_secs: int
    nudge_text: str
    todo_file: str | None
    max_consecutive_nudges: int


@dataclass(frozen=True)
class EnvSource:
    """Where one pane variable's value comes from; resolved only when a pane starts."""

    name: str
    scheme: EnvScheme
    # The literal value, or the variable name / absolute path / keychain item.
    ref: str = field(repr=False)

    def __repr__(self) -> str:
        # A literal may be a pasted secret: keep it out of logs and tracebacks.
        shown = "<hidden>" if self.scheme == "literal" else repr(self.ref)
        return f"EnvSource(name={self.name!r}, scheme={self.scheme!r}, ref={shown})"


@dataclass(frozen=True)
class Profile:
    """One validated launch profile."""

    name: str
    agent: AgentKind
    argv: tuple[str, ...]
    extra_args: tuple[str, ...] = ()
    cwds: tuple[str, ...] = ()
    env: tuple[EnvSource, ...] = ()
    permission_mode: PermissionMode = "normal"
    cols: int = 120
    rows: int = 40
    watchdog: WatchdogConfig | None = None
    colorterm: bool = False
    emulator: str | None = None
    confinement: ConfineSettings = field(default_factory=ConfineSettings)
    protocol: str = "terminal"
    limits: PaneLimits = field(default_factory=PaneLimits)


@dataclass(frozen=True)
class ParsedDocument:
    """The validated content of a profiles file."""

    allow_arbitrary_command: bool
    allow_unconfined_writers: bool
    max_panes: int
    profiles: tuple[Profile, ...]


def config_error(where: str, problem: str) -> PanewardenError:
    """Build the ``config_invalid`` error for one field (``where`` empty = top level)."""
    return PanewardenError(ErrorCode.CONFIG_INVALID, f"{where or '(top level)'}: {problem}")


_MSGSPEC_AT = re.compile(r"^(?P<what>.*?) - at `\$(?P<path>[^`]*)`$", re.DOTALL)
_MSGSPEC_FIELD = re.compile(
    r"^Object (?P<kind>contains unknown|missing required) field `(?P<f>[^`]*)`$"
)


def _from_validation_error(exc: msgspec.ValidationError) -> PanewardenError:
    """Rewrite msgspec's ``<problem> - at `$.a.b``` as ``a.b: <problem>``."""
    text = str(exc)
    match = _MSGSPEC_AT.match(text)
    what, path = (match["what"], match["path"].lstrip(".")) if match else (text, "")
    field_match = _MSGSPEC_FIELD.match(what)
    if field_match:
        path = f"{path}.{field_match['f']}" if path else field_match["f"]
        what = (
            "unknown field"
            if field_match["kind"] == "contains unknown"
            else "required field is missing"
        )
    else:
        what = what[:1].lower() + what[1:]
    return config_error(path, what)


def has_control_chars(text: str) -> bool:
    """True when ``text`` holds a C0/C1 control character (newline and tab included)."""
    return any(unicodedata.category(ch) == "Cc" for ch in text)


def is_bare_answer(text: str) -> bool:
    """True when ``text`` would read as an answer to a permission or choice dialog."""
    core = "".join(ch for ch in text.casefold() if ch.isalnum())
    return len(core) <= 1 or core.isdigit() or core in BARE_ANSWERS


def parse_env_value(where: str, name: str, value: object) -> EnvSource:
    """Classify one ``env`` value; only ``env:``, ``file:`` and ``keychain:`` are schemes."""
    if not isinstance(value, str):
        raise config_error(where, f"expected a string, got {type(value).__name__}")
    if "\0" in value:
        raise config_error(where, "must not contain a NUL character")
    scheme, sep, ref = value.partition(":")
    if not sep or scheme not in ENV_SCHEMES:
        return EnvSource(name=name, scheme="literal", ref=value)
    if scheme == "env" and not ENV_NAME_RE.fullmatch(ref):
        raise config_error(where, "env: must name a variable matching ^[A-Za-z_][A-Za-z0-9_]*$")
    if scheme == "file" and not os.path.isabs(ref):
        raise config_error(where, "file: needs an absolute path")
    if scheme == "keychain" and not ref.strip():
        raise config_error(where, "keychain: needs an item name")
    source: EnvScheme = "env" if scheme == "env" else "file" if scheme == "file" else "keychain"
    return EnvSource(name=name, scheme=source, ref=ref)


def _check_no_nul(where: str, values: tuple[str, ...]) -> None:
    for index, value in enumerate(values):
        if "\0" in value:
            raise config_error(f"{where}[{index}]", "must not contain a NUL character")


def _check_launch_rules(where: str, entry: ProfileEntry) -> None:
    """Every applying kind's launch rules: its own, and those of the programs argv names
    (protocol.agents: no auto-approval flag, what must be pinned, measured modes only)."""
    for spec in launch_rules_for(entry.agent, entry.argv):
        rules = spec.launch
        if rules.refused_flag is not None:
            for key, values in (("argv", entry.argv), ("extra_args", entry.extra_args)):
                refused = rules.refused_flag(values)
                if refused is not None:
                    index, why = refused
                    raise config_error(f"{where}.{key}[{index}]", f"{rules.refusal}: {why}")
        missing = rules.required(entry.argv) if rules.required is not None else None
        if missing is not None:
            raise config_error(f"{where}.argv", missing)
        for name in entry.env:
            if name.upper() in rules.refused_env:
                raise config_error(
                    f"{where}.env.{name}", f"{rules.refusal}: {rules.refused_env_why}"
                )
        if rules.confined_only and entry.confine is False:
            raise config_error(
                f"{where}.confine",
                f"{rules.refusal}: a {spec.name} pane must be confined (false is refused)",
            )
        if entry.permission_mode not in rules.permission_modes:
            raise config_error(
                f"{where}.permission_mode",
                f"{entry.permission_mode!r} is not allowed for {spec.name} profiles (no "
                "measured adapter for that mode yet; only 'normal' is allowed)",
            )


def _build_watchdog(where: str, entry: WatchdogEntry) -> WatchdogConfig:
    if has_control_chars(entry.nudge_text):
        raise config_error(f"{where}.nudge_text", "must not contain control characters")
    if is_bare_answer(entry.nudge_text):
        raise config_error(
            f"{where}.nudge_text",
            "reads as a bare dialog answer (such as 'y', 'yes' or '1'); write an instruction",
        )
    if entry.todo_file is not None and (
        not os.path.isabs(entry.todo_file) or "\0" in entry.todo_file
    ):
        raise config_error(f"{where}.todo_file", "must be an absolute path")
    return WatchdogConfig(
        idle_timeout_secs=entry.idle_timeout_secs,
        nudge_text=entry.nudge_text,
        todo_file=entry.todo_file,
        max_consecutive_nudges=entry.max_consecutive_nudges,
    )


def build_profile(where: str, entry: ProfileEntry) -> Profile:
    """Apply every load-time policy check to one entry; ``where`` prefixes error paths."""
    if not is_valid_name(entry.name):
        raise config_error(
            f"{where}.name",
            "must match ^[a-z0-9][a-z0-9_-]{0,31}$ (lowercase letters, digits, '_' and '-', "
            "at most 32 characters, starting with a letter or digit)",
        )
    _check_no_nul(f"{where}.argv", entry.argv)
    _check_no_nul(f"{where}.extra_args", entry.extra_args)
    for index, cwd in enumerate(entry.cwds):
        if "\0" in cwd or not os.path.isabs(cwd):
            raise config_error(f"{where}.cwds[{index}]", "must be absolute")
    _check_launch_rules(where, entry)
    env: list[EnvSource] = []
    for name, value in entry.env.items():
        env_where = f"{where}.env.{name}"
        if not ENV_NAME_RE.fullmatch(name):
            raise config_error(env_where, "variable names must match ^[A-Za-z_][A-Za-z0-9_]*$")
        if name in RESERVED_ENV_NAMES:
            raise config_error(env_where, "is set by panewarden (use the 'colorterm' field)")
        env.append(parse_env_value(env_where, name, value))
    watchdog = None
    if entry.watchdog is not None:
        watchdog = _build_watchdog(f"{where}.watchdog", entry.watchdog)
    if entry.emulator is not None:
        check_emulator(entry.emulator, f"{where}.emulator")
    return Profile(
        name=entry.name,
        agent=entry.agent,
        argv=entry.argv,
        extra_args=entry.extra_args,
        cwds=entry.cwds,
        env=tuple(env),
        permission_mode=entry.permission_mode,
        cols=entry.cols,
        rows=entry.rows,
        watchdog=watchdog,
        colorterm=entry.colorterm,
        emulator=entry.emulator,
        confinement=build_confinement(
            where, entry.confine, entry.writable, entry.hide, entry.network
        ),
        protocol=entry.protocol,
        limits=build_limits(entry.limits),
    )


def parse_document(raw: object) -> ParsedDocument:
    """Validate a parsed JSON/TOML document (``None`` = empty file).

    Raises:
        PanewardenError: ``config_invalid`` naming the first offending field.
    """
    try:
        document = msgspec.convert({} if raw is None else raw, ProfilesDocument)
    except msgspec.ValidationError as exc:
        raise _from_validation_error(exc) from None
    profiles: list[Profile] = []
    seen: set[str] = set()
    for index, entry in enumerate(document.profiles):
        where = f"profiles[{index}]"
        profile = build_profile(where, entry)
        if profile.name in seen:
            raise config_error(f"{where}.name", f"duplicate profile name {profile.name!r}")
        seen.add(profile.name)
        profiles.append(profile)
    return ParsedDocument(
        allow_arbitrary_command=document.allow_arbitrary_command,
        allow_unconfined_writers=document.allow_unconfined_writers,
        max_panes=document.max_panes,
        profiles=tuple(profiles),
    )
