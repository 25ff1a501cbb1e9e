"""The URL guard and the caps: SSRF refusals (before any connection), redirects, bytes and time."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
import time

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from atelier.benchmarks.common.errors import ConfigError
from atelier.tools.asgi_server import AsgiServer
from atelier.tools.caps import FetchCaps
from atelier.tools.config import WebConfig
from atelier.tools.errors import CapExceeded, FetchFailed, FetchRefused
from atelier.tools.http import GuardedHttp
from atelier.tools.url_guard import AllowList, UrlGuard, address_problem
from atelier.tools.web import build_web

FIFTY_MB = 50 * 1024 * 1024
CHUNK = 64 * 1024


class CountingApp:
    """A tiny web server for the tests: redirects, a 50 MB body, a page; counts what it served."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self.seen_headers: list[dict[str, str]] = []
        self.redirect_targets: dict[str, str] = {}

    def app(self) -> Starlette:
        async def page(request: Request) -> Response:
            self.hits.append(request.url.path)
            self.seen_headers.append(dict(request.headers))
            return PlainTextResponse("hello from the allowed host")

        async def redirect(request: Request) -> Response:
            self.hits.append(request.url.path)
            return RedirectResponse(self.redirect_targets[request.path_params["name"]], status_code=302)

        async def raw_redirect(request: Request) -> Response:
            """A Location header of raw UTF-8 bytes, as a server may send it."""
            response = Response(status_code=302)
            response.raw_headers.append((b"location", self.redirect_targets[request.path_params["name"]].encode()))
            return response

        async def loop(request: Request) -> Response:
            return RedirectResponse("/loop", status_code=302)

        async def huge_declared(request: Request) -> Response:
            return Response(b"x" * 10, headers={"content-length": str(FIFTY_MB)}, media_type="text/plain")

        async def echo(request: Request) -> Response:
            self.seen_headers.append(dict(request.headers))
            return JSONResponse({"ok": True})

        return Starlette(
            routes=[
                Route("/page", page),
                Route("/final", page),
                Route("/redirect/{name}", redirect),
                Route("/raw-redirect/{name}", raw_redirect),
                Route("/loop", loop),
                Route("/huge-declared", huge_declared),
                Route("/echo", echo, methods=["GET", "POST"]),
            ]
        )


def listening() -> tuple[socket.socket, int]:
    """A socket listening on a free loopback port, and the port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock, sock.getsockname()[1]


class RawServer:
    """A socket server that misbehaves after accepting: says nothing, drips a byte at a time
    forever, or floods a 50 MB body (counting what the kernel actually took from it) — or only
    listens, counting the bytes it receives ("count")."""

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.sock, self.port = listening()
        self.stop = threading.Event()
        self.accepted = 0
        self.bytes_sent = 0
        self.received = 0
        self.finished = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        held = []
        while not self.stop.is_set():
            try:
                connection, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted += 1
            held.append(connection)
            if self.behaviour != "silent":
                talk = self._listen if self.behaviour == "count" else self._talk
                threading.Thread(target=talk, args=(connection,), daemon=True).start()
        for connection in held:
            connection.close()

    def _listen(self, connection: socket.socket) -> None:
        try:
            while chunk := connection.recv(65536):
                self.received += len(chunk)
        except OSError:
            pass

    def _talk(self, connection: socket.socket) -> None:
        try:
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n")
            chunk = b"<" if self.behaviour == "drip" else b"x" * CHUNK
            while not self.stop.is_set() and self.bytes_sent < FIFTY_MB:
                connection.sendall(chunk)
                self.bytes_sent += len(chunk)
                if self.behaviour == "drip":
                    time.sleep(0.05)
        except OSError:  # the client hung up: what we want to see
            pass
        finally:
            self.finished.set()

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.fixture(scope="module")
def server():
    counting = CountingApp()
    with AsgiServer(counting.app()) as running:
        yield counting, running


@pytest.fixture(scope="module")
def bystander():
    """A loopback server that is NOT allow-listed: nothing may ever reach it."""
    counting = CountingApp()
    with AsgiServer(counting.app()) as running:
        yield counting, running


def web_config(*allow: str, **caps) -> WebConfig:
    return WebConfig(
        provider="searxng",
        provider_options={"base_url": "http://search.invalid"},
        mode="live",
        allow_hosts=list(allow),
        caps=FetchCaps(**caps),
    )


class RecordingTransport(httpx.AsyncBaseTransport):
    """Stands in for the network: records every request that would have left the process."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(200, text="should never be reached")


