"""The local server behind `atelier view RUN_DIR` (starlette on uvicorn, loopback by default).

It serves what `--static` writes, at the same paths (`/index.html`, `/episodes/<page>.html`),
rendered from the run folder on each request: a run still in progress shows its newest episodes
on reload. An unknown path is a 404.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from atelier.runs.reading.view import EPISODES_DIR, RunViewData, render_episode, render_index


def view_app(run_dir: str | Path):
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse
    from starlette.routing import Route

    RunViewData(run_dir)  # a folder that is no run is refused before the server starts

    async def index(request: Request) -> HTMLResponse:
        return HTMLResponse(render_index(RunViewData(run_dir)))

    async def report(request: Request):
        path = Path(run_dir) / "report.html"
        if not path.exists():
            return PlainTextResponse(f"{path} has not been written yet", status_code=404)
        return HTMLResponse(path.read_text(encoding="utf-8"))

    async def episode(request: Request):
        html = render_episode(RunViewData(run_dir), request.path_params["page"])
        if html is None:
            return PlainTextResponse(f"no episode page {request.path_params['page']!r} in this run", status_code=404)
        return HTMLResponse(html)

    return Starlette(
        routes=[
            Route("/", lambda request: RedirectResponse("/index.html")),
            Route("/index.html", index),
            Route("/report.html", report),
            Route(f"/{EPISODES_DIR}/{{page}}", episode),
        ]
    )


def serve(run_dir: str | Path, host: str, port: int, say: Callable[[str], None] = print) -> None:
    """Serve the view; `say` is told where once the run folder has been found to be one."""
    import uvicorn

    app = view_app(run_dir)
    say(f"serving {run_dir} at http://{host}:{port}/index.html (Ctrl-C stops)")
    uvicorn.run(app, host=host, port=port, log_level="warning")
