"""Which addresses a ``"public"`` destination may be connected to.

A confined pane whose ``network`` list holds ``"public"`` reaches, through the worker's
egress proxy, any host that resolves to a public unicast address. The proxy resolves a
name once, keeps only the addresses this module accepts and connects to one of those
exact addresses, so a name that resolves to a private address a moment later (DNS
rebinding) never gets a connection to it.

Refused: loopback, private (RFC 1918), link-local (169.254/16 with the cloud metadata
service, fe80::/10), shared CGNAT space (100.64/10), unique local (fc00::/7),
multicast, unspecified, broadcast, reserved and documentation or benchmarking ranges
(everything ``ipaddress`` does not call global), an IPv6 address carrying a refused
IPv4 one (mapped ``::ffff:0:0/96``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``), and
the host's own interface addresses (a public address of the host reaches its services
bound to every interface).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def refusal(address: str, own: Iterable[str] = ()) -> str | None:
    """Why ``address`` (an IP literal) is not a public unicast destination, or None when
    it is. ``own``: the host's own addresses."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return "not an address"
    why = _range_refusal(ip)
    if why is not None:
        return why
    if isinstance(ip, ipaddress.IPv6Address):
        for inner in _embedded_v4(ip):
            if _range_refusal(inner) is not None:
                return "carries a non-public IPv4 address"
    if ip in {_parsed(a) for a in own}:
        return "the host's own address"
    return None


def own_addresses() -> frozenset[str]:
    """This host's interface addresses (read at each check: interfaces come and go)."""
    import psutil  # the worker's other imports do not need it

    found: set[str] = set()
    for addrs in psutil.net_if_addrs().values():
        for addr in addrs:
            if addr.address and (":" in addr.address or "." in addr.address):
                found.add(addr.address.split("%", 1)[0])
    return frozenset(found)


def _range_refusal(ip: IpAddress) -> str | None:
    if ip.is_loopback:
        return "loopback"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if ip.is_reserved:
        return "reserved"
    if ip.is_private:
        return "private"
    if not ip.is_global:
        return "not global"  # shared address space (CGNAT) and the like
    return None


def _embedded_v4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    inner = [ip.ipv4_mapped, ip.sixtofour]
    if ip in _NAT64:
        inner.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return [v4 for v4 in inner if v4 is not None]


def _parsed(address: str) -> IpAddress | None:
    try:
        return ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return None
