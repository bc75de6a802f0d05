"""One sandbox policy, and the Bubblewrap command line that enforces it.

Panes and verification recipes are confined by the same builder, so a rule (what is
hidden, what is writable, which namespaces are new) is written once. The mounts are
applied in this order, each on top of the ones before it:

1. the host file system, read-only (``--ro-bind / /``), a new ``/dev`` (its own devpts:
   the other panes' terminals are not there), read-only but for a bounded ``/dev/shm``, a
   ``/proc`` of the new PID namespace with every top-level directory and writable file of
   it bound read-only again (``/proc/sys``: a root service's ``kernel.core_pattern`` runs
   a program as root outside; bwrap 0.8 skips covering it when ``access(W_OK)`` fails)
   and the key and timer lists masked (``proc_covers``), and a private, bounded ``/tmp``
   (tmpfs: the host's ``/tmp``, where the service's runtime directory usually is, is
   gone);
2. ``visible``: host paths bound read-only again on top (HOME or the cwd when they lie
   under ``/tmp``);
3. ``writable``: bound read-write (the cwd, the paths the agent kind must write, the
   profile's ``writable``, a recipe's outputs);
4. ``read_only``: bound read-only again inside a writable one (other panes' cwds, the
   parts of a writer's worktree it does not own), then ``private_files``: private
   copies bound read-write over host files;
5. ``hidden``: each replaced by an empty stand-in nobody inside can read (a tmpfs of mode
   0000 for a directory, an empty mode-0000 file for a file or socket), last, so a secret
   inside a writable HOME is hidden too; with ``hide_host_sockets`` also every host Unix
   socket and runtime directory (``supervisor.confinement.sockets``);
6. ``sockets``: host sockets bound at a path inside the private ``/tmp`` (the pane's ctl
   socket, its egress socket).

Every namespace but the network's is new; the network is new too (only a loopback of
its own) unless the policy shares the host's. The user namespace is a real one
(``--unshare-user``) in which no further one can be made (``--disable-userns``: nested
namespaces would give the program every capability over mounts and nf_tables of its
own), and a root service's program runs as ``nobody`` inside (``--uid``/``--gid``
65534: it still is uid 0 to the host's kernel, see docs/operations.md); ``isolate_user``
False (a host whose bwrap cannot, found by ``host.check_host``) falls back to
``--unshare-user-try``. Every capability is dropped, so the
permission bits of the stand-ins bind root as well. ``--die-with-parent`` ends the
sandbox with the process that started it: the PID namespace's init dies, and the kernel
kills everything left inside.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from supervisor.confinement.sockets import socket_hiding
from supervisor.profiles.limits import DEFAULT_SHM_MB, DEFAULT_TMP_MB, MIB

SandboxNetwork = Literal["host", "none"]

# Signals the sandbox's own processes ignore while the program inside gets them by
# default: ^C, ^\ and ^Z go to the terminal's whole foreground group, bwrap included,
# and a bwrap killed by ^C would take the program with it.
TERMINAL_SIGNALS = "INT,QUIT,TSTP"
ENV_PROGRAM = "/usr/bin/env"
# A root service's program's uid and gid inside: nobody, which every passwd file has.
INSIDE_NOBODY = "65534"
PROC = "/proc"
# Read even without a write bit: every key description the uid may view, every host
# process's timers.
PROC_MASKED = ("keys", "key-users", "timer_list", "sched_debug", "kcore")
# Of /proc's top level, these are the namespace's own (bwrap makes net a link to self).
PROC_OWN = frozenset({"self", "thread-self", "net", "mounts"})


@dataclass(frozen=True)
class SandboxPolicy:
    """What a sandboxed program sees, may write and may reach; see the module docstring.

    Every path is absolute. ``visible``, ``writable`` and ``read_only`` paths must exist
    on the host; a ``hidden`` path that does not exist is skipped (nothing to hide).
    """

    cwd: str
    network: SandboxNetwork
    visible: tuple[str, ...] = ()
    writable: tuple[str, ...] = ()
    read_only: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    # (host path, path inside): sockets bound in, under the private /tmp.
    sockets: tuple[tuple[str, str], ...] = ()
    # The empty mode-0000 file a hidden file is replaced by (it must exist).
    unreadable_file: str = ""
    # Variables set inside (on top of the inherited environment, or of nothing at all
    # with ``clear_env``).
    env: Mapping[str, str] = field(default_factory=dict)
    clear_env: bool = False
    # A recipe runs in its own session (no terminal to inject keys into); a pane's
    # program keeps its controlling terminal.
    new_session: bool = False
    # Directories made inside the private /tmp before anything is bound there.
    tmp_dirs: tuple[str, ...] = ()
    # (host file, path inside): files bound read-only over the host's (a pane's
    # /etc/hosts).
    files: tuple[tuple[str, str], ...] = ()
    # (host path, path inside, writable): directories bound elsewhere than their host
    # path, in this order, after ``read_only`` (a writer's private object dir over the
    # shared one, the shared one read-only inside it).
    moved: tuple[tuple[str, str, bool], ...] = ()
    # Run inside before the program (the egress forwarder, which execs it).
    launcher: tuple[str, ...] = ()
    # Capabilities the sandbox keeps for the launcher, which drops them all before it
    # runs the program (the forwarder binding a port below 1024).
    launcher_caps: tuple[str, ...] = ()
    # The worker's child has made the network namespace already (a root service's pane
    # listing a port below 1024): bwrap shares it instead of making one.
    network_made: bool = False
    # (host file, path inside): a private copy bound read-write over a file, after the
    # read-only re-binds (an agent kind's settings inside its writable HOME directory:
    # the program writes its copy, the host's file never changes).
    private_files: tuple[tuple[str, str], ...] = ()
    # A real user namespace with no nested ones (and nobody inside for a root service);
    # False only on a host whose bwrap cannot (``host.check_host``).
    isolate_user: bool = True
    # Sizes of the private /tmp and of /dev/shm.
    tmp_bytes: int = DEFAULT_TMP_MB * MIB
    shm_bytes: int = DEFAULT_SHM_MB * MIB
    # Hide every host Unix socket and runtime directory (``sockets``), ``runtime_dirs``
    # (the service's XDG_RUNTIME_DIR) included; needs ``unreadable_file``.
    hide_host_sockets: bool = True
    runtime_dirs: tuple[str, ...] = ()


def hidden_mounts(paths: Sequence[str], unreadable_file: str) -> list[str]:
    """The arguments that replace each existing path by an unreadable stand-in."""
    args: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            args += ["--perms", "0000", "--tmpfs", path]
        elif os.path.lexists(path):
            args += ["--ro-bind", unreadable_file, path]
    return args


def proc_covers(proc: str = PROC) -> list[str]:
    """The arguments that make the new ``/proc`` read-only but for its processes' own
    entries: each top-level directory and each file with a write bit, bound read-only
    again (taken from this host's ``/proc``, so an entry a newer kernel adds is covered
    too), and the ``PROC_MASKED`` files replaced by ``/dev/null`` (on a ``nodev`` mount:
    opening it fails)."""
    args: list[str] = []
    try:
        names = sorted(os.listdir(proc))
    except OSError:
        names = []
    for name in names:
        path = os.path.join(proc, name)
        if name.isdigit() or name in PROC_OWN or os.path.islink(path):
            continue
        try:
            mode = os.stat(path).st_mode
        except OSError:
            continue
        if name in PROC_MASKED:
            args += ["--ro-bind", "/dev/null", path]
        elif stat.S_ISDIR(mode) or mode & 0o222:
            args += ["--ro-bind", path, path]
    return args


def user_args(isolate_user: bool, euid: int) -> list[str]:
    """The user namespace's arguments (see the module docstring)."""
    if not isolate_user:
        return ["--unshare-user-try"]
    args = ["--unshare-user", "--disable-userns"]
    if euid == 0:
        args += ["--uid", INSIDE_NOBODY, "--gid", INSIDE_NOBODY]
    return args


