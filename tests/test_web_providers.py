"""Search providers and the Jina reader, each against a local fake server speaking its real JSON format."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from atelier.benchmarks.common.errors import ConfigError
from atelier.tools.asgi_server import AsgiServer
from atelier.tools.config import SandboxConfig, WebConfig
from atelier.tools.errors import SearchFailed
from atelier.tools.search import provider_names
from atelier.tools.web import build_web

KEYS = {"tavily": "tvly-test-key", "serper": "serper-test-key", "brave": "brave-test-key", "jina": "jina_test_key"}
KEY_ENV = {"tavily": "TAVILY_API_KEY", "serper": "SERPER_API_KEY", "brave": "BRAVE_API_KEY", "jina": "JINA_API_KEY"}

SEARXNG_PAGES = {
    1: [
        {
            "url": "https://a.example/1",
            "title": "First",
            "content": "first snippet",
            "engine": "duckduckgo",
            "engines": ["duckduckgo", "brave"],
            "positions": [1, 2],
            "score": 4.0,
            "category": "general",
            "parsed_url": ["https", "a.example", "/1", "", "", ""],
            "template": "default.html",
            "publishedDate": None,
        },
        {
            "url": "https://b.example/2",
            "title": "Second",
            "content": "second snippet",
            "engine": "brave",
            "engines": ["brave"],
            "positions": [2],
            "score": 1.0,
            "category": "general",
        },
        {
            "url": "https://c.example/3",
            "title": "Third",
            "content": "",
            "engine": "brave",
            "engines": ["brave"],
            "positions": [3],
            "score": 0.5,
            "category": "general",
        },
    ],
    2: [
        {
            "url": "https://d.example/4",
            "title": "Fourth",
            "content": "fourth snippet",
            "engine": "wikipedia",
            "engines": ["wikipedia"],
            "positions": [4],
            "score": 0.3,
            "category": "general",
        },
        {
            "url": "https://e.example/5",
            "title": "Fifth",
            "content": "fifth snippet",
            "engine": "wikipedia",
            "engines": ["wikipedia"],
            "positions": [5],
            "score": 0.2,
            "category": "general",
        },
    ],
}


class FakeApis:
    """SearXNG, Tavily, Serper, Brave and Jina Reader on one loopback server; records each request."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    async def _note(self, request: Request) -> dict[str, Any]:
        body = await request.body()
        entry = {
            "service": request.url.path.split("/")[1],
            "method": request.method,
            "path": request.url.path,
            "params": dict(request.query_params),
            "headers": {key.lower(): value for key, value in request.headers.items()},
            "json": await request.json() if body else None,
        }
        self.requests.append(entry)
        return entry

    def app(self) -> Starlette:
        async def searxng(request: Request) -> Response:
            entry = await self._note(request)
            if entry["params"].get("format") != "json":
                return PlainTextResponse("<html>results</html>", media_type="text/html")
            page = SEARXNG_PAGES.get(int(entry["params"].get("pageno", "1")), [])
            return JSONResponse(
                {
                    "query": entry["params"]["q"],
                    "number_of_results": 0,
                    "results": page,
                    "answers": [],
                    "corrections": [],
                    "infoboxes": [],
                    "suggestions": [],
                    "unresponsive_engines": [],
                }
            )

        async def tavily(request: Request) -> Response:
            entry = await self._note(request)
            if entry["headers"].get("authorization") != f"Bearer {KEYS['tavily']}":
                return JSONResponse({"detail": {"error": "Unauthorized: missing or invalid API key."}}, status_code=401)
            return JSONResponse(
                {
                    "query": entry["json"]["query"],
                    "follow_up_questions": None,
                    "answer": None,
                    "images": [],
                    "results": [
                        {
                            "title": "Tavily one",
                            "url": "https://t.example/1",
                            "content": "tavily snippet one",
                            "score": 0.91,
                            "raw_content": None,
                        },
                        {
                            "title": "Tavily two",
                            "url": "https://t.example/2",
                            "content": "tavily snippet two",
                            "score": 0.72,
                            "raw_content": None,
                        },
                    ],
                    "response_time": 1.02,
                }
            )

        async def serper(request: Request) -> Response:
            entry = await self._note(request)
            if entry["headers"].get("x-api-key") != KEYS["serper"]:
                return JSONResponse({"message": "Unauthorized.", "statusCode": 403}, status_code=403)
            return JSONResponse(
                {
                    "searchParameters": {"q": entry["json"]["q"], "type": "search", "engine": "google"},
                    "knowledgeGraph": {"title": "Something", "type": "Thing"},
                    "organic": [
                        {
                            "title": "Serper one",
                            "link": "https://s.example/1",
                            "snippet": "serper snippet one",
                            "position": 1,
                        },
                        {
                            "title": "Serper two",
                            "link": "https://s.example/2",
                            "snippet": "serper snippet two",
                            "position": 2,
                            "sitelinks": [{"title": "Sub", "link": "https://s.example/2/sub"}],
                        },
                    ],
                    "peopleAlsoAsk": [{"question": "Why?", "snippet": "Because.", "link": "https://s.example/why"}],
                    "relatedSearches": [{"query": "related"}],
                }
            )

        async def brave(request: Request) -> Response:
            entry = await self._note(request)
            if entry["headers"].get("x-subscription-token") != KEYS["brave"]:
                return JSONResponse(
                    {"type": "ErrorResponse", "error": {"code": "SUBSCRIPTION_TOKEN_INVALID", "status": 422}},
                    status_code=422,
                )
            return JSONResponse(
                {
                    "type": "search",
                    "query": {"original": entry["params"]["q"], "more_results_available": True},
                    "mixed": {"type": "mixed", "main": [{"type": "web", "index": 0, "all": False}]},
                    "web": {
                        "type": "search",
                        "family_friendly": True,
                        "results": [
                            {
                                "title": "Brave one",
                                "url": "https://br.example/1",
                                "is_source_local": False,
                                "description": "brave snippet one",
                                "page_age": "2024-01-05T00:00:00",
                                "language": "en",
                                "profile": {"name": "Br", "url": "https://br.example", "long_name": "br.example"},
                                "extra_snippets": ["more text"],
                            },
                            {
                                "title": "Brave two",
                                "url": "https://br.example/2",
                                "description": "brave snippet two",
                                "language": "en",
                            },
                        ],
                    },
                }
            )

        async def jina(request: Request) -> Response:
            entry = await self._note(request)
            if entry["headers"].get("authorization") != f"Bearer {KEYS['jina']}":
                return JSONResponse(
                    {"code": 401, "name": "AuthenticationRequiredError", "message": "Invalid API key"}, status_code=401
                )
            target = request.url.path.removeprefix("/jina/")
            return JSONResponse(
                {
                    "code": 200,
                    "status": 20000,
                    "data": {
                        "title": "Converted page",
                        "description": "A page Jina read",
                        "url": target,
                        "content": "# Converted page\n\nThe main text, as Markdown.",
                        "publishedTime": "2024-03-01T10:00:00Z",
                        "usage": {"tokens": 12},
                    },
                }
            )

        async def not_json(request: Request) -> Response:
            await self._note(request)
            return PlainTextResponse("<html>maintenance</html>", media_type="text/html")

        return Starlette(
            routes=[
                Route("/searxng/search", searxng),
                Route("/tavily/search", tavily, methods=["POST"]),
                Route("/serper/search", serper, methods=["POST"]),
                Route("/brave/res/v1/web/search", brave),
                Route("/jina/{target:path}", jina),
                Route("/broken/search", not_json, methods=["GET", "POST"]),
            ]
        )


