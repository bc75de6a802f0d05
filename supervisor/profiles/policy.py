"""Launch profiles: which programs a client may start, where, and with what (docs/design.md §5).

``load_profiles`` reads the operator's file (``PANEWARDEN_PROFILES``; JSON, or TOML when
the name ends in ``.toml``) into an immutable ``ProfileSet``; ``ProfileSet.resolve`` turns
one ``start_pane`` request into a ``LaunchSpec`` or refuses it with a stable error code.
The file schema and load-time checks live in ``supervisor.profiles.model``; working
directory and environment rules in ``supervisor.profiles.launch``.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType

from protocol.agents.table import launch_rules_for
from protocol.errors import ErrorCode, PanewardenError
from protocol.safe_files import FileReadError, read_regular_file
from supervisor.profiles.launch import (
    LaunchSpec,
    contained_cwd,
    default_cwd,
    pane_environment,
)
from supervisor.profiles.model import (
    COLS_MAX,
    COLS_MIN,
    ROWS_MAX,
    ROWS_MIN,
    Profile,
    WatchdogConfig,
    parse_document,
)

__all__ = [
    "LaunchSpec",
    "Profile",
    "ProfileSet",
    "WatchdogConfig",
    "builtin_profiles",
    "load_profiles",
]

PROFILES_FILE_LIMIT_BYTES = 1024 * 1024
DEMO_PROFILE = "demo"


def _shown(value: str, limit: int = 64) -> str:
    """Quote caller-supplied text for an error message without letting it grow unbounded."""
    return repr(value if len(value) <= limit else value[:limit] + "…")


class ProfileSet:
    """An immutable, validated set of launch profiles plus the file's global switches."""

    __slots__ = (
        "_allow_arbitrary_command",
        "_allow_unconfined_writers",
        "_max_panes",
        "_profiles",
    )

    def __init__(
        self,
        profiles: Iterable[Profile],
        *,
        allow_arbitrary_command: bool = False,
        allow_unconfined_writers: bool = False,
        max_panes: int = 32,
    ) -> None:
        by_name: dict[str, Profile] = {}
        for profile in profiles:
            if profile.name in by_name:
                raise ValueError(f"duplicate profile name {profile.name!r}")
            by_name[profile.name] = profile
        self._profiles: Mapping[str, Profile] = MappingProxyType(by_name)
        self._allow_arbitrary_command = allow_arbitrary_command
        self._allow_unconfined_writers = allow_unconfined_writers
        self._max_panes = max_panes

    @property
    def allow_arbitrary_command(self) -> bool:
        """Whether ``start_pane`` may carry a caller-chosen ``argv``."""
        return self._allow_arbitrary_command

    @property
    def allow_unconfined_writers(self) -> bool:
        """Whether a writer pane may run unconfined (otherwise it must be confined)."""
        return self._allow_unconfined_writers

    @property
    def max_panes(self) -> int:
        """The most panes that may exist at once."""
        return self._max_panes

    @property
    def profiles(self) -> tuple[Profile, ...]:
        """Every profile, in file order."""
        return tuple(self._profiles.values())

    def __repr__(self) -> str:
        return (
            f"ProfileSet(names={self.names()!r}, allow_arbitrary_command="
            f"{self._allow_arbitrary_command!r}, max_panes={self._max_panes!r})"
        )

    def names(self) -> list[str]:
        """Profile names in file order."""
        return list(self._profiles)

    def get(self, name: str) -> Profile:
        """The profile called ``name``.

        Raises:
            PanewardenError: ``profile_not_found``.
        """
        profile = self._profiles.get(name) if isinstance(name, str) else None
        if profile is None:
            shown = _shown(name) if isinstance(name, str) else type(name).__name__
            raise PanewardenError(
                ErrorCode.PROFILE_NOT_FOUND,
                f"profile: {shown} does not exist (known: {', '.join(self.names()) or 'none'})",
            )
        return profile

    def resolve(
        self,
        name: str,
        *,
        cwd: str | None,
        extra_args: list[str] | None,
        argv: list[str] | None,
        cols: int | None,
        rows: int | None,
        environ: Mapping[str, str],
    ) -> LaunchSpec:
        """Apply the launch policy to one ``start_pane`` request.

        Policy checks run before any credential is read, so a refused request never
        touches a secret. Blocking I/O (realpath, credential files, the macOS keychain
        tool) happens here: call it off the event loop.

        Raises:
            PanewardenError: ``profile_not_found``; ``forbidden`` (argv without
                ``allow_arbitrary_command``, an extra arg outside the allow-list, an
                OpenCode auto-approve flag); ``invalid_argument`` (malformed argv,
                extra_args with argv, size out of bounds, relative or missing cwd);
                ``cwd_not_allowed``; ``credential_unavailable``.
        """
        profile = self.get(name)
        arbitrary = argv is not None
        if argv is not None:
            program = self._caller_argv(profile, argv, extra_args)
        else:
            program = profile.argv + _allowed_extra_args(profile, extra_args)
        pane_cols = _size("cols", cols, profile.cols, COLS_MIN, COLS_MAX)
        pane_rows = _size("rows", rows, profile.rows, ROWS_MIN, ROWS_MAX)
        real_cwd = contained_cwd(profile, default_cwd(profile, environ) if cwd is None else cwd)
        env = pane_environment(profile, environ, with_profile_env=not arbitrary)
        return LaunchSpec(
            profile=profile.name,
            agent=profile.agent,
            argv=program,
            cwd=real_cwd,
            env=env,
            cols=pane_cols,
            rows=pane_rows,
            permission_mode=profile.permission_mode,
            # A nudge is typed into the program; a caller-chosen program (a shell, say)
            # could execute it, so only the profile's own program is nudged.
            watchdog=None if arbitrary else profile.watchdog,
            emulator=profile.emulator,
            confinement=profile.confinement,
            protocol=profile.protocol,
            limits=profile.limits,
        )

    def _caller_argv(
        self, profile: Profile, argv: list[str], extra_args: list[str] | None
    ) -> tuple[str, ...]:
        if not self._allow_arbitrary_command:
            raise PanewardenError(
                ErrorCode.FORBIDDEN,
                "argv: caller-chosen commands are disabled (allow_arbitrary_command is false)",
            )
        if extra_args:
            raise PanewardenError(
                ErrorCode.INVALID_ARGUMENT, "extra_args: cannot be combined with argv"
            )
        if not isinstance(argv, list) or not argv:
            raise PanewardenError(ErrorCode.INVALID_ARGUMENT, "argv: must be a non-empty list")
        for index, arg in enumerate(argv):
            if not isinstance(arg, str) or not arg or "\0" in arg:
                raise PanewardenError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"argv[{index}]: must be a non-empty string without NUL",
                )
        # The file's launch rules hold for a caller's argv too (no auto-approval flag, the
        # approval mode pinned), for the profile's kind and every program argv names.
        for spec in launch_rules_for(profile.agent, argv):
            rules = spec.launch
            refused = rules.refused_flag(argv) if rules.refused_flag is not None else None
            if refused is not None:
                raise PanewardenError(
                    ErrorCode.FORBIDDEN, f"argv[{refused[0]}]: {rules.refusal}: {refused[1]}"
                )
            missing = rules.required(argv) if rules.required is not None else None
            if missing is not None:
                raise PanewardenError(ErrorCode.FORBIDDEN, f"argv: {missing}")
        return tuple(argv)


