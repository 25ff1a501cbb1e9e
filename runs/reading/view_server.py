"""The local server behind `atelier view RUN_DIR` (starlette on uvicorn, loopback by default).

It serves what `--static` writes, at the same paths (`/index.html`, `/episodes/<page>.html`),
rendered from the run folder on each request: a run still in progress shows its newest episodes
on reload. An unknown path is a 404.

Its pages show every prompt and answer of a run, so it guards them as `gateway serve` guards its
endpoint, with the same `RequestGuard`: it answers only a Host header that names its own loopback
address (a DNS-rebinding page, which reaches it under its own name, gets a 403), an `Origin` must
be a loopback one, and it listens beyond this machine only with `public` (`--public`: then any Host
is answered). Every answer forbids framing (`X-Frame-Options`, `frame-ancestors`) and, by its
Content-Security-Policy, loading or sending anything beyond this server: the pages' own inline
scripts and styles run, nothing fetches. The files it serves from the folder (`report.html`) are
regular files of the run folder opened without following a link (`no_follow`) and at most
`MAX_FILE_BYTES`: a link planted there to `/proc/self/environ` or `/dev/zero` is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.errors import AtelierError, ConfigError
from atelier.runs.reading.view import EPISODES_DIR, RunViewData, render_episode, render_index

MAX_FILE_BYTES = 64 * 2**20
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' data:; "
        "connect-src 'none'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cross-origin-resource-policy": "same-origin",
}


def _run_file(path: Path) -> str | None:
    """A regular file of the run folder (never through a link, at most `MAX_FILE_BYTES`), or None."""
    try:
        with no_follow.open_file(path, "rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return None
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(f"{path}: larger than the viewer serves ({MAX_FILE_BYTES} bytes)")
    return data.decode("utf-8", errors="replace")


class SecurityHeaders:
    """ASGI middleware: `headers` (default `SECURITY_HEADERS`) on every response."""

    def __init__(self, app, headers: dict[str, str] | None = None) -> None:
        self.app = app
        self.headers = SECURITY_HEADERS if headers is None else headers

    async def __call__(self, scope, receive, send) -> None:
        async def with_headers(message) -> None:
            if message["type"] == "http.response.start":
                names = {name.lower() for name, _ in message.get("headers", [])}
                message["headers"] = [
                    *message.get("headers", []),
                    *((k.encode(), v.encode()) for k, v in self.headers.items() if k.encode() not in names),
                ]
            await send(message)

        await self.app(scope, receive, with_headers)


def view_app(run_dir: str | Path, hosts: frozenset[str] | None):
    """The view's app; `hosts`: the Host headers it answers (None: any, for `--public`)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse
    from starlette.routing import Route

    from atelier.agents.models.openai_api import RequestGuard

    RunViewData(run_dir)  # a folder that is no run is refused before the server starts

    async def index(request: Request) -> HTMLResponse:
        return HTMLResponse(render_index(RunViewData(run_dir)))

    async def report(request: Request):
        path = Path(run_dir) / "report.html"
        try:
            html = _run_file(path)
        except AtelierError as exc:  # a link, a FIFO, a device, a huge file in its place
            return PlainTextResponse(str(exc), status_code=403)
        if html is None:
            return PlainTextResponse(f"{path} has not been written yet", status_code=404)
        return HTMLResponse(html)

    async def episode(request: Request):
        html = render_episode(RunViewData(run_dir), request.path_params["page"])
        if html is None:
            return PlainTextResponse(f"no episode page {request.path_params['page']!r} in this run", status_code=404)
        return HTMLResponse(html)

    app = Starlette(
        routes=[
            Route("/", lambda request: RedirectResponse("/index.html")),
            Route("/index.html", index),
            Route("/report.html", report),
            Route(f"/{EPISODES_DIR}/{{page}}", episode),
        ]
    )
    app.add_middleware(RequestGuard, hosts=hosts, max_body_bytes=1)  # the view takes no request bodies
    app.add_middleware(SecurityHeaders)  # outermost: the guard's refusals carry the headers too
    return app


def serve(
    run_dir: str | Path, host: str, port: int, say: Callable[[str], None] = print, *, public: bool = False
) -> None:
    """Serve the view; `say` is told where once the run folder has been found to be one."""
    from atelier.agents.models.openai_api import checked_host, loopback_hosts
    from atelier.tools.asgi_server import AsgiServer

    checked_host(host, public, "the view shows every prompt and answer of the run")
    hosts: frozenset[str] | None = None
    if not public:
        named = f"[{host}]" if ":" in host and not host.startswith("[") else host
        hosts = loopback_hosts(port) | {f"{named.lower()}:{port}"}
    app = view_app(run_dir, hosts)
    server = AsgiServer(app, host, port)
    say(f"serving {run_dir} at {server.base_url}/index.html (Ctrl-C stops)")
    server.serve_forever()
