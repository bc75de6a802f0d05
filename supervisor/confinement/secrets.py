"""The paths a sandboxed program must never read: the service's own and the user's keys.

``service_paths`` are panewarden's: its state dir (leases, receipts, records, audit
log), its runtime directory (the worker socket and every ctl socket), the bearer token,
the clients file, the profiles file and its rules, the audit file, and the places every
other service of the same user keeps those by default (``user_service_paths``: a pane
of one service must not read or drive another). They are hidden in every confined pane
and every verification recipe, even when they lie inside a writable HOME.
``DEFAULT_HIDDEN`` are the user's credentials and browser profiles,
relative to HOME: a profile's ``hide`` adds to them or drops one (``"!~/.aws"``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from supervisor.config import ServiceConfig, default_state_dir
from supervisor.confinement.homes import other_kinds_credentials

DEFAULT_HIDDEN = (
    ".ssh",
    ".gnupg",
    ".aws",
    ".config/gcloud",
    ".kube",
    ".netrc",
    ".docker",
    ".config/gh",
    ".git-credentials",
    ".mozilla",
    ".config/google-chrome",
    ".config/chromium",
    ".config/BraveSoftware",
    ".config/microsoft-edge",
    ".var/app",
)
# In a profile's `hide`: this prefix drops a default entry instead of adding one.
DROP_PREFIX = "!"


def service_paths(config: ServiceConfig, runtime_dir: Path) -> tuple[str, ...]:
    """Every path of this service, and of the user's other services, a sandboxed program
    must not read (``runtime_dir`` is the worker socket's directory: its parent holds
    every service's of this user)."""
    paths: list[str] = [str(config.state_dir), str(runtime_dir.parent), str(runtime_dir)]
    paths += user_service_paths(config.environ)
    for name in (config.token_file, config.clients_file, config.audit_file):
        if name:
            paths.append(name)
    if config.profiles_path:
        profiles = os.path.abspath(config.profiles_path)
        paths += [profiles, os.path.join(os.path.dirname(profiles), "rules")]
    return tuple(os.path.abspath(path) for path in paths)


def user_service_paths(environ: Mapping[str, str]) -> list[str]:
    """Where the user's other services keep what this one hides of its own: the default
    state dir (where every stdio session's lies), ``~/.config/panewarden`` (the token
    and clients files the docs place there) and every runtime base a service of this
    user may choose (``runtime_socket_path``), whatever the environment this one got."""
    home = environ.get("HOME") or os.path.expanduser("~")
    config_home = environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    uid = os.getuid()
    paths = [
        str(default_state_dir(environ)),
        os.path.join(home, ".local", "state", "panewarden"),
        os.path.join(config_home, "panewarden"),
        os.path.join(home, ".config", "panewarden"),
        os.path.join(tempfile.gettempdir(), f"panewarden-{uid}"),
        f"/tmp/panewarden-{uid}",
        f"/run/user/{uid}/panewarden",
    ]
    if environ.get("XDG_RUNTIME_DIR"):
        paths.append(os.path.join(environ["XDG_RUNTIME_DIR"], "panewarden"))
    return paths


def home_path(entry: str, home: str) -> str:
    """``~/x`` and ``x`` under HOME; an absolute path as it is."""
    if entry.startswith("~/"):
        entry = entry[2:]
    return os.path.normpath(entry if os.path.isabs(entry) else os.path.join(home, entry))


def hidden_paths(
    home: str, hide: Sequence[str], service: Iterable[str], agent: str = ""
) -> tuple[str, ...]:
    """The defaults under ``home`` and every agent kind's credentials but ``agent``'s
    (all of them for a verification recipe), with a profile's additions and drops (a
    generic profile that runs ``npx codex`` drops ``!~/.codex/auth.json``), then the
    service's own paths (which no profile can drop)."""
    dropped = {home_path(e[len(DROP_PREFIX) :], home) for e in hide if e.startswith(DROP_PREFIX)}
    chosen = [home_path(entry, home) for entry in DEFAULT_HIDDEN]
    chosen += [home_path(e, home) for e in hide if not e.startswith(DROP_PREFIX)]
    chosen += other_kinds_credentials(agent, home)
    kept = [path for path in chosen if path not in dropped]
    return tuple(dict.fromkeys([*kept, *service]))
