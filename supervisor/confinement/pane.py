"""The sandbox of one confined pane: from its launch spec, its lane's grant and the
service's paths to the bwrap command line its worker runs.

What the program sees (``docs/operations.md``, "Confined panes"):

- the host read-only; its cwd writable (read-only for a reviewer; for a writer only its
  owned scopes and what ``git commit`` needs: ``LaneGrant``); the directories and files its
  agent kind must write under HOME (``AgentSpec.home_writable``); the profile's
  ``writable``; a private ``/tmp``;
- inside those, what names programs the kind's CLI runs (``AgentSpec.home_programs``):
  each such file a private copy in the pane's own directory, seeded from the host's (made
  on the host, neutral, when missing, so the pane cannot create it there), each such
  directory read-only: a pane plants no hook, plugin or MCP server the operator's next
  CLI, or another pane, runs;
- hidden: the user's keys and browser profiles (``secrets.DEFAULT_HIDDEN``, with the
  profile's ``hide``), every other agent kind's credentials (``AgentSpec.credentials``),
  and every path of this service and of the user's other services (state dirs, runtime
  dirs with the worker and ctl sockets, token, clients, profiles, audit);
- other panes' cwds read-only where they lie inside a writable path;
- only its own ctl socket, bound at ``/tmp/.panewarden/ctl.sock``;
- host Unix sockets and runtime directories hidden, ``/proc`` read-only but for its own
  processes, its own user namespace without nested ones (``policy``); a program of its
  installed under ``/tmp`` visible with its tree (``programs``); its ``limits`` (a bounded
  ``/tmp`` here, the rest applied by its worker);
- its own PID namespace; a network namespace of its own unless ``network: "host"``
  (explicit opt-in: the host's loopback services and abstract Unix sockets are then
  reachable): nothing but its loopback with ``"none"``; with a list (the default
  ``["public"]``) the worker's egress proxy, over ``/tmp/.panewarden/egress.sock``, with
  the list's hosts in its ``/etc/hosts`` and, with ``"public"``, an HTTP proxy inside
  that ``HTTPS_PROXY``/``HTTP_PROXY`` name (``protocol.egress``).

Each pane's own files (its hosts file; the worker's egress socket) are in
``<runtime dir>/panes/<name>/``, made when it starts and removed with it.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from protocol.agents.table import SPECS
from protocol.egress import (
    Destination,
    forwarder_argv,
    hosts_file,
    needs_low_ports,
    proxy_environment,
)
from protocol.errors import ErrorCode, PanewardenError
from protocol.limits import ProgramLimits
from supervisor.confinement.homes import home_programs
from supervisor.confinement.host import HostSupport
from supervisor.confinement.policy import (
    SandboxPolicy,
    bwrap_argv,
    real_paths,
    under,
    worth_hiding,
)
from supervisor.confinement.programs import tmp_program_paths
from supervisor.confinement.secrets import hidden_paths, home_path
from supervisor.profiles.confinement import ConfineChoice, ConfineSettings
from supervisor.profiles.limits import PaneLimits

INSIDE_DIR = "/tmp/.panewarden"
INSIDE_CTL = f"{INSIDE_DIR}/ctl.sock"
INSIDE_EGRESS = f"{INSIDE_DIR}/egress.sock"
UNREADABLE_NAME = "unreadable"
# The forwarder, run by path inside (it is the worker's package; this one never imports it).
FORWARDER_SCRIPT = str(Path(__file__).resolve().parents[2] / "paneworker/confine/forwarder.py")
# Kept for the forwarder alone when it binds a port below 1024 under a non-root service
# (a root one's worker makes the port unprivileged instead); it drops them all.
LOW_PORT_CAPS = ("CAP_NET_BIND_SERVICE", "CAP_SETPCAP")
HOST_NETWORK_EXPOSES = (
    "the host's network namespace: every address the host reaches, the host's loopback "
    "services (127.0.0.1, ::1) and its abstract Unix sockets"
)


@dataclass(frozen=True)
class LaneGrant:
    """What a lane changes in its pane's sandbox: a reviewer's worktree is read-only; a
    writer's is read-only but for ``writable`` (its scopes, the Git paths a commit on its
    own branch writes), with ``read_only`` bound again inside those. ``visible``: paths
    it must see read-only even under ``/tmp`` (a worktree's Git common dir). ``moved``:
    (host path, path inside, writable) binds made after those, in order (a writer's
    private object dir over the shared store, the shared store read-only inside it)."""

    cwd_writable: bool = True
    visible: tuple[str, ...] = ()
    writable: tuple[str, ...] = ()
    read_only: tuple[str, ...] = ()
    moved: tuple[tuple[str, str, bool], ...] = ()


@dataclass(frozen=True)
class PaneSandbox:
    """A confined pane's launch: the bwrap argv, the variables it overrides, and the
    egress proxy its worker runs (none without a ``network`` list)."""

    argv: list[str]
    env: dict[str, str] = field(repr=False)
    pane_dir: str
    egress: list[Destination]
    egress_socket: str
    # The list holds "public" (the worker's proxy reaches public unicast addresses too).
    egress_public: bool = False
    # What the program may write (resolved) and, inside that, what is read-only again:
    # a later pane or writer worktree is not admitted where this pane writes.
    writable: tuple[str, ...] = ()
    read_only: tuple[str, ...] = ()
    # What its worker applies before the sandbox's exec (paneworker.procs.confined_child).
    limits: ProgramLimits = field(default_factory=ProgramLimits)
    # The stand-in file hidden files are replaced by (protocol.sandbox_argv).
    stand_in: str = ""


def network_exposes(settings: ConfineSettings) -> str:
    """What a confined pane of ``settings`` reaches on the network, in words (its
    ``get_status`` ``network_exposes``)."""
    if settings.network == "host":
        return HOST_NETWORK_EXPOSES
    if settings.network == "none":
        return "its own network namespace: nothing but its own loopback"
    reached = ["public unicast addresses"] if settings.public else []
    reached += [d.label for d in settings.destinations]
    return "its own network namespace; through the egress proxy: " + ", ".join(reached)


class PaneConfiner:
    """Decides whether a pane is confined and builds its sandbox; see the module docstring."""

    def __init__(
        self,
        support: HostSupport,
        default: ConfineChoice,
        runtime_dir: Path,
        service_paths: Sequence[str],
        ctl_socket: str | None,
    ) -> None:
        self.support = support
        self.default = default
        self._panes_dir = runtime_dir / "panes"
        self._unreadable = runtime_dir / UNREADABLE_NAME
        self._service_paths = tuple(service_paths)
        self._ctl_socket = ctl_socket

    @property
    def service_paths(self) -> tuple[str, ...]:
        """This service's own paths: hidden in every pane and every verification recipe."""
        return self._service_paths

    def unreadable_file(self) -> str:
        """The empty mode-0000 file a hidden file is replaced by, made when missing.

        Raises:
            PanewardenError: ``sandbox_unavailable`` when it cannot be made.
        """
        try:
            if not self._unreadable.exists():
                fd = os.open(self._unreadable, os.O_CREAT | os.O_WRONLY, 0o000)
                os.close(fd)
                os.chmod(self._unreadable, 0o000)
        except OSError as exc:
            raise PanewardenError(
                ErrorCode.SANDBOX_UNAVAILABLE, f"cannot make the sandbox's stand-in file: {exc}"
            ) from None
        return str(self._unreadable)

    def confined(self, settings: ConfineSettings, *, required: bool = False) -> bool:
        """Whether a pane of ``settings`` runs confined here.

        Raises:
            PanewardenError: ``sandbox_unavailable`` when it must be (``confine: true``,
                ``PANEWARDEN_CONFINE=on``, ``required``) and this host cannot.
        """
        choice = settings.choice or self.default
        if choice == "off" and not required:
            return False
        if self.support.available:
            return True
        if choice == "on" or required:
            raise PanewardenError(
                ErrorCode.SANDBOX_UNAVAILABLE,
                f"this pane must be confined and this host cannot: {self.support.detail}",
            )
        return False

    def build(
        self,
        name: str,
        *,
        agent: str,
        argv: Sequence[str],
        cwd: str,
        env: Mapping[str, str],
        settings: ConfineSettings,
        other_cwds: Sequence[str],
        grant: LaneGrant = LaneGrant(),
        limits: PaneLimits | None = None,
    ) -> PaneSandbox:
        """The sandbox of pane ``name`` (blocking file work: call it off the loop).

        Raises:
            PanewardenError: ``config_invalid`` (a ``writable`` path that does not exist),
                ``sandbox_unavailable`` (its files could not be made).
        """
        bwrap = self.support.bwrap
        assert bwrap is not None, "build() only after confined() said yes"
        home = env.get("HOME") or "/"
        limits = limits or PaneLimits()
        unreadable = self.unreadable_file()
        pane_dir = self._pane_dir(name)
        writable = _home_writable(agent, home)
        for index, entry in enumerate(settings.writable):
            path = home_path(entry, home)
            if not os.path.exists(path):
                raise PanewardenError(
                    ErrorCode.CONFIG_INVALID, f"writable[{index}]: {path!r} does not exist"
                )
            writable.append(path)
        cwd_binds = [cwd] if grant.cwd_writable else []
        writable = [*cwd_binds, *grant.writable, *writable]
        program_dirs, private_files = home_programs(agent, home, writable, pane_dir)
        candidates = (home, cwd, *grant.visible, *_install_paths(), *_argv_paths(argv))
        candidates += tuple(tmp_program_paths(argv, env))
        visible = [path for path in candidates if under(path, ["/tmp"])]
        shown = [*visible, *writable]
        read_only = [*grant.read_only, *program_dirs]
        # A read-only cwd is read-only already from the host's read-only root, unless a
        # writable path holds it: then bound read-only again on top. Never bound as a
        # "visible" path: a cwd of / would bind the host's /tmp over the private one.
        if not grant.cwd_writable and under(cwd, writable):
            read_only.append(cwd)
        read_only += [
            path
            for path in other_cwds
            if path != cwd and under(path, writable) and os.path.isdir(path)
        ]
        secret = hidden_paths(home, settings.hide, self._service_paths, agent)
        hidden = worth_hiding(secret, shown)
        sockets: list[tuple[str, str]] = []
        overrides = {"TMPDIR": "/tmp"}
        if self._ctl_socket is not None and os.path.exists(self._ctl_socket):
            sockets.append((self._ctl_socket, INSIDE_CTL))
            overrides["PANEWARDEN_CTL_SOCKET"] = INSIDE_CTL
        egress: list[Destination] = []
        egress_socket = ""
        launcher: list[str] = []
        launcher_caps: tuple[str, ...] = ()
        own_network = False
        extra_ro: list[tuple[str, str]] = []
        public = settings.network == "list" and settings.public
        if settings.network == "list":
            egress = list(settings.destinations)
            # The worker makes the socket before it starts the program; bwrap binds it.
            egress_socket = os.path.join(pane_dir, "egress.sock")
            sockets.append((egress_socket, INSIDE_EGRESS))
            hosts = os.path.join(pane_dir, "hosts")
            _write_text(hosts, hosts_file(egress))
            extra_ro.append((hosts, "/etc/hosts"))
            launcher = forwarder_argv(
                sys.executable, FORWARDER_SCRIPT, egress, INSIDE_EGRESS, public=public
            )
            if needs_low_ports(egress):
                # As root in the init user namespace the worker's child makes the network
                # namespace, with every port unprivileged, and the sandbox keeps its full
                # user isolation; a non-root service cannot, so its forwarder binds with
                # a capability instead (design §13 item 51).
                own_network = os.geteuid() == 0
                launcher_caps = () if own_network else LOW_PORT_CAPS
            if public:
                overrides.update(proxy_environment(egress))
        policy = SandboxPolicy(
            cwd=cwd,
            network="host" if settings.network == "host" else "none",
            visible=tuple(dict.fromkeys(visible)),
            writable=tuple(dict.fromkeys(writable)),
            read_only=tuple(dict.fromkeys(read_only)),
            hidden=hidden,
            sockets=tuple(sockets),
            unreadable_file=unreadable,
            env=overrides,
            tmp_dirs=(INSIDE_DIR,),
            files=tuple(extra_ro),
            moved=grant.moved,
            launcher=tuple(launcher),
            launcher_caps=launcher_caps,
            network_made=own_network,
            private_files=tuple(private_files),
            isolate_user=self.support.isolate_user,
            tmp_bytes=limits.tmp_bytes,
            shm_bytes=limits.shm_bytes,
            runtime_dirs=_runtime_dirs(),
        )
        sandbox_argv = bwrap_argv(bwrap, policy, list(argv))
        bounds = ProgramLimits(
            processes=limits.processes, memory_bytes=limits.memory_bytes, own_network=own_network
        )
        return PaneSandbox(
            sandbox_argv,
            overrides,
            pane_dir,
            egress,
            egress_socket,
            limits=bounds,
            stand_in=unreadable,
            egress_public=public,
            writable=tuple(real_paths(policy.writable)),
            read_only=tuple(real_paths(policy.read_only)),
        )

    def forget(self, pane_dir: str) -> None:
        """Remove a pane's own files (it was removed, or its start failed)."""
        shutil.rmtree(pane_dir, ignore_errors=True)

    def pane_dir_of(self, name: str) -> str:
        """Where pane ``name``'s own files are (a re-adopted pane's, say)."""
        return str(self._panes_dir / name)

    def _pane_dir(self, name: str) -> str:
        try:
            self._panes_dir.mkdir(mode=0o700, exist_ok=True)
            path = self._panes_dir / name
            shutil.rmtree(path, ignore_errors=True)  # a crashed service's leftover
            path.mkdir(mode=0o700)
        except OSError as exc:
            raise PanewardenError(
                ErrorCode.SANDBOX_UNAVAILABLE, f"cannot make the pane's sandbox files: {exc}"
            ) from None
        return str(path)


def _home_writable(agent: str, home: str) -> list[str]:
    """The agent kind's HOME paths, directories made when missing."""
    spec = SPECS.get(agent)
    paths: list[str] = []
    for entry in spec.home_writable if spec is not None else ():
        path = os.path.join(home, entry.rstrip("/"))
        if entry.endswith("/"):
            try:
                os.makedirs(path, mode=0o700, exist_ok=True)
            except OSError:
                continue
        if os.path.exists(path):
            paths.append(path)
    return paths


def _install_paths() -> list[str]:
    """This installation (its interpreter's prefix and the package's folder): the
    forwarder and the demo agent run from it inside."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return [sys.prefix, os.path.dirname(package)]


def _argv_paths(argv: Sequence[str]) -> list[str]:
    """Existing absolute paths named by argv (a program or script under /tmp stays
    visible read-only)."""
    return [arg for arg in argv if os.path.isabs(arg) and os.path.exists(arg)]


def _runtime_dirs() -> tuple[str, ...]:
    """The service's session runtime directory (its session bus, agents' sockets)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    return (runtime,) if os.path.isabs(runtime) else ()


def _write_text(path: str, text: str) -> None:
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
