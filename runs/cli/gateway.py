"""`atelier gateway serve`: the model gateway as an OpenAI-compatible endpoint on loopback.

Any OpenAI client (an external agent, a notebook, curl) then calls models through the gateway:
the recipe's model settings per role, the response cache, rate limits, retries, structured
output and a ledger. The request's `model` field names the call (it becomes the ledger's node);
`--role NAME=ROLE` maps call names to model roles (default: `system`). With `--web`, the
sandbox web is served too, as SearXNG search, pages and MCP tools, through the same web cache.

Whoever reaches the endpoint spends the provider key, so it is sealed: every request carries the
API key (a bearer token: `$ATELIER_GATEWAY_TOKEN`, `--token-file`, or one generated and printed
once at start — never on the command line, which every user of the machine reads in
/proc/<pid>/cmdline); the Host header must be the bound loopback address (a DNS-rebinding page
cannot use it); a browser page's cross-site request is refused by its Origin; a request's headers
must arrive within `--header-timeout-s` and its body within `--body-timeout-s` of them, and bodies
are capped as they stream in. It listens on loopback only, unless `--public` is given for another
`--host`.
"""

from __future__ import annotations

import re
from pathlib import Path

import typer

TOKEN_ENV = "ATELIER_GATEWAY_TOKEN"
_TOKEN_FORM = re.compile(r"[A-Za-z0-9._~-]{16,}")  # it also names the web session in URL paths


def checked_token(token: str | None) -> tuple[str, bool]:
    """The API key to require, and whether it was generated here (None: make one)."""
    import secrets

    from atelier.benchmarks.common.errors import ConfigError

    if token is None:
        return "atl-" + secrets.token_urlsafe(24), True
    if not _TOKEN_FORM.fullmatch(token):
        raise ConfigError(
            f"${TOKEN_ENV} / --token-file: give at least 16 characters of letters, digits and . _ ~ - "
            "(or leave it out: one is generated)"
        )
    return token, False


def given_token(token_file: Path | None, env: str = TOKEN_ENV) -> str | None:
    """The key from `--token-file` (its first line) or the variable `env`, if either."""
    import os

    from atelier.benchmarks.common import no_follow
    from atelier.benchmarks.common.errors import ConfigError

    if token_file is None:
        return os.environ.get(env) or None
    try:
        lines = no_follow.read_text(token_file).splitlines()
    except OSError as exc:
        raise ConfigError(f"--token-file {token_file}: {exc.strerror}") from None
    return lines[0].strip() if lines else ""


def token_refused_on_command_line(env: str):
    """A typer callback for `--token`: a value given there is refused, naming `env` and --token-file."""

    def refuse(value: str | None) -> str | None:
        if value is not None:
            from atelier.benchmarks.common.errors import ConfigError

            raise ConfigError(
                f"--token: a key on the command line is visible to every user of this machine "
                f"(/proc/<pid>/cmdline); put it in ${env} or in a file given by --token-file"
            )
        return value

    return refuse


def checked_host(host: str, public: bool) -> None:
    from atelier.agents.models.openai_api import checked_host as refuse_beyond_loopback

    refuse_beyond_loopback(host, public, "whoever reaches the gateway spends its provider key")