def real_paths(paths: Sequence[str]) -> list[str]:
    """Each path resolved (a symlink's target is what the program reaches through it, and
    bwrap cannot make a mount point on a symlink), once."""
    return list(dict.fromkeys(os.path.realpath(path) for path in paths))


def outermost(paths: Sequence[str]) -> list[str]:
    """The paths not inside another of them (binding a parent binds its children)."""
    return [path for path in paths if not any(p != path and under(path, [p]) for p in paths)]


def bwrap_argv(bwrap: str, policy: SandboxPolicy, argv: Sequence[str]) -> list[str]:
    """The full command that runs ``argv`` under ``policy``.

    Paths are resolved first; of the ``visible`` ones only the outermost are bound."""
    args = [bwrap, "--die-with-parent", "--cap-drop", "ALL"]
    # A forwarder that must bind a port below 1024 with CAP_NET_BIND_SERVICE (a non-root
    # service's pane; a root one's has network_made instead) holds it over the network
    # namespace only without a nested user namespace: --disable-userns and a root
    # service's --uid both put the program one user namespace below the one that owns
    # it (design §13: the weaker user isolation of such a pane).
    args += user_args(policy.isolate_user and not policy.launcher_caps, os.geteuid())
    for cap in policy.launcher_caps:
        args += ["--cap-add", cap]
    args += [
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]
    if policy.network != "host" and not policy.network_made:
        args.append("--unshare-net")
    if policy.new_session:
        args.append("--new-session")
    args += ["--ro-bind", "/", "/", "--dev", "/dev", "--remount-ro", "/dev"]
    args += ["--perms", "01777", "--size", str(policy.shm_bytes), "--tmpfs", "/dev/shm"]
    args += ["--proc", PROC, *proc_covers()]
    args += ["--size", str(policy.tmp_bytes), "--tmpfs", "/tmp"]
    for path in policy.tmp_dirs:
        args += ["--dir", path]
    visible = outermost(real_paths(policy.visible))
    writable = real_paths(policy.writable)
    for path in visible:
        args += ["--ro-bind", path, path]
    for path in writable:
        args += ["--bind", path, path]
    for path in real_paths(policy.read_only):
        args += ["--ro-bind", path, path]
    for host_path, inside in policy.private_files:
        args += ["--bind", host_path, inside]
    for host_path, inside, rw in policy.moved:
        args += ["--bind" if rw else "--ro-bind", host_path, inside]
    hidden = list(policy.hidden)
    if policy.hide_host_sockets and policy.unreadable_file:
        shown = [*visible, *writable]
        hidden += worth_hiding(socket_hiding(policy.runtime_dirs, shown), shown)
    # Only the outermost: nothing can be mounted inside a stand-in already there.
    args += hidden_mounts(outermost(real_paths(hidden)), policy.unreadable_file)
    for host_path, inside in policy.files:
        args += ["--ro-bind", host_path, inside]
    for host_path, inside in policy.sockets:
        args += ["--bind", host_path, inside]
    if policy.clear_env:
        args.append("--clearenv")
    for key, value in policy.env.items():
        args += ["--setenv", key, value]
    args += ["--chdir", policy.cwd, "--"]
    if policy.new_session:
        return [*args, *policy.launcher, *argv]
    # The launcher runs with the terminal signals ignored, as bwrap does; the program
    # gets them back.
    signals = [ENV_PROGRAM, f"--default-signal={TERMINAL_SIGNALS}", "--"]
    return [*args, *policy.launcher, *signals, *argv]


def worth_hiding(paths: Sequence[str], shown: Sequence[str]) -> tuple[str, ...]:
    """``paths``, resolved, but those under the private ``/tmp`` that are not bound again
    there (``shown``, resolved too): the tmpfs hides those already. Resolved first: a link
    under ``/tmp`` to a path outside is what must be hidden, at its target."""
    bound = real_paths(shown)
    resolved = real_paths(paths)
    return tuple(path for path in resolved if not under(path, ["/tmp"]) or under(path, bound))


def under(path: str, roots: Sequence[str]) -> bool:
    """True when ``path`` is one of ``roots`` or lies inside one."""
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)