@pytest.fixture(scope="module")
def fake():
    apis = FakeApis()
    with AsgiServer(apis.app()) as server:
        yield apis, server


@pytest.fixture(autouse=True)
def no_key_in_environment(monkeypatch):
    for variable in KEY_ENV.values():
        monkeypatch.delenv(variable, raising=False)


def config_for(server: AsgiServer, provider: str, tmp_path, **options: Any) -> WebConfig:
    options.setdefault("base_url", f"{server.base_url}/{provider}")
    if provider in KEYS:
        options.setdefault("api_key", KEYS[provider])
    return WebConfig(
        provider=provider, provider_options=options, mode="live", cache_dir=tmp_path, allow_hosts=[server.host_port]
    )


def last(apis: FakeApis, service: str) -> dict[str, Any]:
    return [entry for entry in apis.requests if entry["service"] == service][-1]


def test_every_provider_is_registered():
    assert provider_names() == ["brave", "searxng", "serper", "tavily"]


async def test_searxng_reads_pages_until_it_has_enough_results(fake, tmp_path):
    apis, server = fake
    apis.requests.clear()
    async with build_web(config_for(server, "searxng", tmp_path, language="en")) as web:
        results = await web.search("heron", 4)
    assert [(r.rank, r.title, r.url) for r in results] == [
        (1, "First", "https://a.example/1"),
        (2, "Second", "https://b.example/2"),
        (3, "Third", "https://c.example/3"),
        (4, "Fourth", "https://d.example/4"),
    ]
    assert results[0].snippet == "first snippet" and results[0].provider == "searxng"
    assert results[0].raw["engines"] == ["duckduckgo", "brave"]
    assert [entry["params"] for entry in apis.requests] == [
        {"q": "heron", "format": "json", "pageno": "1", "language": "en"},
        {"q": "heron", "format": "json", "pageno": "2", "language": "en"},
    ]


