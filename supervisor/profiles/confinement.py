"""A profile's confinement fields, as written and as checked when the file loads.

``confine``: ``"auto"`` (confined when the host can build the sandbox), ``true``
(refused with ``sandbox_unavailable`` otherwise) or ``false``; unset, the service's
``PANEWARDEN_CONFINE``. ``writable``: more paths writable inside (absolute or ``~/``).
``hide``: more paths made unreadable (``!~/x`` drops a default). ``network``:
``"host"`` (the host's network namespace: explicit opt-in), ``"none"`` or a list of
``host:port`` destinations and the word ``"public"``; unset, ``["public"]``. Every
value but ``"host"`` gives the pane a network namespace of its own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from protocol.egress import PUBLIC, Destination, plan, split_public
from protocol.errors import ErrorCode, PanewardenError

ConfineChoice = Literal["auto", "on", "off"]
CONFINE_CHOICES: tuple[ConfineChoice, ...] = ("auto", "on", "off")
MAX_PATHS = 64
DEFAULT_NETWORK: tuple[str, ...] = (PUBLIC,)
NetworkMode = Literal["host", "none", "list"]


def confine_choice(value: str) -> ConfineChoice:
    """``PANEWARDEN_CONFINE``'s value (already checked by the config) as a choice."""
    return "on" if value == "on" else "off" if value == "off" else "auto"


@dataclass(frozen=True)
class ConfineSettings:
    """A profile's validated confinement fields (``choice`` None: the service's).

    ``network``: ``"list"`` for a list (the default, ``["public"]``); ``destinations``
    its ``host:port`` entries, ``public`` whether it holds ``"public"``."""

    choice: ConfineChoice | None = None
    writable: tuple[str, ...] = ()
    hide: tuple[str, ...] = ()
    network: NetworkMode = "list"
    destinations: tuple[Destination, ...] = ()
    public: bool = True

    @property
    def entries(self) -> tuple[str, ...] | str:
        """``network`` as a profile writes it (``"host"``, ``"none"`` or the list)."""
        if self.network != "list":
            return self.network
        return (*((PUBLIC,) if self.public else ()), *(d.label for d in self.destinations))


def _error(where: str, problem: str) -> PanewardenError:
    return PanewardenError(ErrorCode.CONFIG_INVALID, f"{where}: {problem}")


def _paths(where: str, values: tuple[str, ...], *, drops: bool) -> tuple[str, ...]:
    if len(values) > MAX_PATHS:
        raise _error(where, f"at most {MAX_PATHS} paths")
    for index, value in enumerate(values):
        path = value[1:] if drops and value.startswith("!") else value
        if "\0" in path or not (os.path.isabs(path) or path.startswith("~/")):
            raise _error(f"{where}[{index}]", "must be an absolute path or start with ~/")
        if os.path.normpath(path.removeprefix("~")) in ("/", "."):
            raise _error(f"{where}[{index}]", "must not be / or HOME itself")
    return values


def build_confinement(
    where: str,
    confine: bool | str | None,
    writable: tuple[str, ...],
    hide: tuple[str, ...],
    network: str | tuple[str, ...],
) -> ConfineSettings:
    """Check one profile's fields; raises ``config_invalid`` naming the field."""
    choice: ConfineChoice | None
    if confine is None:
        choice = None
    elif confine is True:
        choice = "on"
    elif confine is False:
        choice = "off"
    elif confine == "auto":
        choice = "auto"
    else:
        raise _error(f"{where}.confine", 'must be "auto", true or false')
    paths = _paths(f"{where}.writable", writable, drops=False)
    hidden = _paths(f"{where}.hide", hide, drops=True)
    if isinstance(network, str):
        if network == PUBLIC:
            raise _error(f"{where}.network", 'a list: write ["public"]')
        if network not in ("host", "none"):
            raise _error(
                f"{where}.network",
                'must be "host", "none" or a list of host:port entries and "public"',
            )
        mode: NetworkMode = "host" if network == "host" else "none"
        return ConfineSettings(choice, paths, hidden, mode, public=False)
    entries = list(network)
    try:
        public, rest = split_public(entries)
        destinations = plan(rest)
    except ValueError as exc:
        raise _error(f"{where}.network", str(exc)) from None
    if not destinations and not public:
        raise _error(f"{where}.network", 'an empty list: write "none"')
    return ConfineSettings(choice, paths, hidden, "list", tuple(destinations), public)
