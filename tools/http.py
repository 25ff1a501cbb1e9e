"""The one HTTP client of the web tools: pooled async httpx behind the URL guard and the caps.

Redirects are followed here rather than by httpx, so the guard sees every hop; credentials given
as headers are dropped when a redirect leaves the origin they were meant for. Connections are
made by `GuardedNetwork`, which asks the guard to resolve and check the host and then dials
exactly the checked address (the Host header and the TLS server name stay the host name), so no
byte ever goes to an address the guard did not pass. Bodies are streamed and cut at `max_bytes`;
the whole request, every hop and the body included, runs under one deadline, so a server that
accepts and never answers costs at most `timeout_s`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpcore
import httpx
from pydantic import BaseModel, Field

from tools.caps import FetchCaps
from tools.errors import CapExceeded, FetchFailed, NetworkDisabled
from tools.url_guard import AddressRefused, AddressUnresolved, UrlGuard

USER_AGENT = "AtelierBot/0.1 (research simulation; +https://github.com/atelier)"
_KEEP_METHOD_STATUSES = (307, 308)


class HttpResponse(BaseModel):
    """A complete response, as stored by the web cache (the body is stored apart, by its hash)."""

    url: str = Field(description="The URL asked for.")
    final_url: str = Field(description="The URL that answered, after redirects.")
    status: int
    headers: list[tuple[str, str]]
    redirects: list[str] = Field(default_factory=list, description="The URLs that redirected, in order.")
    body: bytes = Field(default=b"", exclude=True, repr=False)

    def header(self, name: str) -> str | None:
        name = name.lower()
        return next((value for key, value in self.headers if key.lower() == name), None)

    @property
    def content_type(self) -> str:
        return self.header("content-type") or ""


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host, url.port


class GuardedNetwork(httpcore.AsyncNetworkBackend):
    """httpcore's network layer with the guard in front: each connection goes to an address the
    guard resolved and checked for that very connection, never to a second DNS answer."""

    def __init__(self, guard: UrlGuard, inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self.guard = guard
        self.inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.AsyncNetworkStream:
        failure: Exception | None = None
        for address in await self.guard.resolve(host, port):
            try:
                return await self.inner.connect_tcp(
                    address, port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:  # try the host's next address
                failure = exc
        raise failure or httpcore.ConnectError(f"{host} resolves to no address")

    async def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None):
        raise httpcore.ConnectError("the web tools connect over TCP only")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's own transport over a connection pool whose network layer is `GuardedNetwork`."""

    def __init__(self, guard: UrlGuard, caps: FetchCaps) -> None:
        super().__init__(trust_env=False)
        # httpx takes no network backend, so its pool is replaced by an equivalent one that has ours
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            max_connections=caps.max_connections,
            max_keepalive_connections=caps.max_connections,
            network_backend=GuardedNetwork(guard),
        )


async def _read_capped(response: httpx.Response, url: httpx.URL, max_bytes: int) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise CapExceeded(f"{url}: body of {int(declared)} bytes exceeds the cap of {max_bytes} bytes; not read")
    chunks: list[bytes] = []
    total = 0
    async for chunk in response.aiter_bytes():
        total += len(chunk)
        if total > max_bytes:
            raise CapExceeded(f"{url}: body exceeds the cap of {max_bytes} bytes; stopped reading")
        chunks.append(chunk)
    return b"".join(chunks)


class GuardedHttp:
    def __init__(
        self,
        guard: UrlGuard,
        caps: FetchCaps,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        user_agent: str = USER_AGENT,
    ) -> None:
        self.guard = guard
        self.caps = caps
        self._client = httpx.AsyncClient(
            transport=transport or GuardedTransport(guard, caps),
            follow_redirects=False,
            trust_env=False,  # a proxy from the environment would connect for us, unchecked
            timeout=httpx.Timeout(caps.timeout_s, connect=caps.connect_timeout_s),
            headers={"User-Agent": user_agent},
        )

    async def request(
        self,
        method: str,
        url: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        headers: dict[str, str] | None = None,
    ) -> HttpResponse:
        try:
            start = httpx.URL(url, params=params) if params else httpx.URL(url)
        except httpx.InvalidURL as exc:
            raise FetchFailed(f"invalid URL {url!r}: {exc}") from None
        try:
            async with asyncio.timeout(self.caps.timeout_s):
                return await self._follow(method, start, json, headers or {})
        except (TimeoutError, httpx.TimeoutException):
            raise CapExceeded(f"{start}: no complete response within {self.caps.timeout_s:g}s") from None
        except httpx.HTTPError as exc:
            raise FetchFailed(f"{start}: {type(exc).__name__}: {exc}") from None

    async def _follow(self, method: str, start: httpx.URL, json: Any, headers: dict[str, str]) -> HttpResponse:
        current = start
        redirects: list[str] = []
        for _ in range(self.caps.max_redirects + 1):
            self.guard.check_static(current)
            request = self._client.build_request(method, current, json=json, headers=headers)
            try:
                response = await self._client.send(request, stream=True)
            except AddressRefused as exc:
                raise AddressRefused(f"refused {current}: {exc}") from None
            except AddressUnresolved as exc:
                raise AddressUnresolved(f"{current}: {exc}") from None
            try:
                location = response.headers.get("location")
                if response.is_redirect and location:
                    following = current.join(location)
                    redirects.append(str(current))
                    if _origin(following) != _origin(current):
                        headers = {}  # API keys travel as headers: never hand them to another origin
                    if response.status_code not in _KEEP_METHOD_STATUSES:
                        method, json = "GET", None
                    current = following
                    continue
                body = await _read_capped(response, current, self.caps.max_bytes)
            finally:
                await response.aclose()
            return HttpResponse(
                url=str(start),
                final_url=str(current),
                status=response.status_code,
                headers=list(response.headers.multi_items()),
                redirects=redirects,
                body=body,
            )
        raise CapExceeded(f"{start}: more than {self.caps.max_redirects} redirects")

    async def aclose(self) -> None:
        await self._client.aclose()


class OfflineTransport(httpx.AsyncBaseTransport):
    """A transport for replay mode: any request is an error, so nothing can reach the network."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        raise NetworkDisabled(f"the network is disabled (replay mode): {request.method} {request.url}")
