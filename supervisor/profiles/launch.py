"""Start-time parts of the launch policy: working-directory containment and the pane's
environment (docs/design.md §2, §5).

Everything here runs when a pane starts, not when the profiles file loads: directories
may appear later and credentials are read as late as possible. Error messages may name
a variable or a path but never contain a value read from a credential source.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from protocol.errors import ErrorCode, PanewardenError
from protocol.safe_files import FileReadError, read_regular_file
from supervisor.profiles.confinement import ConfineSettings
from supervisor.profiles.limits import PaneLimits
from supervisor.profiles.model import EnvSource, Profile, WatchdogConfig

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
DEFAULT_LANG = "C.UTF-8"
PANE_TERM = "xterm-256color"

CREDENTIAL_FILE_LIMIT_BYTES = 64 * 1024
KEYCHAIN_TIMEOUT_S = 10.0
_SECURITY_TOOL = "/usr/bin/security"


@dataclass(frozen=True)
class LaunchSpec:
    """Everything a worker needs to start one pane's program; built per ``start_pane``.

    ``cwd`` is the realpath that passed the containment check. ``env`` is the complete
    program environment and may hold credentials, so it is left out of ``repr``.
    """

    profile: str
    agent: str
    argv: tuple[str, ...]
    cwd: str
    env: dict[str, str] = field(repr=False)
    cols: int
    rows: int
    permission_mode: str
    watchdog: WatchdogConfig | None
    # The profile's emulator; None: the service's default.
    emulator: str | None = None
    confinement: ConfineSettings = field(default_factory=ConfineSettings)
    # "terminal" (a PTY) or "acp" (the Agent Client Protocol on the program's stdio).
    protocol: str = "terminal"
    # A confined pane's bounds (supervisor.profiles.limits).
    limits: PaneLimits = field(default_factory=PaneLimits)


def _account() -> tuple[str, str]:
    """(home, user) from the password database, for when the environment lacks them."""
    try:
        entry = pwd.getpwuid(os.getuid())
    except KeyError:  # a uid without a passwd entry, common in containers
        return "/", str(os.getuid())
    return entry.pw_dir or "/", entry.pw_name


def base_environment(environ: Mapping[str, str], *, colorterm: bool) -> dict[str, str]:
    """The variables every pane gets before any profile variable (docs/design.md §2)."""
    home, user = environ.get("HOME") or "", environ.get("USER") or ""
    if not home or not user:
        fallback_home, fallback_user = _account()
        home, user = home or fallback_home, user or fallback_user
    env = {
        "HOME": home,
        "PATH": environ.get("PATH") or DEFAULT_PATH,
        "USER": user,
        "LANG": environ.get("LANG") or DEFAULT_LANG,
        "TERM": PANE_TERM,
    }
    if colorterm:
        env["COLORTERM"] = "truecolor"
    return env


def _unavailable(name: str, why: str) -> PanewardenError:
    return PanewardenError(ErrorCode.CREDENTIAL_UNAVAILABLE, f"env.{name}: {why}")


def _read_keychain(name: str, item: str, platform: str) -> str:
    if platform != "darwin":
        raise _unavailable(name, "keychain sources are available only on macOS")
    # The secret comes back on a pipe; only the item name is in argv.
    try:
        done = subprocess.run(
            [_SECURITY_TOOL, "find-generic-password", "-s", item, "-w"],
            capture_output=True,
            timeout=KEYCHAIN_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        raise _unavailable(name, f"keychain item {item!r} could not be read") from None
    if done.returncode != 0:
        raise _unavailable(name, f"keychain item {item!r} could not be read")
    return done.stdout.decode("utf-8", "replace").rstrip("\r\n")


def resolve_env_source(
    source: EnvSource, environ: Mapping[str, str], *, platform: str = sys.platform
) -> str:
    """Produce one variable's value for a starting pane.

    Raises:
        PanewardenError: ``credential_unavailable`` naming the variable, never a value.
    """
    if source.scheme == "literal":
        return source.ref
    if source.scheme == "env":
        value = environ.get(source.ref)
        if value is None:
            raise _unavailable(
                source.name, f"variable {source.ref} is not set in the supervisor's environment"
            )
    elif source.scheme == "file":
        try:
            data = read_regular_file(source.ref, limit_bytes=CREDENTIAL_FILE_LIMIT_BYTES)
        except FileReadError as exc:
            raise _unavailable(source.name, f"credential file unusable: {exc.reason}") from None
        try:
            value = data.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError:
            raise _unavailable(source.name, "credential file is not UTF-8 text") from None
    else:
        value = _read_keychain(source.name, source.ref, platform)
    if "\0" in value:
        raise _unavailable(source.name, "value contains a NUL character")
    return value


def pane_environment(
    profile: Profile, environ: Mapping[str, str], *, with_profile_env: bool
) -> dict[str, str]:
    """The complete environment of a pane program (profile variables win over the base).

    Raises:
        PanewardenError: ``credential_unavailable`` when a source cannot be read.
    """
    env = base_environment(environ, colorterm=profile.colorterm)
    if with_profile_env:
        for source in profile.env:
            env[source.name] = resolve_env_source(source, environ)
    return env


def _realpath(path: str) -> str:
    try:
        return os.path.realpath(path)
    except (ValueError, OSError):
        raise PanewardenError(ErrorCode.INVALID_ARGUMENT, "cwd: not a usable path") from None


def default_cwd(profile: Profile, environ: Mapping[str, str]) -> str:
    """The profile's first allowed directory; for ``/`` the caller's home when it is a dir.

    Raises:
        PanewardenError: ``cwd_not_allowed`` when the profile allows no directory.
    """
    if not profile.cwds:
        raise PanewardenError(
            ErrorCode.CWD_NOT_ALLOWED, f"cwd: profile {profile.name!r} allows no directory"
        )
    first = profile.cwds[0]
    if os.path.normpath(first) == "/":
        home = base_environment(environ, colorterm=False)["HOME"]
        if os.path.isabs(home) and os.path.isdir(home):
            return home
    return first


def contained_cwd(profile: Profile, cwd: str) -> str:
    """Return the realpath of ``cwd`` if it equals or lies below an allowed directory.

    Containment is decided on realpaths, component by component, so a symlink that
    leads out of an allowed directory is refused and ``/ab`` is not below ``/a``.

    Raises:
        PanewardenError: ``invalid_argument`` for a relative or non-directory path,
            ``cwd_not_allowed`` when it lies outside every allowed directory.
    """
    if not isinstance(cwd, str) or not os.path.isabs(cwd):
        raise PanewardenError(ErrorCode.INVALID_ARGUMENT, "cwd: must be an absolute path")
    real = PurePosixPath(_realpath(cwd))
    roots = (PurePosixPath(_realpath(root)) for root in profile.cwds)
    if not any(real.is_relative_to(root) for root in roots):
        # The path is not echoed: it may reveal the layout of directories outside policy.
        raise PanewardenError(
            ErrorCode.CWD_NOT_ALLOWED,
            f"cwd: outside the directories allowed by profile {profile.name!r}",
        )
    # Checked after containment, so existence outside the allowed dirs is never revealed.
    if not os.path.isdir(real):
        raise PanewardenError(ErrorCode.INVALID_ARGUMENT, "cwd: not an existing directory")
    return str(real)
