"""`atelier model serve|check` (the local model, and probing a recipe's models) and `atelier bench model`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer

from atelier.runs.cli._common import machine_facts, print_json

MODEL_HELP = "Use this model for every role (any litellm provider string, `local/smollm2`, or `scripted`)."


def _recipe(recipe: Path | None, model: str | None, api_base: str | None, api_key: str | None):
    """The recipe (or the embedded quickstart when none is named) with command-line model overrides."""
    from atelier.runs.folder.recipe import load_recipe

    return load_recipe(recipe or "quickstart").with_overrides(model=model, api_base=api_base, api_key=api_key)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    model_app = typer.Typer(help="Models: serve the local one, probe a recipe's.", no_args_is_help=True)
    app.add_typer(model_app, name="model")

    @model_app.command("serve")
    def serve(
        gguf: Path | None = typer.Option(
            None, "--gguf", help="A GGUF file (default: the bundled SmolLM2-135M-Instruct)."
        ),
        port: int = typer.Option(0, "--port", help="0 picks a free port."),
        host: str = typer.Option("127.0.0.1", "--host"),
        n_ctx: int = typer.Option(8192, "--n-ctx", help="Context window in tokens."),
        threads: int | None = typer.Option(
            None, "--threads", help="llama.cpp threads (default: half the usable cores)."
        ),
    ) -> None:
        """Serve a local GGUF model with an OpenAI-compatible API (llama.cpp) until Ctrl-C."""
        from atelier.agents.models.local_model import parse_local_model, serve_on_socket
        from atelier.benchmarks.common.loopback import bind_socket

        model = f"local?gguf={gguf}" if gguf else "local/smollm2"
        spec = parse_local_model(model)
        spec = spec.model_copy(update={"n_ctx": n_ctx, **({"threads": threads} if threads else {})})
        sock = bind_socket(host, port)
        base = f"http://{host}:{sock.getsockname()[1]}/v1"
        threads_note = f"{spec.threads} thread{'s' * (spec.threads != 1)}"
        typer.echo(f"serving {spec.gguf} as {spec.alias!r} (n_ctx {spec.n_ctx}, {threads_note}) at {base}", err=True)
        typer.echo(f'in a recipe: model = "openai/{spec.alias}", api_base = "{base}"', err=True)
        typer.echo(base)
        serve_on_socket(spec, sock)

    @model_app.command("check")
    def check(
        recipe: Path | None = typer.Argument(None, help="A recipe (default: the quickstart's roles)."),
        model: str | None = typer.Option(None, "--model", help=MODEL_HELP),
        api_base: str | None = typer.Option(None, "--api-base", help="OpenAI-compatible endpoint for every role."),
        api_key: str | None = typer.Option(None, "--api-key", envvar="ATELIER_API_KEY", help="API key for every role."),
        as_json: bool = typer.Option(False, "--json", help="Print the probes as JSON on stdout."),
    ) -> None:
        """Per role: a text and a structured probe — reachable, structured mode chosen, latency, tokens/s."""
        from atelier.runs.execution.model_check import probe_recipe

        probes = asyncio.run(probe_recipe(_recipe(recipe, model, api_base, api_key)))
        if as_json:
            print_json([p.model_dump(mode="json") for p in probes])
        else:
            _print_probes(probes)
        if not all(p.ok for p in probes):
            raise typer.Exit(1)

    @bench_app.command("model")
    def bench_model(
        recipe: Path | None = typer.Argument(None, help="Take the model from this recipe's role."),
        role: str = typer.Option("system", "--role", help="The role whose model is measured."),
        model: str | None = typer.Option(
            None, "--model", help="The model (default: the recipe's, else local/smollm2)."
        ),
        api_base: str | None = typer.Option(None, "--api-base"),
        api_key: str | None = typer.Option(None, "--api-key", envvar="ATELIER_API_KEY"),
        requests: int = typer.Option(6, "--requests", min=1, help="Requests of each kind (plain and streamed)."),
        max_tokens: int = typer.Option(96, "--max-tokens", min=1, help="Completion length asked for."),
    ) -> None:
        """Tokens/s, time to first token (streamed) and the framework's time as a share of the model's (JSON)."""
        from atelier.runs.bench.model import ModelBenchSettings, run_model_bench

        settings = _recipe(recipe, model or (None if recipe else "local/smollm2"), api_base, api_key).role_models()
        chosen = settings.get(role) or settings["system"]
        bench = ModelBenchSettings(requests=requests, max_tokens=max_tokens)
        print_json({**asyncio.run(run_model_bench(chosen, bench)), "role": role, "machine": machine_facts()})


def _print_probes(probes) -> None:
    from rich.table import Table

    from atelier.runs.cli._common import table_console
    from atelier.runs.reading.terminal_text import name_columns

    table = Table(title="model check")
    rows = []
    for p in probes:
        latency = lambda s: f"{s.latency_ms:.0f} ms" if s.ok and s.latency_ms is not None else "failed"  # noqa: E731
        mode = p.structured.structured_mode or "–"
        if p.structured.refused_modes:
            mode += f" (refused: {', '.join(p.structured.refused_modes)})"
        rows.append(
            (
                ", ".join(p.roles),
                p.model + (" (dry run)" if p.dry_run else ""),
                latency(p.text),
                f"{p.text.tokens_per_s:.1f}" if p.text.tokens_per_s else "–",
                latency(p.structured),
                mode,
                p.text.error or p.structured.error or "",
            )
        )
    name_columns(table, ("roles", "model", "text", "tok/s", "structured", "mode", "error"), rows, names=2)
    table_console(stderr=True).print(table)
