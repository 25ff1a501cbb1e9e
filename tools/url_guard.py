"""The URL guard: outbound requests go only to public http(s) addresses, or to allow-listed hosts.

Two checks, both before any byte is sent:
- `check_static(url)` on every hop (the HTTP client follows redirects itself): scheme, host, and
  literal addresses;
- `resolve(host, port)` where the connection is made (`tools.http`'s network layer): the name is
  resolved once, every address it resolves to must be public, and the connection goes to exactly
  those checked addresses. A name that answers a public address to the check and a private one to
  the connect (DNS rebinding) therefore gets no second answer to give.
The sandbox web lives on loopback and is allow-listed explicitly by host:port.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass

import httpx

from atelier.benchmarks.common.addresses import address_problem
from atelier.benchmarks.common.errors import ConfigError
from atelier.tools.errors import FetchFailed, FetchRefused

ALLOWED_SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}


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


def _address_refused(host: str, port: int, address: str, category: str) -> str:
    return (
        f"{host} is at {address}, a {category} address; "
        f'allow it explicitly with [web] allow_hosts = ["{HostEntry(host, port)}"]'
    )


def _refusal(url: httpx.URL, address: str, category: str) -> FetchRefused:
    return FetchRefused(f"refused {url}: {_address_refused(url.host, _port_of(url), address, category)}")


class AddressRefused(FetchRefused):
    """Raised where a connection would be made; the HTTP client names the URL it was for."""


class AddressUnresolved(FetchFailed):
    """The host name does not resolve."""


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

    async def resolve(self, host: str, port: int) -> list[str]:
        """The addresses to connect to for host:port, resolved once. Unless host:port is
        allow-listed, every one of them must be public, or the connection is refused."""
        host = host.lower()
        try:
            literal = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        if literal is not None:
            addresses = [str(literal)]
        else:
            loop = asyncio.get_running_loop()
            try:
                infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except socket.gaierror as exc:
                raise AddressUnresolved(f"cannot resolve {host}: {exc.strerror}") from None
            addresses = list(dict.fromkeys(str(sockaddr[0]) for *_, sockaddr in infos))
        if not self.allow.permits(host, port):
            for address in addresses:
                category = address_problem(ipaddress.ip_address(address.split("%")[0]))  # without an IPv6 zone id
                if category is not None:
                    raise AddressRefused(_address_refused(host, port, address, category))
        return addresses

    def is_allow_listed(self, url: httpx.URL) -> bool:
        return self.allow.permits(url.host, _port_of(url))