# ------------------------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1/", "loopback"),
        ("http://127.8.9.10:8080/admin", "loopback"),
        ("http://10.0.0.1/", "private"),
        ("http://10.255.255.254/internal", "private"),
        ("http://192.168.1.1/router", "private"),
        ("http://172.16.0.5/", "private"),
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://[::1]/", "loopback"),
        ("http://[::ffff:127.0.0.1]/", "loopback"),
        ("http://[fe80::1]/", "link-local"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://100.64.0.1/", "not globally routable"),
        ("http://[fec0::1]/", "site-local"),
        ("http://[2002:7f00:1::]/", r"6to4-embedded loopback \(127.0.0.1\)"),
        ("http://[64:ff9b::a9fe:a9fe]/latest/meta-data/", r"NAT64-embedded link-local \(169.254.169.254\)"),
        ("file:///etc/passwd", "scheme 'file'"),
        ("ftp://example.org/file", "scheme 'ftp'"),
        ("gopher://example.org/", "scheme 'gopher'"),
    ],
)
async def test_private_loopback_link_local_and_non_http_urls_are_refused_before_any_request(url, reason):
    transport = RecordingTransport()
    async with build_web(web_config(), transport=transport) as web:
        with pytest.raises(FetchRefused, match=reason):
            await web.fetch(url)
    assert transport.requests == []


@pytest.mark.parametrize("host", ["localhost", "2130706433"])  # names that resolve to 127.0.0.1
async def test_host_names_are_resolved_and_every_address_checked(host, bystander):
    bystander_app, other = bystander
    port = other.base_url.rsplit(":", 1)[1]
    async with build_web(web_config()) as web:
        with pytest.raises(FetchRefused, match=f"refused http://{host}:{port}/page: {host} is at .*loopback"):
            await web.fetch(f"http://{host}:{port}/page")
    assert bystander_app.hits == []


async def test_the_refusal_names_the_allow_list_entry_that_would_permit_it():
    async with build_web(web_config(), transport=RecordingTransport()) as web:
        with pytest.raises(FetchRefused, match=r'allow_hosts = \["10.1.2.3:8080"\]'):
            await web.fetch("http://10.1.2.3:8080/x")


async def test_allow_listed_loopback_host_is_fetched(server):
    counting, running = server
    async with build_web(web_config(running.host_port)) as web:
        page = await web.fetch(f"{running.base_url}/page")
    assert page.text == "hello from the allowed host"
    assert page.content_type == "text/plain"


async def test_the_same_host_on_another_port_is_not_allow_listed(server, bystander):
    _, running = server
    bystander_app, other = bystander
    async with build_web(web_config(running.host_port)) as web:
        with pytest.raises(FetchRefused, match="loopback"):
            await web.fetch(f"{other.base_url}/page")
    assert bystander_app.hits == []


# ------------------------------------------------------------------------------------ redirects


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ("http://10.1.2.3/secret", "private"),
        ("http://169.254.169.254/latest/meta-data/iam", "link-local"),
        ("http://[::1]:9/", "loopback"),
        ("file:///etc/passwd", "scheme 'file'"),
    ],
)
async def test_a_redirect_from_an_allowed_host_to_a_private_one_is_refused(server, target, reason):
    counting, running = server
    counting.redirect_targets["away"] = target
    async with build_web(web_config(running.host_port)) as web:
        with pytest.raises(FetchRefused, match=reason):
            await web.fetch(f"{running.base_url}/redirect/away")