def serve(
    recipe: Path | None = typer.Option(None, "--recipe", help="Take the model settings per role from this recipe."),
    model: str | None = typer.Option(
        None, "--model", help="Use this model for every role (litellm provider string or `scripted`)."
    ),
    api_base: str | None = typer.Option(None, "--api-base", help="The provider endpoint for every role."),
    api_key: str | None = typer.Option(
        None, "--api-key", envvar="ATELIER_API_KEY", help="The provider API key for every role."
    ),
    role: list[str] = typer.Option([], "--role", help="CALL=ROLE: the model role a call name uses (repeatable)."),
    host: str = typer.Option("127.0.0.1", "--host", help="A loopback address (others need --public)."),
    port: int = typer.Option(0, "--port", help="0 picks a free port."),
    public: bool = typer.Option(
        False,
        "--public",
        help="Allow a non-loopback --host. The API key is still required; the Host header is then not checked.",
    ),
    token: str | None = typer.Option(
        None, "--token", hidden=True, callback=token_refused_on_command_line(TOKEN_ENV), help="Refused: --token-file."
    ),
    token_file: Path | None = typer.Option(
        None,
        "--token-file",
        help=f"A file whose first line is the API key clients must send (else ${TOKEN_ENV}; else a new one, "
        "printed at start).",
    ),
    max_body_bytes: int = typer.Option(8 * 2**20, "--max-body-bytes", min=1, help="The largest request body taken."),
    header_timeout_s: float = typer.Option(
        10.0, "--header-timeout-s", min=0.1, help="Seconds a request's headers may take to arrive (then closed)."
    ),
    body_timeout_s: float = typer.Option(
        10.0, "--body-timeout-s", min=0.1, help="Seconds a request body may take after its headers (a slower one: 408)."
    ),
    ledger: Path = typer.Option(
        Path("runs/out/gateway/ledger.jsonl"), "--ledger", help="Where the ledger is appended."
    ),
    cache: bool = typer.Option(True, "--cache/--no-cache", help="The response cache ($ATELIER_CACHE_DIR/llm)."),
    web: bool = typer.Option(False, "--web/--no-web", help="Also serve the sandbox web (SearXNG, pages, MCP)."),
    corpus: str = typer.Option("sample", "--corpus", help="The sandbox web's corpus with --web."),
) -> None:
    """Serve /v1/chat/completions, /v1/embeddings and /v1/models over the gateway; prints the base URL and API key."""
    checked_host(host, public)
    token, generated = checked_token(given_token(token_file))

    import contextlib

    from pydantic import ValidationError
    from starlette.applications import Starlette
    from starlette.routing import BaseRoute

    from atelier.agents.models.cache import ResponseCache
    from atelier.agents.models.gateway import Gateway
    from atelier.agents.models.ledger import Ledger
    from atelier.agents.models.openai_api import EndpointSession, RequestGuard, Sessions, loopback_hosts, openai_routes
    from atelier.agents.models.settings import ROLES, ModelSettings
    from atelier.benchmarks.common.errors import ConfigError
    from atelier.benchmarks.data_files import cache_dir
    from atelier.tools.agent_web import PAGES_HOST, WebSession, WebSessions, agent_web_routes
    from atelier.tools.asgi_server import AsgiServer

    roles = {name: ModelSettings() for name in ROLES}
    if recipe is not None:
        from atelier.runs.folder.recipe import load_recipe

        roles = load_recipe(recipe).with_overrides(model=model, api_base=api_base, api_key=api_key).role_models()
    elif model or api_base or api_key:
        overrides = {k: v for k, v in (("model", model), ("api_base", api_base), ("api_key", api_key)) if v}
        try:
            roles = {name: ModelSettings(**overrides) for name in ROLES}
        except ValidationError as exc:
            first = exc.errors()[0]
            flag = "--" + str(first["loc"][0]).replace("_", "-")
            raise ConfigError(f"{flag}: {first['msg'].removeprefix('Value error, ')}") from None
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
    # no fallback session: a request without this token is a 401
    session = EndpointSession(
        gateway=gateway, agent="gateway", tags={"system": "gateway"}, roles=call_roles, token=token
    )
    sessions = Sessions()
    sessions.add(session)
    web_sessions = WebSessions()
    routes: list[BaseRoute] = [*openai_routes(sessions)]
    mcp = None
    if web:
        from atelier.tools.agent_mcp import mcp_routes, mcp_server

        mcp = mcp_server(web_sessions)
        routes += [*agent_web_routes(web_sessions), *mcp_routes(mcp)]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        if mcp is None:
            yield
            return
        async with mcp.session_manager.run():
            yield

    app = Starlette(routes=routes, lifespan=lifespan)
    server = AsgiServer(app, host, port, lifespan="on", header_timeout_s=header_timeout_s)  # bound: the port is known
    hosts = None if public else loopback_hosts(server.port) | ({PAGES_HOST} if web else set())
    app.add_middleware(RequestGuard, hosts=hosts, max_body_bytes=max_body_bytes, body_timeout_s=body_timeout_s)
    if web:
        from atelier.tools.config import SandboxConfig, WebConfig
        from atelier.tools.web import build_web

        run_web = build_web(WebConfig(sandbox=SandboxConfig(corpus=corpus), cache_dir=ledger.parent / "web"))
        web_sessions.add(WebSession(session, run_web, server.base_url))
    typer.echo(f"OpenAI-compatible API: {server.base_url}/v1  (ledger: {ledger})")
    typer.echo(f"API key: {token}" if generated else f"API key: the one given by ${TOKEN_ENV} / --token-file")
    if web:
        typer.echo(f"SearXNG search: {server.base_url}/s/<api-key>/search?q=...&format=json")
        typer.echo(f"MCP (streamable HTTP): {server.base_url}/s/<api-key>/mcp")
    server.serve_forever()


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    gateway_app = typer.Typer(help="The model gateway as an OpenAI-compatible endpoint.", no_args_is_help=True)
    app.add_typer(gateway_app, name="gateway")
    gateway_app.command("serve")(serve)
