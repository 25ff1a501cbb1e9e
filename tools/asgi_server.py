"""Serve an ASGI app with uvicorn on loopback: blocking (the CLI) or on a daemon thread (tests, runs).

The socket is bound when the server is made, so its base URL (and an ephemeral port) is known
before it serves.
"""

from __future__ import annotations

import threading
import time
from typing import Literal

from atelier.benchmarks.common.errors import AtelierError
from atelier.benchmarks.common.loopback import bind_socket

STARTUP_TIMEOUT_S = 15.0


def _with_header_deadline(protocol: type, seconds: float) -> type:
    """uvicorn's HTTP protocol, closing a connection whose next request's headers have not all arrived
    within `seconds` of its first byte (or of the connection's start): an idle or half-sent request
    holds no connection. (uvicorn times out nothing before a request's headers are complete.)"""

    class HeaderDeadline(protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._header_timer = self.loop.call_later(seconds, self._headers_too_slow)

        def _between_requests(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def data_received(self, data: bytes) -> None:
            if self._header_timer is None and self._between_requests():
                self._header_timer = self.loop.call_later(seconds, self._headers_too_slow)
            super().data_received(data)
            if self._header_timer is not None and not self._between_requests():
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self._between_requests() and not self.transport.is_closing():
                self.transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None
            super().connection_lost(exc)

    return HeaderDeadline


class AsgiServer:
    def __init__(
        self,
        app,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        lifespan: Literal["auto", "on", "off"] = "off",
        header_timeout_s: float | None = None,
    ) -> None:
        """`lifespan="on"` runs the app's startup and shutdown (apps holding background tasks);
        `header_timeout_s`: how long a request's headers may take to arrive (None: no limit)."""
        import uvicorn

        self._socket = bind_socket(host, port)
        self.host = host
        self.port = int(self._socket.getsockname()[1])
        # log_config=None: leave the process's logging set-up alone (uvicorn would install its own)
        config = uvicorn.Config(app, log_config=None, log_level="warning", access_log=False, lifespan=lifespan)
        if header_timeout_s is not None:
            config.load()  # picks the HTTP protocol (httptools or h11) that the deadline wraps
            config.http_protocol_class = _with_header_deadline(config.http_protocol_class, header_timeout_s)
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def host_port(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"http://{self.host_port}"

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted (Ctrl-C)."""
        try:
            self._server.run(sockets=[self._socket])
        finally:
            self._socket.close()

    def start(self) -> AsgiServer:
        """Serve on a daemon thread; returns once the server accepts connections."""
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name=f"asgi-{self.port}", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise AtelierError(f"the server on {self.base_url} did not start")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=STARTUP_TIMEOUT_S)
            self._thread = None
        self._socket.close()

    def __enter__(self) -> AsgiServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