@pytest.mark.parametrize(
    "target", ["javascript:alert(1)", "data:text/html,<script>alert(1)</script>", "JavaScript:void(0)"]
)
async def test_a_redirect_to_a_javascript_or_data_url_is_refused_naming_the_url(server, target):
    counting, running = server
    counting.redirect_targets["script"] = target
    async with build_web(web_config(running.host_port)) as web:
        with pytest.raises(FetchRefused, match=f"refused the redirect from {running.base_url}/redirect/script"):
            await web.fetch(f"{running.base_url}/redirect/script")


async def test_a_redirect_to_a_javascript_url_with_a_slash_path_is_refused_by_scheme(server):
    counting, running = server
    counting.redirect_targets["script"] = "javascript://%0aalert(1)"
    async with build_web(web_config(running.host_port)) as web:
        with pytest.raises(FetchRefused, match=r"refused javascript://%0aalert\(1\): scheme 'javascript'"):
            await web.fetch(f"{running.base_url}/redirect/script")


async def test_a_redirect_to_a_loopback_bystander_never_reaches_it(server, bystander):
    counting, running = server
    bystander_app, other = bystander
    counting.redirect_targets["bystander"] = f"{other.base_url}/page"
    async with build_web(web_config(running.host_port)) as web:
        with pytest.raises(FetchRefused):
            await web.fetch(f"{running.base_url}/redirect/bystander")
    assert bystander_app.hits == []


@pytest.mark.parametrize("route", ["redirect", "raw-redirect"])
@pytest.mark.parametrize(
    "target",
    [
        "http://ｌｏｃａｌｈｏｓｔ/secret",  # fullwidth: NFKC folds it to localhost
        "http://ｌｏｃａｌｈｏｓｔ:{port}/page",
        "http://１２７．０．０．１:{port}/page",
        "http://xn--localhost-.example/",
        "http://exa\u200dmple.com/",  # a zero-width joiner: IDNA refuses it
        "http://a..b/",
        "http://" + "a" * 70 + ".example/",  # a label longer than IDNA allows
    ],
)
async def test_a_redirect_to_a_host_idna_cannot_encode_is_refused_naming_it(server, route, target):
    counting, running = server
    counting.redirect_targets["idna"] = target.format(port=running.port)
    pages_before = counting.hits.count("/page")
    async with build_web(web_config(running.host_port)) as web:
        with pytest.raises((FetchRefused, FetchFailed)) as refused:
            await web.fetch(f"{running.base_url}/{route}/idna")
    if "\u200d" not in target:  # (that one is a name no resolver knows: refused as unresolved)
        assert f"{running.base_url}/{route}/idna" in str(refused.value)
    assert counting.hits.count("/page") == pages_before  # the loopback page behind the fullwidth name: never reached


async def test_redirects_within_the_allowed_host_are_followed_and_recorded(server):
    counting, running = server
    counting.redirect_targets["home"] = "/final"
    async with build_web(web_config(running.host_port)) as web:
        page = await web.fetch(f"{running.base_url}/redirect/home")
    assert page.final_url == f"{running.base_url}/final"
    assert page.text == "hello from the allowed host"


async def test_redirect_loops_stop_at_the_cap(server):
    _, running = server
    async with build_web(web_config(running.host_port, max_redirects=3)) as web:
        with pytest.raises(CapExceeded, match="more than 3 redirects"):
            await web.fetch(f"{running.base_url}/loop")


async def test_credential_headers_are_not_forwarded_to_another_origin(server, bystander):
    counting, running = server
    bystander_app, other = bystander
    counting.redirect_targets["cross"] = f"{other.base_url}/echo"
    http = GuardedHttp(UrlGuard(AllowList([running.host_port, other.host_port])), FetchCaps())
    try:
        await http.request("GET", f"{running.base_url}/redirect/cross", headers={"X-API-KEY": "secret-key"})
        await http.request("GET", f"{other.base_url}/echo", headers={"X-API-KEY": "direct"})
    finally:
        await http.aclose()
    assert [headers.get("x-api-key") for headers in bystander_app.seen_headers[-2:]] == [None, "direct"]


