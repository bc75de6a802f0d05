"""The network destinations a confined pane may reach (a profile's ``network`` list).

A list's entries are ``host:port`` destinations and the word ``"public"`` (the default
list is ``["public"]``). ``"public"``: any host that resolves to a public unicast address
(``paneworker.confine.addresses``), reached through an HTTP proxy inside the sandbox at
``PROXY_INSIDE:PROXY_PORT`` (HTTP ``CONNECT``, and absolute-URI requests for plain
HTTP) that ``HTTPS_PROXY``/``HTTP_PROXY`` name (``proxy_environment``).

A destination is ``host:port`` (``[v6]:port`` for an IPv6 literal). Inside the sandbox
a named host is given a loopback address of its own (``127.100.0.N``, by its place in the
list) under its name in the sandbox's ``/etc/hosts``; a loopback address (the host's own
services, a model API on 127.0.0.1) keeps its address, and ``localhost`` is 127.0.0.1.
Any other address cannot be reached from inside (the sandbox has no route but its
loopback): name that host instead. Connections to a destination are carried
over a Unix socket to the worker's egress proxy, which connects only to destinations
on the list. The supervisor and the worker both read the plan from here.
"""

from __future__ import annotations

import ipaddress
import re

import msgspec

MAX_DESTINATIONS = 64
PUBLIC = "public"
# The inside HTTP proxy of a list with "public": an address no listed destination has
# (named hosts get 127.100.x.y, a listed literal may be any 127.0.0.x but this one).
PROXY_INSIDE = "127.99.0.1"
PROXY_PORT = 3128
# The sandbox's own loopback: never sent to the proxy (a CLI's own local server).
_ALWAYS_DIRECT = ("localhost", "127.0.0.1", "::1")
# Named hosts get loopback addresses from here (apart from any literal 127.0.0.x).
NAMED_PREFIX = "127.100"
_HOST_NAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?$")


class Destination(msgspec.Struct, frozen=True):
    """One allowed destination, and the loopback address it has inside the sandbox."""

    host: str
    port: int
    inside: str

    @property
    def label(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_destination(text: str) -> tuple[str, int]:
    """``host:port`` as (host, port); raises ValueError saying what is wrong."""
    if not isinstance(text, str) or not text or len(text) > 300:
        raise ValueError("must be host:port")
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
        if not sep:
            raise ValueError("an IPv6 destination is written [address]:port")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{host[:64]!r} is not an IPv6 address") from None
    else:
        host, sep, port = text.rpartition(":")
        if not sep or not host:
            raise ValueError("must be host:port")
        if not _HOST_NAME.match(host):
            raise ValueError(f"{host[:64]!r} is not a host name or IPv4 address")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError("the port must be a number in [1, 65535]")
    return host.lower(), int(port)


def split_public(entries: list[str]) -> tuple[bool, list[str]]:
    """(whether the list holds ``"public"``, its ``host:port`` entries).

    Raises:
        ValueError: ``"public"`` twice.
    """
    public = [entry for entry in entries if entry == PUBLIC]
    if len(public) > 1:
        raise ValueError(f"{PUBLIC!r} is listed twice")
    return bool(public), [entry for entry in entries if entry != PUBLIC]


def plan(entries: list[str]) -> list[Destination]:
    """The destinations of a ``network`` list's ``host:port`` entries, each with its
    loopback address inside.

    Raises:
        ValueError: a bad entry, a duplicate, or more than ``MAX_DESTINATIONS``.
    """
    if len(entries) > MAX_DESTINATIONS:
        raise ValueError(f"at most {MAX_DESTINATIONS} destinations")
    named: dict[str, str] = {}
    out: list[Destination] = []
    seen: set[tuple[str, int]] = set()
    for entry in entries:
        host, port = parse_destination(entry)
        if host == "localhost":
            host = "127.0.0.1"
        if (host, port) in seen:
            raise ValueError(f"{entry[:64]!r} is listed twice")
        seen.add((host, port))
        if _is_address(host):
            if not ipaddress.ip_address(host).is_loopback or ":" in host:
                raise ValueError(
                    f"{host[:64]!r}: only an IPv4 loopback address can be reached by "
                    "address from inside; name the host instead"
                )
            if host == PROXY_INSIDE:
                raise ValueError(f"{host}: the sandbox's own HTTP proxy has that address")
            inside = host
        else:
            # One address per host: its ports share it, as they do outside.
            index = len(named)
            inside = named.setdefault(host, f"{NAMED_PREFIX}.{index // 250}.{index % 250 + 1}")
        out.append(Destination(host, port, inside))
    return out


def hosts_file(destinations: list[Destination]) -> str:
    """The sandbox's ``/etc/hosts``: localhost, and each named host at its address."""
    lines = ["127.0.0.1 localhost", "::1 localhost"]
    named = {d.host: d.inside for d in destinations if not _is_address(d.host)}
    lines += [f"{inside} {host}" for host, inside in named.items()]
    return "\n".join(lines) + "\n"


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def forwarder_argv(
    python: str,
    script: str,
    destinations: list[Destination],
    inside_socket: str,
    *,
    public: bool = False,
) -> list[str]:
    """The start of a confined pane's command inside the sandbox: the forwarder
    (``script``, ``paneworker/confine/forwarder.py``, run by path with ``-I -S``: it needs
    nothing but the standard library, and skipping ``site`` saves a third of its start),
    which listens on each destination's inside address (and the HTTP proxy's with
    ``public``) and then runs the program given after the returned ``--``."""
    argv = [python, "-I", "-S", script, "--socket", inside_socket]
    if public:
        argv += ["--proxy", f"{PROXY_INSIDE}:{PROXY_PORT}"]
    for d in destinations:
        argv += ["--listen", f"{d.inside}:{d.port}={d.host}:{d.port}"]
    return [*argv, "--"]


def needs_low_ports(destinations: list[Destination]) -> bool:
    """Whether the forwarder must bind a port below 1024 inside (``:443``): it is then
    given ``CAP_NET_BIND_SERVICE`` (and ``CAP_SETPCAP``, to drop every capability,
    bounding set included, before it runs the program)."""
    return any(d.port < 1024 for d in destinations)


def proxy_environment(destinations: list[Destination]) -> dict[str, str]:
    """The variables that send a program's connections through the inside HTTP proxy:
    ``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY`` in both cases, ``NO_PROXY`` (the
    sandbox's loopback and the listed destinations, which have direct listeners) and
    ``NODE_USE_ENV_PROXY=1`` (Node from 24 reads the variables only with it)."""
    url = f"http://{PROXY_INSIDE}:{PROXY_PORT}"
    direct = list(dict.fromkeys([*_ALWAYS_DIRECT, *(d.host for d in destinations)]))
    env: dict[str, str] = {}
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"):
        env[name] = env[name.lower()] = url
    env["NO_PROXY"] = env["no_proxy"] = ",".join(direct)
    env["NODE_USE_ENV_PROXY"] = "1"
    return env
