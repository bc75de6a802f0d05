"""A profile's confinement fields, as written and as checked when the file loads.

``confine``: ``"auto"`` (confined when the host can build the sandbox), ``true``
(refused with ``sandbox_unavailable`` otherwise) or ``false``; unset, the service's
``PANEWARDEN_CONFINE``. ``writable``: more paths writable inside (absolute or ``~/``).
``hide``: more paths made unreadable (``!~/x`` drops a default). ``network``:
``"host"``, ``"none"`` or a list of allowed ``host:port`` destinations.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from protocol.egress import Destination, plan
from protocol.errors import ErrorCode, PanewardenError

ConfineChoice = Literal["auto", "on", "off"]
CONFINE_CHOICES: tuple[ConfineChoice, ...] = ("auto", "on", "off")
MAX_PATHS = 64


def confine_choice(value: str) -> ConfineChoice:
    """``PANEWARDEN_CONFINE``'s value (already checked by the config) as a choice."""
    return "on" if value == "on" else "off" if value == "off" else "auto"


@dataclass(frozen=True)
class ConfineSettings:
    """A profile's validated confinement fields (``choice`` None: the service's)."""

    choice: ConfineChoice | None = None
    writable: tuple[str, ...] = ()
    hide: tuple[str, ...] = ()
    network: Literal["host", "none", "list"] = "host"
    destinations: tuple[Destination, ...] = ()


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
        if network not in ("host", "none"):
            raise _error(f"{where}.network", 'must be "host", "none" or a list of host:port')
        mode: Literal["host", "none", "list"] = "host" if network == "host" else "none"
        return ConfineSettings(choice, paths, hidden, mode)
    try:
        destinations = plan(list(network))
    except ValueError as exc:
        raise _error(f"{where}.network", str(exc)) from None
    if not destinations:
        raise _error(f"{where}.network", 'an empty list: write "none"')
    return ConfineSettings(choice, paths, hidden, "list", tuple(destinations))