# ------------------------------------------------------------------------------------ caps


async def test_a_50_mb_body_is_cut_off_at_the_byte_cap():
    flood = RawServer("flood")
    try:
        started = time.monotonic()
        async with build_web(web_config(f"127.0.0.1:{flood.port}", max_bytes=1_000_000)) as web:
            with pytest.raises(CapExceeded, match="exceeds the cap of 1000000 bytes"):
                await web.fetch(f"http://127.0.0.1:{flood.port}/")
        elapsed = time.monotonic() - started
        assert await asyncio.to_thread(flood.finished.wait, 5)
    finally:
        flood.close()
    assert elapsed < 5
    # what the kernel took before we hung up: the cap plus socket buffers, far from 50 MB
    assert flood.bytes_sent < FIFTY_MB // 4


async def test_a_declared_50_mb_body_is_refused_without_reading_it(server):
    _, running = server
    async with build_web(web_config(running.host_port, max_bytes=1_000_000)) as web:
        with pytest.raises(CapExceeded, match="body of 52428800 bytes exceeds the cap"):
            await web.fetch(f"{running.base_url}/huge-declared")


@pytest.mark.parametrize("behaviour", ["silent", "drip"], ids=["never-answers", "drips-forever"])
async def test_a_server_that_never_finishes_is_cut_off_at_the_time_cap(behaviour):
    silent = RawServer(behaviour)
    try:
        started = time.monotonic()
        async with build_web(web_config(f"127.0.0.1:{silent.port}", timeout_s=0.6)) as web:
            with pytest.raises(CapExceeded, match="no complete response within 0.6s"):
                await web.fetch(f"http://127.0.0.1:{silent.port}/")
        elapsed = time.monotonic() - started
    finally:
        silent.close()
    assert silent.accepted == 1
    assert 0.5 < elapsed < 2.0


class HangsUpOnReuse:
    """A keep-alive server that answers the first `answers` requests of each connection and closes
    the connection when the next one arrives, unanswered: the moment a server's keep-alive timer
    fires just as the client sends on the idle connection. Records (connection, method) per request."""

    def __init__(self, answers: int) -> None:
        self.answers = answers
        self.sock, self.port = listening()
        self.requests: list[tuple[int, str]] = []
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.sock.accept()
            except OSError:  # closed
                return
            self.connections += 1
            threading.Thread(target=self._talk, args=(connection, self.connections), daemon=True).start()

    def _talk(self, connection: socket.socket, number: int) -> None:
        with connection:
            pending, answered = b"", 0
            while True:
                while b"\r\n\r\n" not in pending:
                    chunk = connection.recv(65536)
                    if not chunk:
                        return
                    pending += chunk
                head, _, pending = pending.partition(b"\r\n\r\n")
                self.requests.append((number, head.split(b" ", 1)[0].decode()))
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                while len(pending) < length:
                    pending += connection.recv(65536)
                pending = pending[length:]
                if answered == self.answers:
                    return  # hung up, unanswered
                answered += 1
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok")

    def close(self) -> None:
        self.sock.close()


async def test_a_get_whose_kept_alive_connection_is_closed_under_it_is_sent_once_more_on_a_new_one():
    server = HangsUpOnReuse(answers=1)
    http = GuardedHttp(UrlGuard(AllowList([f"127.0.0.1:{server.port}"])), FetchCaps())
    url = f"http://127.0.0.1:{server.port}/page"
    try:
        first = await http.request("GET", url)
        second = await http.request("GET", url)  # on the first connection, which the server then closes
        with pytest.raises(FetchFailed, match=f"{url}: (RemoteProtocolError|ReadError|WriteError)"):
            await http.request("POST", url, json={"a": 1})  # not idempotent: never sent twice
    finally:
        await http.aclose()
        server.close()
    assert (first.status, first.body, second.status, second.body) == (200, b"ok", 200, b"ok")
    assert server.requests == [(1, "GET"), (1, "GET"), (2, "GET"), (2, "POST")]


