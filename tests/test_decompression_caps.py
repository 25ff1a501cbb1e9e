"""The byte cap holds for decoded bytes: a small compressed body that expands to far more than
`max_bytes` (a decompression bomb) is stopped as it is decoded, for every content encoding httpx
accepts and for several stacked ones, without ever holding the expanded body."""

from __future__ import annotations

import tracemalloc
import zlib

import brotli
import httpx
import httpx._decoders
import pytest
import zstandard
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from atelier.tools import http as tools_http
from atelier.tools.asgi_server import AsgiServer
from atelier.tools.caps import FetchCaps
from atelier.tools.errors import CapExceeded, FetchFailed
from atelier.tools.http import CappedBody, GuardedHttp, HttpResponse
from atelier.tools.url_guard import AllowList, UrlGuard

CAP = 1_000_000
MB = 1 << 20
BOMB_MB = 64  # each bomb expands to 64 MiB, 67 times the cap, from a few kB
SLACK = 64 * 1024  # what one decompressor call may overshoot its limit by (a zstd piece, a brotli block)


def _streamed(compress, flush, megabytes: int, byte: bytes = b"\0") -> bytes:
    """`megabytes` MiB of `byte`, compressed a MiB at a time (the bomb is never held expanded)."""
    block = byte * MB
    return b"".join(compress(block) for _ in range(megabytes)) + flush()


