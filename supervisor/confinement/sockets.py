"""The host's Unix sockets a sandboxed program must not reach.

``--ro-bind / /`` leaves every socket file outside the private ``/tmp`` connectable (a
read-only mount does not stop ``connect``): the session bus (``systemd-run --user`` runs
anything outside), container engines' sockets, gpg and ssh agents, the system bus. Two
sources, both hidden by the builder (``policy.bwrap_argv``):

- the runtime directories where such sockets live (``RUNTIME_DIRS`` and the service's
  ``XDG_RUNTIME_DIR``), whole, so a socket bound there after the sandbox was built is
  not reachable either; one that holds a path the sandbox shows is not hidden whole;
- every socket path the host has bound (``/proc/net/unix``, read at each build: the
  kernel's list, so a socket anywhere else is found too), but those under ``KEPT`` and
  those bound less than ``SETTLED_S`` ago: bwrap must make a mount point for each, and
  one that is gone by then (a short-lived socket, its directory removed with it) would
  fail the pane's start. A socket too young to be hidden this time is the next start's.
  A socket under a panewarden runtime base (a path component ``panewarden`` or
  ``panewarden-<uid>``: any service's, whose directories come and go with its starts
  and stops) hides that base whole instead, which stays.

A socket under the private ``/tmp`` is gone already (unless bound again there).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Sequence

UNIX_TABLE = "/proc/net/unix"
RUNTIME_DIRS = (
    "/run/user",
    "/run/dbus",
    "/run/docker",
    "/run/docker.sock",
    "/run/podman",
    "/run/containerd",
    "/run/crio",
    "/run/snapd.socket",
    "/run/snapd-snap.socket",
    "/run/libvirt",
    "/run/lxd",
    "/run/incus",
)
# Sockets a program needs and that run nothing for it: name resolution through
# systemd-resolved's varlink socket (nss-resolve).
KEPT = ("/run/systemd/resolve",)
SETTLED_S = 2.0
SERVICE_BASE = "panewarden"
# /proc/net/unix columns: Num RefCount Protocol Flags Type St Inode [Path].
_PATH_COLUMN = 7


def bound_sockets(table: str = UNIX_TABLE) -> list[str]:
    """The filesystem paths of the Unix sockets bound in this network namespace (abstract
    and unnamed ones have none), once each."""
    try:
        with open(table, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()[1:]
    except OSError:
        return []
    paths: dict[str, None] = {}
    for line in lines:
        fields = line.split(maxsplit=_PATH_COLUMN)
        if len(fields) > _PATH_COLUMN and fields[_PATH_COLUMN].startswith("/"):
            paths[fields[_PATH_COLUMN]] = None
    return list(paths)


def socket_hiding(runtime_dirs: Sequence[str], shown: Sequence[str]) -> list[str]:
    """What to hide: the runtime directories that exist and hold none of ``shown``, and
    every bound socket outside ``KEPT`` (resolved paths; the caller drops those the
    private ``/tmp`` hides already)."""
    dirs = [os.path.realpath(path) for path in (*RUNTIME_DIRS, *runtime_dirs) if path]
    whole = [
        path
        for path in dict.fromkeys(dirs)
        if os.path.lexists(path) and not any(_inside(shown_path, path) for shown_path in shown)
    ]
    sockets: dict[str, None] = {}
    settled = time.time() - SETTLED_S
    for path in bound_sockets():
        resolved = os.path.realpath(path)
        real = _service_base(resolved)
        if real == resolved and not _settled_socket(resolved, settled):
            continue
        if any(_inside(real, kept) for kept in KEPT) or any(_inside(real, d) for d in whole):
            continue
        if not any(_inside(shown_path, real) for shown_path in shown):
            sockets[real] = None
    return [*whole, *sockets]


def _service_base(path: str) -> str:
    """A panewarden runtime base ``path`` lies under (``…/panewarden``,
    ``…/panewarden-<uid>``), or ``path``."""
    parts = path.split("/")
    for index, part in enumerate(parts[:-1]):
        if part == SERVICE_BASE or (
            part.startswith(SERVICE_BASE + "-") and part[len(SERVICE_BASE) + 1 :].isdigit()
        ):
            return "/".join(parts[: index + 1])
    return path


def _settled_socket(path: str, before: float) -> bool:
    try:
        done = os.stat(path)
    except OSError:
        return False
    return stat.S_ISSOCK(done.st_mode) and done.st_ctime < before


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")