async def test_a_get_that_no_connection_answers_fails_after_one_more_try():
    server = HangsUpOnReuse(answers=0)
    http = GuardedHttp(UrlGuard(AllowList([f"127.0.0.1:{server.port}"])), FetchCaps())
    url = f"http://127.0.0.1:{server.port}/page"
    try:
        with pytest.raises(FetchFailed, match=f"{url}: (RemoteProtocolError|ReadError)"):
            await http.request("GET", url)
    finally:
        await http.aclose()
        server.close()
    assert server.requests == [(1, "GET"), (2, "GET")]


# ------------------------------------------------------------------------------------ units


@given(
    st.sampled_from(
        ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "127.0.0.0/8", "169.254.0.0/16", "fc00::/7", "fe80::/10"]
    ),
    st.integers(min_value=0),
)
def test_every_address_of_a_private_range_has_a_problem(network, offset):
    net = ipaddress.ip_network(network)
    address = net.network_address + offset % net.num_addresses
    assert address_problem(address) is not None


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "1.1.1.1",
        "93.184.216.34",
        "2606:4700:4700::1111",
        "2002:808:808::1",  # 6to4 for the public 8.8.8.8
    ],
)
def test_public_addresses_pass(address):
    assert address_problem(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        ("fec0::1", "site-local"),
        ("feff:ffff::1", "site-local"),  # the top of fec0::/10
        ("2002:7f00:1::", "6to4-embedded loopback (127.0.0.1)"),
        ("2002:a00:1::1", "6to4-embedded private (10.0.0.1)"),
        ("2002:a9fe:a9fe::", "6to4-embedded link-local (169.254.169.254)"),
        ("2002:c0a8:101:1::", "6to4-embedded private (192.168.1.1)"),
        ("2002::", "6to4-embedded unspecified (0.0.0.0)"),
        # Teredo hides the client's address inverted: this one is 127.0.0.1 behind a public server
        ("2001:0:808:808:0:0:80ff:fffe", "Teredo-embedded loopback (127.0.0.1)"),
        ("2001:0:a00:1::f7f7:f7f7", "Teredo-embedded private (10.0.0.1)"),  # a private Teredo server
        ("64:ff9b::7f00:1", "NAT64-embedded loopback (127.0.0.1)"),
        ("64:ff9b::c0a8:101", "NAT64-embedded private (192.168.1.1)"),
        ("64:ff9b::808:808", "reserved"),  # a public IPv4 through NAT64: still no public IPv6 address
    ],
)
def test_ipv6_addresses_that_reach_a_private_ipv4_or_a_private_site_are_refused(address, problem):
    assert address_problem(ipaddress.ip_address(address)) == problem


@given(st.integers(min_value=0, max_value=2**80 - 1), st.sampled_from(["127.0.0.0/8", "10.0.0.0/8", "169.254.0.0/16"]))
def test_every_6to4_address_of_a_private_ipv4_has_a_problem(suffix, network):
    net = ipaddress.ip_network(network)
    ipv4 = int(net.network_address) + suffix % net.num_addresses
    assert address_problem(ipaddress.IPv6Address((0x2002 << 112) | (ipv4 << 80) | suffix)) is not None


def test_allow_list_entries_match_host_and_port():
    allow = AllowList(["127.0.0.1:8080", "[::1]:9000", "fe80::1", "Intranet.Example"])
    assert allow.permits("127.0.0.1", 8080) and not allow.permits("127.0.0.1", 8081)
    assert allow.permits("::1", 9000) and not allow.permits("::1", 80)
    assert allow.permits("fe80::1", 443)
    assert allow.permits("intranet.example", 443)
    with pytest.raises(ConfigError, match="allow_hosts"):
        AllowList(["http://x.example/path"])


# ------------------------------------------------------------------------------------ DNS rebinding


PUBLIC_ADDRESS = "93.184.216.34"


