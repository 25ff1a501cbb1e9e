"""Which network addresses Atelier may contact: public ones only. The one policy of the URL guard
(`tools.url_guard`, every page and search) and of data downloads (`benchmarks.download`)."""

from __future__ import annotations

import ipaddress

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Checked in this order so the message names the most telling category (127.0.0.1 is "loopback",
# not merely "private").
_ADDRESS_CATEGORIES = (
    ("is_unspecified", "unspecified"),
    ("is_loopback", "loopback"),
    ("is_link_local", "link-local"),
    ("is_multicast", "multicast"),
    ("is_private", "private"),
    ("is_reserved", "reserved"),
)

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052: the last 32 bits are the IPv4 address


def _embedded_ipv4(address: ipaddress.IPv6Address) -> list[tuple[str, ipaddress.IPv4Address]]:
    """The IPv4 addresses an IPv6 address carries to be reached through (6to4, Teredo, NAT64): a
    gateway on the way may deliver to them, so they must pass the same policy."""
    embedded = []
    if address.sixtofour is not None:
        embedded.append(("6to4", address.sixtofour))
    if address.teredo is not None:
        server, client = address.teredo
        embedded += [("Teredo", client), ("Teredo", server)]
    if address in _NAT64:
        embedded.append(("NAT64", ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)))
    return embedded


def address_problem(address: IpAddress) -> str | None:
    """Why an address may not be contacted (e.g. "loopback"), or None for a public address."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        else:
            for kind, ipv4 in _embedded_ipv4(address):
                category = address_problem(ipv4)
                if category is not None:
                    return f"{kind}-embedded {category} ({ipv4})"
            if address.sixtofour is not None:
                # 6to4 is routed to its IPv4 address, which passed; Python 3.13.0 counts all of
                # 2002::/16 as private, earlier and later versions do not: the IPv4 decides on each
                return None
            if address.is_site_local:  # fec0::/10: deprecated, yet Python counts it as global
                return "site-local"
    for attribute, category in _ADDRESS_CATEGORIES:
        if getattr(address, attribute):
            return category
    if not address.is_global:  # shared address space (100.64/10) and other special ranges
        return "not globally routable"
    return None