def _allowed_extra_args(profile: Profile, extra_args: list[str] | None) -> tuple[str, ...]:
    if extra_args is None:
        return ()
    if not isinstance(extra_args, list):
        raise PanewardenError(ErrorCode.INVALID_ARGUMENT, "extra_args: must be a list")
    for index, arg in enumerate(extra_args):
        if not isinstance(arg, str):
            raise PanewardenError(ErrorCode.INVALID_ARGUMENT, f"extra_args[{index}]: not a string")
        if arg not in profile.extra_args:
            raise PanewardenError(
                ErrorCode.FORBIDDEN,
                f"extra_args[{index}]: {_shown(arg)} is not allowed by profile {profile.name!r}",
            )
    return tuple(extra_args)


def _size(label: str, value: int | None, default: int, low: int, high: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise PanewardenError(
            ErrorCode.INVALID_ARGUMENT, f"{label}: must be an integer from {low} to {high}"
        )
    return value


class _DuplicateKeyError(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _json_object(pairs: list[tuple[str, object]]) -> dict[str, object]:
    # JSON allows repeated keys and keeps the last; in a policy file that hides an edit.
    result: dict[str, object] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKeyError(key)
        result[key] = value
    return result


def _refuse_constant(token: str) -> object:
    raise ValueError(f"{token} is not allowed")


def _parse_text(path: str, text: str) -> object:
    """Parse the file's text; ``None`` stands for an empty file."""
    if not text.strip():
        return None
    if path.lower().endswith(".toml"):
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise PanewardenError(
                ErrorCode.CONFIG_INVALID, f"(file): not valid TOML: {exc}"
            ) from None
    try:
        return json.loads(text, object_pairs_hook=_json_object, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        problem = f"{exc.msg} (line {exc.lineno}, column {exc.colno})"
    except _DuplicateKeyError as exc:
        problem = f"key {_shown(exc.key)} appears twice in one object"
    except ValueError as exc:
        problem = str(exc)
    raise PanewardenError(ErrorCode.CONFIG_INVALID, f"(file): not valid JSON: {problem}")


def load_profiles(path: str | None, *, demo_argv: Sequence[str]) -> ProfileSet:
    """Load the operator's profiles file, or the built-in set when ``path`` is None.

    With a file, only the file's profiles exist: the built-in ``demo`` profile is not
    added (define one in the file to keep it). An empty file, or one without
    ``profiles``, is valid and allows nothing to start. The file is accepted or refused
    whole.

    Raises:
        PanewardenError: ``config_invalid`` whose message starts with the offending
            field path, or ``(file)`` when the file cannot be read or parsed.
    """
    if path is None:
        return builtin_profiles(demo_argv)
    try:
        data = read_regular_file(path, limit_bytes=PROFILES_FILE_LIMIT_BYTES)
    except FileReadError as exc:
        raise PanewardenError(
            ErrorCode.CONFIG_INVALID, f"(file): cannot read {os.fspath(path)!r}: {exc.reason}"
        ) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise PanewardenError(ErrorCode.CONFIG_INVALID, "(file): not UTF-8 text") from None
    document = parse_document(_parse_text(path, text))
    return ProfileSet(
        document.profiles,
        allow_arbitrary_command=document.allow_arbitrary_command,
        allow_unconfined_writers=document.allow_unconfined_writers,
        max_panes=document.max_panes,
    )


def builtin_profiles(demo_argv: Sequence[str]) -> ProfileSet:
    """The set used without a profiles file: only ``demo``, the bundled demo agent.

    ``demo_argv`` is the command that starts the demo agent; it may start in any
    directory (default: the caller's home), gets no extra variables, and caller-chosen
    commands stay disabled.

    Raises:
        ValueError: ``demo_argv`` is empty or holds an empty or NUL-bearing element.
    """
    if not demo_argv or any(not arg or "\0" in arg for arg in demo_argv):
        raise ValueError("demo_argv must be a non-empty list of non-empty strings")
    document = parse_document(
        {
            "profiles": [
                {"name": DEMO_PROFILE, "agent": "demo", "argv": list(demo_argv), "cwds": ["/"]}
            ]
        }
    )
    return ProfileSet(document.profiles)
