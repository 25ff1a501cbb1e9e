"""`atelier view RUN_DIR`: a run in the browser (a local server, or `--static DIR` written as files)."""

from __future__ import annotations

from pathlib import Path

import typer


def view(
    run_dir: Path = typer.Argument(..., help="A run folder (runs/out/<run_id>)."),
    static: Path | None = typer.Option(
        None,
        "--static",
        help="Write the view into this folder (index.html + one page per episode) instead of serving it; "
        "RUN_DIR/view is where report.html links to.",
    ),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="The server's address: a loopback one (others need --public)."
    ),
    port: int = typer.Option(8765, "--port", min=1, max=65535, help="The server's port."),
    public: bool = typer.Option(
        False,
        "--public",
        help="Allow a non-loopback --host: whoever reaches it reads every prompt and answer; the Host header is then "
        "not checked.",
    ),
) -> None:
    """Every episode of a run in the browser, filterable by system, judge, score and degraded kind; per
    episode its steps on a timeline, each model call's prompt, answer, tokens, latency and cache hit,
    the state change per step and the judges' details."""
    if static is not None:
        from atelier.runs.reading.view import write_static

        typer.echo(str(write_static(run_dir, static)))
        return
    from atelier.runs.reading.view_server import serve

    serve(run_dir, host, port, say=lambda line: typer.echo(line, err=True), public=public)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("view")(view)