@pytest.fixture
def fake_dns(monkeypatch):
    """A resolver for made-up names: each name maps to a list of answers, one per lookup (the last
    repeats); other names resolve for real. Every lookup of a made-up name is recorded."""
    answers: dict[str, list[str]] = {}
    lookups: list[str] = []
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        name = host.decode() if isinstance(host, bytes) else host
        if name not in answers:
            return real(host, port, *args, **kwargs)
        lookups.append(name)
        address = answers[name][min(lookups.count(name), len(answers[name])) - 1]
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, int(port or 0)))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return answers, lookups


@pytest.fixture
def no_internet(monkeypatch):
    """Connections to anything but loopback fail at once (tests never reach the internet). Records
    the host each connection was asked for, and the TLS server name of each handshake."""
    import httpcore

    seen: dict[str, list[str]] = {"connect": [], "sni": []}
    real_connect = httpcore.AnyIOBackend.connect_tcp

    async def connect_tcp(self, host, port, *args, **kwargs):
        seen["connect"].append(host)
        try:
            public = not ipaddress.ip_address(host).is_loopback
        except ValueError:  # a name: resolved by the backend itself
            public = False
        if public:
            raise httpcore.ConnectError(f"no route to {host} in tests")
        stream = await real_connect(self, host, port, *args, **kwargs)
        real_start_tls = stream.start_tls

        async def start_tls(ssl_context, server_hostname=None, timeout=None):
            seen["sni"].append(server_hostname)
            return await real_start_tls(ssl_context, server_hostname=server_hostname, timeout=timeout)

        stream.start_tls = start_tls
        return stream

    monkeypatch.setattr(httpcore.AnyIOBackend, "connect_tcp", connect_tcp)
    return seen


async def test_a_name_that_rebinds_to_loopback_gets_not_one_byte(fake_dns, no_internet):
    answers, lookups = fake_dns
    answers["rebind.example"] = [PUBLIC_ADDRESS, "127.0.0.1"]  # public when checked, loopback after
    target = RawServer("count")
    try:
        async with build_web(web_config(connect_timeout_s=1, timeout_s=3)) as web:
            with pytest.raises(FetchFailed):
                await web.fetch(f"http://rebind.example:{target.port}/secret")
        await asyncio.sleep(0.2)
    finally:
        target.close()
    assert (target.accepted, target.received) == (0, 0)
    assert lookups == ["rebind.example"]  # resolved once; that checked address is the one dialled
    assert no_internet["connect"] == [PUBLIC_ADDRESS]


async def test_a_name_resolving_to_loopback_is_refused_before_connecting(fake_dns, no_internet):
    answers, _ = fake_dns
    answers["inside.example"] = ["127.0.0.1"]
    target = RawServer("count")
    try:
        async with build_web(web_config()) as web:
            with pytest.raises(FetchRefused, match=r"inside.example is at 127.0.0.1, a loopback address"):
                await web.fetch(f"http://inside.example:{target.port}/")
    finally:
        target.close()
    assert target.accepted == 0 and no_internet["connect"] == []


async def test_a_pinned_connection_keeps_the_name_as_host_header_and_tls_server_name(server, fake_dns, no_internet):
    counting, running = server
    answers, lookups = fake_dns
    answers["pinned.example"] = ["127.0.0.1"]
    port = running.base_url.rsplit(":", 1)[1]
    async with build_web(web_config(f"pinned.example:{port}")) as web:
        page = await web.fetch(f"http://pinned.example:{port}/page")
        assert page.text == "hello from the allowed host"
        assert counting.seen_headers[-1]["host"] == f"pinned.example:{port}"
        assert no_internet["connect"] == ["127.0.0.1"]
        with pytest.raises(FetchFailed):  # the sandbox speaks no TLS; the handshake is what we look at
            await web.fetch(f"https://pinned.example:{port}/page")
    assert no_internet["sni"] == ["pinned.example"]
    assert lookups == ["pinned.example", "pinned.example"]
