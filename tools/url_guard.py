"""The URL guard: outbound requests go only to public http(s) addresses, or to allow-listed hosts.

Every hop is checked before it is made (the HTTP client follows redirects itself and asks the
guard again), and the address actually connected to is checked once more when the response
headers arrive, so a host that resolves differently the second time (DNS rebinding) is caught.
The sandbox web lives on loopback and is allow-listed explicitly by host:port.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass

import httpx

from benchmarks.errors import ConfigError
from tools.errors import FetchFailed, FetchRefused

ALLOWED_SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}

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


def address_problem(address: IpAddress) -> str | None:
    """Why an address may not be contacted (e.g. "loopback"), or None for a public address."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    for attribute, category in _ADDRESS_CATEGORIES:
        if getattr(address, attribute):
            return category
    if not address.is_global:  # shared address space (100.64/10) and other special ranges
        return "not globally routable"
    return None


@dataclass(frozen=True)
class HostEntry:
    host: str
    port: int | None  # None: any port

    @classmethod
    def parse(cls, entry: str) -> HostEntry:
        text = entry.strip().lower()
        if text.count(":") > 1 and not text.startswith("["):  # a bare IPv6 address, no port
            return cls(text, None)
        try:
            url = httpx.URL(f"http://{text}")
        except httpx.InvalidURL as exc:
            raise ConfigError(f"[web] allow_hosts: {entry!r} is not host or host:port ({exc})") from None
        if not url.host or url.path not in ("", "/"):
            raise ConfigError(f"[web] allow_hosts: {entry!r} is not host or host:port")
        return cls(url.host, url.port)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"


class AllowList:
    """Hosts the guard lets through whatever their address: "host" (any port) or "host:port"."""

    def __init__(self, entries: Iterable[str] = ()) -> None:
        self._entries: set[HostEntry] = {HostEntry.parse(entry) for entry in entries}

    def add(self, entry: str) -> None:
        self._entries.add(HostEntry.parse(entry))

    def add_origin(self, base_url: str) -> None:
        """Allow the host:port of a server we run or were pointed at (the sandbox web)."""
        url = httpx.URL(base_url)
        self._entries.add(HostEntry(url.host.lower(), _port_of(url)))

    def permits(self, host: str, port: int) -> bool:
        host = host.lower()
        return HostEntry(host, port) in self._entries or HostEntry(host, None) in self._entries

    def __iter__(self):
        return iter(sorted(str(entry) for entry in self._entries))


def _port_of(url: httpx.URL) -> int:
    return url.port or DEFAULT_PORTS[url.scheme]


def _refusal(url: httpx.URL, address: str, category: str) -> FetchRefused:
    entry = HostEntry(url.host, _port_of(url))
    return FetchRefused(
        f"refused {url}: {url.host} is at {address}, a {category} address; "
        f'allow it explicitly with [web] allow_hosts = ["{entry}"]'
    )


class UrlGuard:
    def __init__(self, allow: AllowList) -> None:
        self.allow = allow

    def check_static(self, url: httpx.URL) -> bool:
        """Checks that need no DNS: scheme, host, literal addresses. True when the host is allow-listed."""
        if url.scheme not in ALLOWED_SCHEMES:
            raise FetchRefused(f"refused {url}: scheme '{url.scheme}' is not allowed (only http and https)")
        if not url.host:
            raise FetchRefused(f"refused {url}: no host")
        if self.is_allow_listed(url):
            return True
        try:
            literal = ipaddress.ip_address(url.host)
        except ValueError:
            return False
        category = address_problem(literal)
        if category is not None:
            raise _refusal(url, str(literal), category)
        return False

    async def check(self, url: httpx.URL) -> None:
        """Refuses the URL unless it is allow-listed or every address its host resolves to is public."""
        if self.check_static(url):
            return
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(url.host, _port_of(url), type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise FetchFailed(f"cannot resolve {url.host} for {url}: {exc.strerror}") from None
        for *_, sockaddr in infos:
            address = ipaddress.ip_address(sockaddr[0].split("%")[0])  # drop an IPv6 zone id
            category = address_problem(address)
            if category is not None:
                raise _refusal(url, str(address), category)

    def is_allow_listed(self, url: httpx.URL) -> bool:
        return self.allow.permits(url.host, _port_of(url))

    def check_peer(self, url: httpx.URL, peer_address: str) -> None:
        """The address actually connected to must pass too (defeats DNS answers that change)."""
        if self.is_allow_listed(url):
            return
        address = ipaddress.ip_address(peer_address.split("%")[0])
        category = address_problem(address)
        if category is not None:
            raise _refusal(url, str(address), category)