async def test_searxng_stops_when_a_page_comes_back_empty(fake, tmp_path):
    apis, server = fake
    apis.requests.clear()
    async with build_web(config_for(server, "searxng", tmp_path)) as web:
        results = await web.search("heron", 50)
    assert len(results) == 5
    assert [entry["params"]["pageno"] for entry in apis.requests] == ["1", "2", "3"]


async def test_tavily_posts_its_json_with_a_bearer_key(fake, tmp_path):
    apis, server = fake
    async with build_web(config_for(server, "tavily", tmp_path, search_depth="advanced")) as web:
        results = await web.search("heron fishing", 30)
    request = last(apis, "tavily")
    assert request["headers"]["authorization"] == "Bearer tvly-test-key"
    assert request["json"] == {
        "query": "heron fishing",
        "max_results": 20,
        "search_depth": "advanced",
        "topic": "general",
        "include_answer": False,
        "include_raw_content": False,
    }
    assert [(r.title, r.url, r.snippet) for r in results] == [
        ("Tavily one", "https://t.example/1", "tavily snippet one"),
        ("Tavily two", "https://t.example/2", "tavily snippet two"),
    ]
    assert results[0].raw["score"] == 0.91


async def test_serper_posts_q_and_num_with_its_api_key_header(fake, tmp_path):
    apis, server = fake
    async with build_web(config_for(server, "serper", tmp_path, gl="uk")) as web:
        results = await web.search("heron", 5)
    request = last(apis, "serper")
    assert request["headers"]["x-api-key"] == "serper-test-key"
    assert request["json"] == {"q": "heron", "num": 5, "gl": "uk"}
    assert [(r.rank, r.url, r.snippet) for r in results] == [
        (1, "https://s.example/1", "serper snippet one"),
        (2, "https://s.example/2", "serper snippet two"),
    ]


async def test_brave_gets_web_results_with_its_subscription_token(fake, tmp_path):
    apis, server = fake
    async with build_web(config_for(server, "brave", tmp_path, country="de")) as web:
        results = await web.search("heron", 3)
    request = last(apis, "brave")
    assert request["headers"]["x-subscription-token"] == "brave-test-key"
    assert request["headers"]["accept"] == "application/json"
    assert request["params"] == {"q": "heron", "count": "3", "text_decorations": "false", "country": "de"}
    assert [(r.title, r.url, r.snippet) for r in results] == [
        ("Brave one", "https://br.example/1", "brave snippet one"),
        ("Brave two", "https://br.example/2", "brave snippet two"),
    ]


async def test_jina_reader_fetches_through_r_jina_ai_json_mode(fake, tmp_path):
    apis, server = fake
    config = WebConfig(
        provider="searxng",
        provider_options={"base_url": f"{server.base_url}/searxng"},
        reader="jina",
        reader_options={"base_url": f"{server.base_url}/jina", "api_key": KEYS["jina"]},
        mode="live",
        cache_dir=tmp_path,
        allow_hosts=[server.host_port],
    )
    async with build_web(config) as web:
        page = await web.fetch("https://news.example/story?id=7")
    request = last(apis, "jina")
    assert request["path"] == "/jina/https://news.example/story"
    assert request["params"] == {"id": "7"}
    assert request["headers"]["accept"] == "application/json"
    assert request["headers"]["x-return-format"] == "markdown"
    assert page.title == "Converted page" and page.text.startswith("# Converted page")
    assert page.content_type == "text/markdown"
    assert page.metadata["publishedTime"] == "2024-03-01T10:00:00Z"


@pytest.mark.parametrize("provider", ["tavily", "serper", "brave"])
def test_a_provider_without_its_key_fails_before_the_run_naming_the_key(fake, tmp_path, provider):
    _, server = fake
    config = WebConfig(provider=provider, provider_options={"base_url": server.base_url}, cache_dir=tmp_path)
    with pytest.raises(ConfigError, match=KEY_ENV[provider]):
        build_web(config)


