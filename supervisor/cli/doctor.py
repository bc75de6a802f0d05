"""``panewarden doctor``: check that this host can run panewarden safely.

Checks: Linux child-subreaper support, pidfd support, the state directory's
mode, the ipc socket path length, and whether Bubblewrap is installed *and* builds the
sandbox here (one trivial run, ``confinement.host.check_host``), said twice: for
verification recipes (``sandbox``: needed only by ``verify``) and for panes
(``confinement``: required with ``PANEWARDEN_CONFINE=on``, else panes of
``confine: "auto"`` profiles run unconfined); recipes and panes share the builder.
The sandbox line says what this host's bwrap lacks (``isolate_user``: its own user
namespace, without nested ones). ``root`` warns when the service runs as root (its
confined programs are uid 0 to the host's kernel, only the sandbox holds them; an
unconfined pane is root on the host) and ``limits`` says whether a pane's ``processes``
bound can be enforced here (a pids cgroup the worker may make). ``network`` says what
the confined panes' default network gives, and which profiles opt into ``"host"`` and
what that exposes (a warning, never a failure). Then how many panes this host can hold
(``workers.host_limits.capacity``): the limit that binds first, then each limit's own
figure (informational: never a failure).
Prints one line per check.
"""

from __future__ import annotations

import os
import stat
import sys

from protocol.errors import PanewardenError
from protocol.limits import PidsCgroup
from supervisor.config import ServiceConfig
from supervisor.confinement.host import HostSupport, check_host
from supervisor.confinement.pane import HOST_NETWORK_EXPOSES
from supervisor.exit_codes import EXIT_FAILED, EXIT_OK
from supervisor.panes.service import demo_argv
from supervisor.profiles.policy import load_profiles
from supervisor.store.statedir import runtime_socket_path
from supervisor.workers.host_limits import capacity
from supervisor.workers.orphans import become_subreaper

# Checks whose failure only disables a feature (the sandbox: verification recipes;
# confinement unless PANEWARDEN_CONFINE=on).
OPTIONAL_CHECKS = frozenset({"sandbox", "confinement", "root", "limits", "network"})


def _checks(config: ServiceConfig) -> list[tuple[str, bool, str]]:
    results: list[tuple[str, bool, str]] = []
    results.append(("subreaper", become_subreaper(), "PR_SET_CHILD_SUBREAPER (Linux)"))
    try:
        fd = os.pidfd_open(os.getpid())
        os.close(fd)
        results.append(("pidfd", True, "pidfd_open works"))
    except (AttributeError, OSError) as exc:
        results.append(("pidfd", False, f"pidfd_open failed: {exc}"))
    state = config.state_dir
    if state.exists():
        mode = stat.S_IMODE(state.stat().st_mode)
        results.append(("state dir", mode == 0o700, f"{state} mode {mode:04o} (want 0700)"))
    else:
        results.append(("state dir", True, f"{state} will be created with mode 0700"))
    try:
        path = runtime_socket_path(state, dict(config.environ))
        results.append(("ipc path", True, str(path)))
    except Exception as exc:
        results.append(("ipc path", False, str(exc)))
    # One host check for both: recipes and panes share the sandbox's builder.
    support = check_host(config.environ)
    results.append(_sandbox(support))
    results.append(_confinement(config, support))
    results.append(_root())
    results.append(_limits())
    results.append(_network(config))
    return results


def _root() -> tuple[str, bool, str]:
    if os.geteuid() != 0:
        return "root", True, f"the service runs as uid {os.geteuid()}, not root"
    return (
        "root",
        False,
        "the service runs as ROOT: a confined program is nobody inside but uid 0 to the "
        "host's kernel (only the sandbox holds it: read-only /proc, hidden sockets), an "
        "unconfined one is root on the host; run the service as an ordinary user",
    )


def _limits() -> tuple[str, bool, str]:
    group = PidsCgroup.make("doctor", 1)
    if group is None:
        return (
            "limits",
            False,
            "no pids cgroup can be made here: a confined pane's `processes` limit is not "
            "enforced (memory_mb and tmp_mb are)",
        )
    group.remove()
    return (
        "limits",
        True,
        f"a pane's processes are bounded by a pids cgroup (below {os.path.dirname(group.path)})",
    )


def _network(config: ServiceConfig) -> tuple[str, bool, str]:
    """Which profiles give their confined panes the host's network, and what that is."""
    try:
        profiles = load_profiles(config.profiles_path, demo_argv=demo_argv())
    except PanewardenError as exc:
        return "network", False, f"the profiles do not load: {exc.message}"
    host = [p.name for p in profiles.profiles if p.confinement.network == "host"]
    if host:
        names = ", ".join(host)
        return (
            "network",
            False,
            f'network "host" ({names}): confined panes share {HOST_NETWORK_EXPOSES}',
        )
    return (
        "network",
        True,
        "confined panes have a network namespace of their own (unset: "
        '["public"], public unicast addresses through the egress proxy)',
    )


def _sandbox(support: HostSupport) -> tuple[str, bool, str]:
    if support.available:
        detail = f"{support.bwrap}: no network, read-only host, private /tmp and HOME"
        return "sandbox", True, detail
    return "sandbox", False, f"{support.detail}: verify is unavailable"


def _confinement(config: ServiceConfig, support: HostSupport) -> tuple[str, bool, str]:
    if support.available:
        detail = f"panes are confined ({support.detail}); PANEWARDEN_CONFINE={config.confine}"
        return "confinement", True, detail
    if config.confine == "on":
        return "confinement", False, f"PANEWARDEN_CONFINE=on and panes cannot be: {support.detail}"
    return (
        "confinement",
        False,
        f"panes run UNCONFINED (they can read the service's files): {support.detail}",
    )


def doctor_command(config: ServiceConfig) -> int:
    """Print each check; exit 1 when a required one fails (the sandbox is optional)."""
    failed = False
    for name, ok, detail in _checks(config):
        optional = name in OPTIONAL_CHECKS and not (
            name == "confinement" and config.confine == "on"
        )
        mark = "ok " if ok else ("-- " if optional else "BAD")
        print(f"{mark} {name:<11} {detail}")
        if not ok and not optional:
            failed = True
    bounds = capacity()
    if bounds:
        first = bounds[0]
        print(f"ok  {'capacity':<11} {first.panes} more panes; {first.name} binds first")
        for bound in bounds:
            print(f"    {bound.name:<11} {bound.panes:>7} panes: {bound.detail}")
    sys.stdout.flush()
    return EXIT_FAILED if failed else EXIT_OK
