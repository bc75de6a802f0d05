"""How wide a sandbox is, compared: a pane's reviewers are no wider than the pane.

A confined pane that starts a reviewer over ``panewarden ctl`` must not reach, through
it, what its own sandbox keeps from it. ``excess`` names the first thing ``inner`` (the
reviewer's profile) grants that ``outer`` (the starter's) does not:

- network: ``"none"`` ⊂ a list ⊂ ``"host"``; a list is within another when each of its
  destinations (host and port) and its ``"public"`` are in the other;
- writable: each extra writable path of ``inner`` is one of ``outer``'s or below one;
- hide: ``inner`` hides at least what ``outer`` hides (each of ``outer``'s entries is
  in ``inner``'s) and drops no default that ``outer`` keeps (each ``!`` entry of
  ``inner``'s is one of ``outer``'s).

Paths are compared as the sandbox builder reads them (``~/`` is the service's HOME) and
with symlinks resolved, so two spellings of one directory are one.
"""

from __future__ import annotations

import os

from supervisor.profiles.confinement import ConfineSettings

NETWORK_RANK = {"none": 0, "list": 1, "host": 2}


def _real(path: str, home: str) -> str:
    if path.startswith("~/"):
        path = os.path.join(home, path[2:])
    return os.path.realpath(path)


def _below(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _destinations(settings: ConfineSettings) -> set[tuple[str, int]]:
    return {(d.host, d.port) for d in settings.destinations}


def _network_excess(inner: ConfineSettings, outer: ConfineSettings) -> str | None:
    inner_rank, outer_rank = NETWORK_RANK[inner.network], NETWORK_RANK[outer.network]
    if inner_rank > outer_rank:
        return f"network {inner.network!r} is wider than the starter's {outer.network!r}"
    if inner.network != "list" or outer.network != "list":
        return None
    extra = sorted(_destinations(inner) - _destinations(outer))
    if extra:
        host, port = extra[0]
        return f"network destination {host}:{port} is not in the starter's list"
    # "public" (outbound to public addresses), where the settings have it.
    if getattr(inner, "public", False) and not getattr(outer, "public", False):
        return 'network "public" is not in the starter\'s list'
    return None


def excess(inner: ConfineSettings, outer: ConfineSettings, home: str) -> str | None:
    """What ``inner`` grants beyond ``outer`` (one reason), or None when it is within."""
    reason = _network_excess(inner, outer)
    if reason is not None:
        return reason
    tops = [_real(path, home) for path in outer.writable]
    for path in inner.writable:
        if not any(_below(_real(path, home), top) for top in tops):
            return f"writable {path!r} is not writable to the starter"
    inner_hides = {_real(p, home) for p in inner.hide if not p.startswith("!")}
    inner_drops = {_real(p[1:], home) for p in inner.hide if p.startswith("!")}
    outer_drops = {_real(p[1:], home) for p in outer.hide if p.startswith("!")}
    for path in outer.hide:
        if not path.startswith("!") and _real(path, home) not in inner_hides:
            return f"hide {path!r} of the starter is not hidden"
    for path in sorted(inner_drops - outer_drops):
        return f"hide drops default {path!r}, which the starter keeps hidden"
    return None