def test_the_jina_reader_without_its_key_fails_before_the_run(tmp_path):
    config = WebConfig(
        provider="searxng", provider_options={"base_url": "http://search.invalid"}, reader="jina", cache_dir=tmp_path
    )
    with pytest.raises(ConfigError, match="JINA_API_KEY"):
        build_web(config)


async def test_the_key_comes_from_the_environment_when_the_run_gives_none(fake, tmp_path, monkeypatch):
    apis, server = fake
    monkeypatch.setenv("SERPER_API_KEY", KEYS["serper"])
    config = WebConfig(
        provider="serper",
        provider_options={"base_url": f"{server.base_url}/serper"},
        mode="live",
        cache_dir=tmp_path,
        allow_hosts=[server.host_port],
    )
    async with build_web(config) as web:
        assert len(await web.search("heron")) == 2
    assert last(apis, "serper")["headers"]["x-api-key"] == KEYS["serper"]


async def test_the_runs_key_wins_over_the_environment(fake, tmp_path, monkeypatch):
    apis, server = fake
    monkeypatch.setenv("TAVILY_API_KEY", "tvly-from-the-environment")
    async with build_web(config_for(server, "tavily", tmp_path)) as web:
        await web.search("heron")
    assert last(apis, "tavily")["headers"]["authorization"] == f"Bearer {KEYS['tavily']}"


def test_replay_needs_no_key(tmp_path):
    config = WebConfig(provider="tavily", mode="replay", cache_dir=tmp_path)
    build_web(config)  # no ConfigError: a replay never calls Tavily


async def test_a_rejected_key_is_a_search_failure_with_the_status(fake, tmp_path):
    _, server = fake
    async with build_web(config_for(server, "brave", tmp_path, api_key="wrong")) as web:
        with pytest.raises(SearchFailed, match="brave search failed: HTTP 422.*SUBSCRIPTION_TOKEN_INVALID"):
            await web.search("heron")


async def test_a_provider_answering_html_is_a_search_failure(fake, tmp_path):
    _, server = fake
    async with build_web(config_for(server, "tavily", tmp_path, base_url=f"{server.base_url}/broken")) as web:
        with pytest.raises(SearchFailed, match="did not answer JSON"):
            await web.search("heron")


async def test_recorded_searches_never_contain_the_api_key(fake, tmp_path):
    _, server = fake
    config = config_for(server, "tavily", tmp_path).model_copy(update={"mode": "record"})
    async with build_web(config) as web:
        await web.search("heron")
    stored = [path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()]
    assert stored and not any(KEYS["tavily"].encode() in data for data in stored)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"provider": "bing"},
            r"\[web\] provider: unknown search provider 'bing'; valid: brave, searxng, serper, tavily",
        ),
        ({"provider": "tavily", "provider_options": {"search_depth": "deep"}}, "field 'search_depth'"),
        ({"provider": "serper", "provider_options": {"colour": "red"}}, "field 'colour'"),
        ({"reader": "curl"}, "unknown page reader 'curl'"),
        ({"provider": "tavily", "sandbox": SandboxConfig()}, r"\[web.sandbox\] is set but provider 'tavily'"),
        ({"reader": "jina"}, "cannot read the sandbox web"),
        ({"allow_hosts": ["http://intranet.example/admin"]}, "allow_hosts: 'http://intranet.example/admin'"),
    ],
)
def test_bad_web_settings_are_config_errors_naming_the_field(settings, message):
    with pytest.raises(ConfigError, match=message):
        WebConfig(**settings)


def test_validate_on_a_built_provider_names_the_missing_key():
    from atelier.tools.caps import FetchCaps
    from atelier.tools.http import GuardedHttp
    from atelier.tools.search import provider_class, provider_config
    from atelier.tools.url_guard import AllowList, UrlGuard

    http = GuardedHttp(UrlGuard(AllowList()), FetchCaps())
    brave = provider_class("brave")(provider_config("brave", {}), http)
    with pytest.raises(ConfigError, match="brave needs an API key: set BRAVE_API_KEY"):
        brave.validate()
    provider_class("brave")(provider_config("brave", {"api_key": "k"}), http).validate()


def test_a_dumped_web_config_never_contains_the_api_key():
    config = WebConfig(provider="tavily", provider_options={"api_key": "tvly-secret", "search_depth": "advanced"})
    dumped = config.model_dump_json()
    assert "tvly-secret" not in dumped
    assert WebConfig.model_validate_json(dumped).provider_options == {"search_depth": "advanced"}
    assert config.provider_options["api_key"] == "tvly-secret"  # the live config still has it
