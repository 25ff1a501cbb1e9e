"""The one HTTP client of the web tools: pooled async httpx behind the URL guard and the caps.

Redirects are followed here rather than by httpx, so the guard sees every hop; credentials given
as headers are dropped when a redirect leaves the origin they were meant for. Connections are
made by `GuardedNetwork`, which asks the guard to resolve and check the host and then dials
exactly the checked address (the Host header and the TLS server name stay the host name), so no
byte ever goes to an address the guard did not pass. Bodies are streamed and cut at `max_bytes`,
both as received and as decoded: the content encodings (gzip, deflate, br, zstd) are undone here
by decompressors that stop at the cap, so a small compressed body cannot expand past it; the whole
request, every hop and the body included, runs under one deadline, so a server that
accepts and never answers costs at most `timeout_s`.

A kept-alive connection is reused for at most `KEEPALIVE_S` idle seconds, under the 5 s after
which common servers (uvicorn, which serves the sandbox; Apache) close one. A server may still
close it just as a request goes out on it (the client found it open, the server's timer fired
before the request arrived; on a loaded machine the window is wide): an idempotent request that
got no response on its connection is sent once more, on a new one (RFC 9110 §9.2.2). The second
try is the only one, and it runs under the same deadline.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from typing import Any, Protocol

import httpcore
import httpx
from pydantic import BaseModel, Field

from atelier.tools.caps import FetchCaps
from atelier.tools.errors import CapExceeded, FetchFailed, FetchRefused, NetworkDisabled
from atelier.tools.url_guard import AddressRefused, AddressUnresolved, UrlGuard

# the optional decompressors httpx itself would use
try:
    import brotli
except ImportError:
    try:
        import brotlicffi as brotli  # the same API
    except ImportError:
        brotli = None
try:
    import zstandard
except ImportError:
    zstandard = None  # type: ignore[assignment]  # an optional module: mypy types the name as the module only

USER_AGENT = "AtelierBot/0.1 (research simulation; +https://github.com/atelier)"
_KEEP_METHOD_STATUSES = (307, 308)
KEEPALIVE_S = 4.0
_IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS"})
# how a request fails when its connection was closed under it before any response came back
_NO_RESPONSE = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


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
            keepalive_expiry=KEEPALIVE_S,
            network_backend=GuardedNetwork(guard),
        )


class _Decoder(Protocol):
    """One content encoding undone incrementally. `feed` returns the bytes decoded from `data`, at
    most about `limit` of them (a few kB over at most): reaching the limit means the body is past
    the cap, and the decoder is then not used again."""

    def feed(self, data: bytes, limit: int) -> bytes: ...

    def finish(self) -> bytes: ...


class _Identity:
    def feed(self, data: bytes, limit: int) -> bytes:
        return data

    def finish(self) -> bytes:
        return b""


class _Zlib:
    """gzip, and deflate (zlib-wrapped, or raw as some servers send it: httpx tries both too)."""

    def __init__(self, wbits: int, raw_fallback: bool = False) -> None:
        self._decompressor = zlib.decompressobj(wbits)
        self._raw_fallback = raw_fallback

    def feed(self, data: bytes, limit: int) -> bytes:
        if self._decompressor.eof or not data:
            return b""  # bytes after the end of the stream are ignored, as httpx does
        try:
            out = self._decompressor.decompress(data, limit)
        except zlib.error:
            if not self._raw_fallback:
                raise
            self._decompressor = zlib.decompressobj(-zlib.MAX_WBITS)
            out = self._decompressor.decompress(data, limit)
        self._raw_fallback = False
        parts = [out]
        produced = len(out)
        # input is left over only when the output reached the limit
        while self._decompressor.unconsumed_tail and produced < limit:
            parts.append(self._decompressor.decompress(self._decompressor.unconsumed_tail, limit - produced))
            produced += len(parts[-1])
        return b"".join(parts)

    def finish(self) -> bytes:
        return self._decompressor.flush()


class _Brotli:
    def __init__(self) -> None:
        self._decompressor = brotli.Decompressor()

    def feed(self, data: bytes, limit: int) -> bytes:
        if not data:
            return b""
        parts = [self._decompressor.process(data, output_buffer_limit=limit)]
        produced = len(parts[0])
        while not self._decompressor.can_accept_more_data() and produced < limit:
            parts.append(self._decompressor.process(b"", output_buffer_limit=limit - produced))
            produced += len(parts[-1])
        return b"".join(parts)

    def finish(self) -> bytes:
        return b""  # a truncated stream is kept as far as it goes, as httpx does


class _OutputFull(Exception):
    """Raised by `_Zstd`'s sink, through zstandard's writer, to stop it at the limit."""


class _Zstd:
    """zstandard's incremental decompressor takes no output limit, but its writer hands the output
    to a sink in pieces of `_ZSTD_PIECE` bytes: this sink stops it once past the limit."""

    def __init__(self) -> None:
        self._pieces: list[bytes] = []
        self._produced = 0
        self._limit = 0
        self._writer = zstandard.ZstdDecompressor().stream_writer(
            self,  # type: ignore[arg-type]  # zstandard's stubs ask for IO[bytes]; a sink with write() does
            write_size=_ZSTD_PIECE,
            closefd=False,
        )

    def write(self, piece: bytes) -> int:
        self._pieces.append(bytes(piece))
        self._produced += len(piece)
        if self._produced >= self._limit:
            raise _OutputFull
        return len(piece)

    def feed(self, data: bytes, limit: int) -> bytes:
        self._pieces, self._produced, self._limit = [], 0, limit
        if data:
            try:
                self._writer.write(data)
            except _OutputFull:
                pass  # the caller sees the limit reached
        return b"".join(self._pieces)

    def finish(self) -> bytes:
        return b""


_ZSTD_PIECE = 64 * 1024
_DECODERS: dict[str, Callable[[], _Decoder]] = {
    "identity": _Identity,
    "gzip": lambda: _Zlib(zlib.MAX_WBITS | 16),
    "deflate": lambda: _Zlib(zlib.MAX_WBITS, raw_fallback=True),
}
# brotli stops at an output limit from 1.2 on (brotlicffi from 1.2.0.0): an older one is not used
if brotli is not None and hasattr(brotli.Decompressor, "can_accept_more_data"):
    _DECODERS["br"] = _Brotli
if zstandard is not None:
    _DECODERS["zstd"] = _Zstd
_UNDECODABLE = ("br", "zstd")  # encodings a server may use whose decompressor may not be installed
_DECODE_ERRORS: tuple[type[Exception], ...] = (zlib.error,)
if brotli is not None:
    _DECODE_ERRORS += (brotli.error,)
if zstandard is not None:
    _DECODE_ERRORS += (zstandard.ZstdError,)
ACCEPT_ENCODING = ", ".join(name for name in _DECODERS if name != "identity")


class CappedBody:
    """A response body read under the byte cap: the raw bytes as they arrive and, through each
    content encoding, the decoded bytes as they are decoded. Every decompressor is told how much it
    may still produce, so a small compressed body that expands to gigabytes (a decompression bomb)
    is stopped at the cap, not after it has been expanded."""

    def __init__(self, url: httpx.URL, content_encoding: list[str], max_bytes: int) -> None:
        self.url = url
        self.max_bytes = max_bytes
        self.encodings: list[str] = []
        for value in content_encoding:
            name = value.strip().lower()
            if name in _DECODERS:
                self.encodings.append(name)
            elif name in _UNDECODABLE:
                raise FetchFailed(f"{url}: content encoding '{name}' cannot be decoded within the byte cap here")
            # other names are passed through undecoded, as httpx does
        # the last encoding applied is the first one undone
        self._stages = [(name, _DECODERS[name]()) for name in reversed(self.encodings)]
        self.raw_bytes = 0
        self.produced = [0] * len(self._stages)  # decoded bytes out of each stage so far
        self._chunks: list[bytes] = []

    def feed(self, raw: bytes) -> None:
        self.raw_bytes += len(raw)
        if self.raw_bytes > self.max_bytes:
            raise CapExceeded(f"{self.url}: body exceeds the cap of {self.max_bytes} bytes; stopped reading")
        self._chunks.append(self._decode(raw, final=False))

    def finish(self) -> bytes:
        self._chunks.append(self._decode(b"", final=True))
        return b"".join(self._chunks)

    def _decode(self, data: bytes, *, final: bool) -> bytes:
        for index, (name, stage) in enumerate(self._stages):
            try:
                out = stage.feed(data, self._allowance(index))
                self._count(index, out)
                if final:
                    tail = stage.finish()
                    self._count(index, tail)
                    out += tail
            except _DECODE_ERRORS as exc:
                raise FetchFailed(f"{self.url}: body is not valid {name} data ({exc})") from None
            data = out
        return data

    def _allowance(self, index: int) -> int:
        # one byte more than the cap leaves: producing it proves the body too large
        return self.max_bytes - self.produced[index] + 1

    def _count(self, index: int, out: bytes) -> None:
        self.produced[index] += len(out)
        if self.produced[index] > self.max_bytes:
            raise CapExceeded(
                f"{self.url}: body exceeds the cap of {self.max_bytes} bytes once decoded "
                f"(content encoding {', '.join(self.encodings)}); stopped decoding"
            )


async def _read_capped(response: httpx.Response, url: httpx.URL, max_bytes: int) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise CapExceeded(f"{url}: body of {int(declared)} bytes exceeds the cap of {max_bytes} bytes; not read")
    body = CappedBody(url, response.headers.get_list("content-encoding", split_commas=True), max_bytes)
    async for raw in response.aiter_raw():  # undecoded: httpx would expand a whole chunk before we see it
        body.feed(raw)
    return body.finish()


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
            headers={"User-Agent": user_agent, "Accept-Encoding": ACCEPT_ENCODING},
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
            try:
                self.guard.check_static(current)
                request = self._client.build_request(method, current, json=json, headers=headers)
                response = await self._sent(request)
            except AddressRefused as exc:
                raise AddressRefused(f"refused {current}: {exc}") from None
            except AddressUnresolved as exc:
                raise AddressUnresolved(f"{current}: {exc}") from None
            except httpx.InvalidURL as exc:  # httpx reads a redirect's Location even when not following it
                raise FetchRefused(
                    f"refused the redirect from {current}: its Location is not a URL to fetch ({exc})"
                ) from None
            except UnicodeError as exc:  # a host IDNA cannot encode (fullwidth, an empty or long label)
                came_from = f"the redirect from {redirects[-1]} to " if redirects else ""
                raise FetchRefused(f"refused {came_from}{current}: its host is not a name to fetch ({exc})") from None
            try:
                location = response.headers.get("location")
                if response.is_redirect and location:
                    try:
                        following = current.join(location)
                    except (httpx.InvalidURL, UnicodeError, ValueError) as exc:
                        raise FetchRefused(
                            f"refused the redirect from {current}: its Location {location!r} is not a URL to fetch "
                            f"({exc})"
                        ) from None
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

    async def _sent(self, request: httpx.Request) -> httpx.Response:
        """`request` sent, its response's head read; sent again once if idempotent and its
        connection closed before any response (see the module's note)."""
        try:
            return await self._client.send(request, stream=True)
        except _NO_RESPONSE:
            if request.method not in _IDEMPOTENT:
                raise
        return await self._client.send(request, stream=True)

    async def aclose(self) -> None:
        await self._client.aclose()


class OfflineTransport(httpx.AsyncBaseTransport):
    """A transport for replay mode: any request is an error, so nothing can reach the network."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        raise NetworkDisabled(f"the network is disabled (replay mode): {request.method} {request.url}")