def gzip_of(megabytes: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    return _streamed(packer.compress, packer.flush, megabytes)


def deflate_of(megabytes: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS)
    return _streamed(packer.compress, packer.flush, megabytes)


def brotli_of(megabytes: int) -> bytes:
    packer = brotli.Compressor(quality=5)
    return _streamed(packer.process, packer.finish, megabytes)


def zstd_of(megabytes: int) -> bytes:
    packer = zstandard.ZstdCompressor().compressobj()
    return _streamed(packer.compress, packer.flush, megabytes)


ENCODE = {
    "gzip": lambda data: zlib.compress(data, wbits=zlib.MAX_WBITS | 16),
    "deflate": zlib.compress,
    "br": brotli.compress,
    "zstd": lambda data: zstandard.ZstdCompressor().compress(data),
}


def encoded(data: bytes, content_encoding: str) -> bytes:
    """`data` with each listed encoding applied in order, as `Content-Encoding: a, b` means."""
    for name in content_encoding.split(", "):
        data = ENCODE[name](data)
    return data


BOMBS: dict[str, bytes] = {}


def bomb(content_encoding: str) -> bytes:
    if content_encoding not in BOMBS:
        single = {"gzip": gzip_of, "deflate": deflate_of, "br": brotli_of, "zstd": zstd_of}
        first, *rest = content_encoding.split(", ")
        body = single[first](BOMB_MB)
        for name in rest:
            body = ENCODE[name](body)
        BOMBS[content_encoding] = body
    return BOMBS[content_encoding]


class EncodingApp:
    """Serves a body under a given Content-Encoding; remembers the Accept-Encoding it was sent."""

    def __init__(self) -> None:
        self.bodies: dict[str, tuple[bytes, str]] = {}
        self.accept_encoding: list[str] = []

    def app(self) -> Starlette:
        async def body(request: Request) -> Response:
            self.accept_encoding.append(request.headers.get("accept-encoding", ""))
            data, content_encoding = self.bodies[request.path_params["name"]]
            return Response(data, headers={"content-encoding": content_encoding}, media_type="text/plain")

        async def seen(request: Request) -> Response:
            return JSONResponse(self.accept_encoding)

        return Starlette(routes=[Route("/body/{name}", body), Route("/seen", seen)])


@pytest.fixture(scope="module")
def server():
    app = EncodingApp()
    with AsgiServer(app.app()) as running:
        yield app, running


async def fetch(running: AsgiServer, name: str, max_bytes: int = CAP) -> HttpResponse:
    http = GuardedHttp(UrlGuard(AllowList([running.host_port])), FetchCaps(max_bytes=max_bytes))
    try:
        return await http.request("GET", f"{running.base_url}/body/{name}")
    finally:
        await http.aclose()


ENCODINGS = ["gzip", "deflate", "br", "zstd", "gzip, br", "br, gzip", "zstd, gzip", "deflate, zstd"]


# ------------------------------------------------------------------------------------ bombs


@pytest.mark.parametrize("content_encoding", ENCODINGS)
async def test_a_decompression_bomb_is_stopped_at_the_cap_without_expanding_it(server, content_encoding):
    app, running = server
    body = bomb(content_encoding)
    assert len(body) < 100_000  # a few kB on the wire...
    app.bodies["bomb"] = (body, content_encoding)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        with pytest.raises(CapExceeded) as info:
            await fetch(running, "bomb")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(info.value) == (
        f"{running.base_url}/body/bomb: body exceeds the cap of {CAP} bytes once decoded "
        f"(content encoding {content_encoding}); stopped decoding"
    )
    # ...64 MiB decoded: never held. What was: one decoder's output up to the cap, and its join
    # (about 2.3 MB here; decoding whole chunks as httpx does took 67 to 148 MB)
    assert peak < 3 * CAP, f"{peak} bytes allocated while decoding"


@pytest.mark.parametrize("content_encoding", ENCODINGS)
def test_no_decoder_produces_more_than_the_cap_and_one_piece(content_encoding):
    body = CappedBody(httpx.URL("http://bomb.test/"), content_encoding.split(", "), CAP)
    raw = bomb(content_encoding)
    with pytest.raises(CapExceeded, match="once decoded"):
        for start in range(0, len(raw), 16 * 1024):
            body.feed(raw[start : start + 16 * 1024])
    assert max(body.produced) > CAP  # the stage that went over
    assert all(produced <= CAP + SLACK for produced in body.produced), body.produced


# ------------------------------------------------------------------------------------ decoding


@pytest.mark.parametrize("content_encoding", ["identity", *ENCODINGS])
async def test_every_encoding_and_stack_of_them_decodes_to_the_body(server, content_encoding):
    app, running = server
    text = b"Herons eat fish. " * 1000
    data = text if content_encoding == "identity" else encoded(text, content_encoding)
    app.bodies["ok"] = (data, content_encoding)
    response = await fetch(running, "ok")
    assert response.body == text
    assert response.header("content-encoding") == content_encoding


@pytest.mark.parametrize("content_encoding", ["gzip", "br", "zstd", "gzip, br"])
async def test_a_body_of_exactly_the_cap_passes_and_one_byte_more_fails(server, content_encoding):
    app, running = server
    app.bodies["exact"] = (encoded(b"a" * CAP, content_encoding), content_encoding)
    app.bodies["over"] = (encoded(b"a" * (CAP + 1), content_encoding), content_encoding)
    assert (await fetch(running, "exact")).body == b"a" * CAP
    with pytest.raises(CapExceeded, match=f"exceeds the cap of {CAP} bytes once decoded"):
        await fetch(running, "over")


async def test_raw_deflate_without_the_zlib_wrapper_is_decoded_too(server):
    app, running = server
    packer = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    app.bodies["raw"] = (packer.compress(b"no zlib header") + packer.flush(), "deflate")
    assert (await fetch(running, "raw")).body == b"no zlib header"


async def test_concatenated_zstd_frames_are_all_decoded(server):
    app, running = server
    frames = zstandard.ZstdCompressor().compress(b"first ") + zstandard.ZstdCompressor().compress(b"second")
    app.bodies["frames"] = (frames, "zstd")
    assert (await fetch(running, "frames")).body == b"first second"


@pytest.mark.parametrize("content_encoding", ["gzip", "deflate", "br", "zstd"])
async def test_a_body_that_is_not_in_its_encoding_fails_naming_it(server, content_encoding):
    app, running = server
    app.bodies["garbage"] = (b"this is not compressed at all", content_encoding)
    with pytest.raises(FetchFailed, match=f"/body/garbage: body is not valid {content_encoding} data"):
        await fetch(running, "garbage")


async def test_an_unknown_encoding_passes_through_undecoded_as_httpx_does(server):
    app, running = server
    app.bodies["odd"] = (b"plain bytes", "x-unheard-of")
    assert (await fetch(running, "odd")).body == b"plain bytes"


async def test_an_encoding_without_a_capped_decoder_here_is_refused_not_expanded(server, monkeypatch):
    app, running = server
    monkeypatch.delitem(tools_http._DECODERS, "br")  # as with a brotli older than 1.2, or none
    app.bodies["br"] = (encoded(b"hello", "br"), "br")
    with pytest.raises(FetchFailed, match="content encoding 'br' cannot be decoded within the byte cap"):
        await fetch(running, "br")


async def test_every_encoding_httpx_accepts_is_decoded_under_the_cap_and_asked_for(server):
    app, running = server
    assert set(httpx._decoders.SUPPORTED_DECODERS) <= set(tools_http._DECODERS)
    app.bodies["plain"] = (b"x", "identity")
    await fetch(running, "plain")
    assert app.accept_encoding[-1] == "gzip, deflate, br, zstd"
