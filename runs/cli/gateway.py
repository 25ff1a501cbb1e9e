"""`atelier gateway serve`: the model gateway as an OpenAI-compatible endpoint on loopback.

Any OpenAI client (an external agent, a notebook, curl) then calls models through the gateway:
the recipe's model settings per role, the response cache, rate limits, retries, structured
output and a ledger. The request's `model` field names the call (it becomes the ledger's node);
`--role NAME=ROLE` maps call names to model roles (default: `system`). With `--web`, the
sandbox web is served too, as SearXNG search, pages and MCP tools, through the same web cache.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def serve(
    recipe: Optional[Path] = typer.Option(None, "--recipe", help="Take the model settings per role from this recipe."),
    model: Optional[str] = typer.Option(None, "--model", help="Use this model for every role (litellm provider string or `scripted`)."),
    api_base: Optional[str] = typer.Option(None, "--api-base", help="The provider endpoint for every role."),
    api_key: Optional[str] = typer.Option(None, "--api-key", envvar="ATELIER_API_KEY", help="The provider API key for every role."),
    role: list[str] = typer.Option([], "--role", help="CALL=ROLE: the model role a call name uses (repeatable)."),
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(0, "--port", help="0 picks a free port."),
    ledger: Path = typer.Option(Path("runs/out/gateway/ledger.jsonl"), "--ledger", help="Where the ledger is appended."),
    cache: bool = typer.Option(True, "--cache/--no-cache", help="The response cache ($ATELIER_CACHE_DIR/llm)."),
    web: bool = typer.Option(False, "--web/--no-web", help="Also serve the sandbox web (SearXNG, pages, MCP)."),
    corpus: str = typer.Option("sample", "--corpus", help="The sandbox web's corpus with --web."),
) -> None:
    """Serve /v1/chat/completions, /v1/embeddings and /v1/models over the gateway; prints the base URL."""
    from agents.cache import ResponseCache
    from agents.gateway import Gateway
    from agents.ledger import Ledger
    from agents.openai_api import EndpointSession
    from agents.settings import ROLES, ModelSettings
    from benchmarks.data_files import cache_dir
    from benchmarks.errors import ConfigError
    from graphs.external.endpoint import AgentEndpoint
    from tools.agent_web import WebSession

    roles = {name: ModelSettings() for name in ROLES}
    if recipe is not None:
        from runs.recipe import load_recipe

        roles = load_recipe(recipe).with_overrides(model=model, api_base=api_base, api_key=api_key).role_models()
    elif model or api_base or api_key:
        overrides = {k: v for k, v in (("model", model), ("api_base", api_base), ("api_key", api_key)) if v}
        roles = {name: ModelSettings(**overrides) for name in ROLES}
    call_roles = {}
    for entry in role:
        call, sep, target = entry.partition("=")
        if not sep or not call or not target:
            raise ConfigError(f"--role {entry!r}: expected CALL=ROLE, e.g. final_report=writer")
        call_roles[call] = target
    gateway = Gateway(
        roles,
        cache=ResponseCache(cache_dir() / "llm") if cache else None,
        ledger=Ledger(ledger, run_id="gateway"),
    )
    session = EndpointSession(gateway=gateway, agent="gateway", tags={"system": "gateway"}, roles=call_roles,
                              token="default")
    endpoint = AgentEndpoint(host, port, fallback=session, with_mcp=web)
    if web:
        from tools.config import SandboxConfig, WebConfig
        from tools.web import build_web

        run_web = build_web(WebConfig(sandbox=SandboxConfig(corpus=corpus), cache_dir=ledger.parent / "web"))
        endpoint.web_sessions.add(WebSession(session, run_web, endpoint.base_url))
    typer.echo(f"OpenAI-compatible API: {endpoint.openai_base}  (ledger: {ledger})")
    if web:
        typer.echo(f"SearXNG search: {endpoint.base_url}/s/default/search?q=...&format=json")
        typer.echo(f"MCP (streamable HTTP): {endpoint.base_url}/s/default/mcp")
    endpoint.serve_forever()


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    gateway_app = typer.Typer(help="The model gateway as an OpenAI-compatible endpoint.", no_args_is_help=True)
    app.add_typer(gateway_app, name="gateway")
    gateway_app.command("serve")(serve)
