"""`atelier web ...` (the sandbox web and the web tools) and `atelier bench web`."""

from __future__ import annotations

import asyncio
from enum import Enum

import typer

from atelier.runs.cli._common import machine_facts, print_json


class RankerChoice(str, Enum):
    bm25 = "bm25"
    hybrid = "hybrid"


CORPUS_HELP = "'sample', 'wiki', or a folder / .jsonl file of documents."


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    web_app = typer.Typer(help="The sandbox web: serve a corpus, search it, fetch its pages.", no_args_is_help=True)
    app.add_typer(web_app, name="web")

    @web_app.command("serve")
    def serve(
        corpus: str = typer.Option("sample", "--corpus", help=CORPUS_HELP),
        port: int = typer.Option(0, "--port", help="0 picks a free port (2024 is taken on these machines)."),
        host: str = typer.Option("127.0.0.1", "--host"),
        ranker: RankerChoice = typer.Option(RankerChoice.bm25, "--ranker"),
    ) -> None:
        """Serve a corpus on loopback: SearXNG JSON at /search?q=...&format=json, pages at /doc/<id>."""
        from atelier.tools.config import SandboxConfig
        from atelier.tools.sandbox.server import SandboxWeb

        server = SandboxWeb.from_config(SandboxConfig(corpus=corpus, ranker=ranker.value, host=host, port=port))
        typer.echo(server.base_url)
        server.serve_forever()

    @web_app.command("search")
    def search(
        query: str,
        corpus: str = typer.Option("sample", "--corpus", help=CORPUS_HELP),
        ranker: RankerChoice = typer.Option(RankerChoice.bm25, "--ranker"),
        max_results: int = typer.Option(10, "-n", "--max-results"),
    ) -> None:
        """Search the sandbox web through the searxng provider; prints the results as JSON."""
        from atelier.tools.config import SandboxConfig, WebConfig

        config = WebConfig(mode="live", sandbox=SandboxConfig(corpus=corpus, ranker=ranker.value))
        print_json([result.model_dump(mode="json") for result in asyncio.run(_search(config, query, max_results))])

    @web_app.command("fetch")
    def fetch(
        url: str,
        corpus: str = typer.Option("sample", "--corpus", help=CORPUS_HELP),
    ) -> None:
        """Fetch one page of the sandbox web by its citable URL; prints the extracted page as JSON."""
        from atelier.tools.config import SandboxConfig, WebConfig

        config = WebConfig(mode="live", sandbox=SandboxConfig(corpus=corpus))
        print_json(asyncio.run(_fetch(config, url)).model_dump(mode="json"))

    @bench_app.command("web")
    def bench_web(
        corpus: str = typer.Option("wiki", "--corpus", help=CORPUS_HELP),
        ranker: RankerChoice = typer.Option(RankerChoice.bm25, "--ranker"),
        queries: int = typer.Option(200, "--queries", help="Search queries timed (half titles, half descriptions)."),
        pages: int = typer.Option(300, "--pages", help="Pages fetched and extracted."),
        concurrency: int = typer.Option(8, "--concurrency"),
        seed: int = typer.Option(0, "--seed"),
    ) -> None:
        """Search latency p50/p95 and fetch+extract pages/s on the sandbox web (JSON)."""
        from atelier.runs.bench.web import WebBenchmarkSettings, run_web_benchmark

        settings = WebBenchmarkSettings(
            corpus=corpus, ranker=ranker.value, queries=queries, pages=pages, concurrency=concurrency, seed=seed
        )
        print_json({**asyncio.run(run_web_benchmark(settings)), "machine": machine_facts()})


async def _search(config, query: str, max_results: int):
    from atelier.tools.web import build_web

    async with build_web(config) as web:
        return await web.search(query, max_results)


async def _fetch(config, url: str):
    from atelier.tools.web import build_web

    async with build_web(config) as web:
        return await web.fetch(url)
