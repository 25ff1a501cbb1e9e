"""The gateway as an OpenAI-compatible HTTP API, so external agents' LLM calls go through it.

A small Starlette app rather than litellm's proxy: the proxy routes to providers itself (its own
retries, cache and spend log) and would bypass `Gateway` — the one place where this project's
cache, limits, retries, structured-output repair and ledger live. Here every request becomes a
`Gateway.text` or `Gateway.structured` call:

- `POST /v1/chat/completions`: plain text; `response_format` json_schema / json_object
  (validated against the agent's own schema, repaired once); `tools` (asked as a structured
  `ToolTurn`, answered as OpenAI `tool_calls` with deterministic ids); `stream: true` (answered
  as server-sent events once the answer is complete).
- `POST /v1/embeddings`: the local MiniLM embedder (cached and ledgered like a model call).
- `GET /v1/models`.

Who is calling is told by the bearer token: each token is an `EndpointSession` (the run's
gateway, the case and system to tag, the agent's name, which gateway role each of the agent's
calls uses). The agent names its calls through the `model` field (`research`, `final_report`,
...), which becomes the ledger's `node` (`open_deep_research:research`). The agent's own sampling
parameters are ignored: the run's model settings for that role decide (temperature, seed, ...).

An agent's JSON schema is checked before any model is asked: a `$ref` that points back into
itself (a recursive schema), a `$ref` that does not resolve within the schema, or one nested too
deeply is a 400 naming the problem, never a provider call that fails and is retried.

`RequestGuard` is the HTTP guard for an endpoint reachable beyond one run's own children
(`atelier gateway serve`): the Host header must name the bound address (DNS rebinding), an
Origin must be a loopback one (a browser page's cross-site POST), and request bodies are capped
as they stream in.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import ipaddress
import json
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar
from urllib.parse import unquote, urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from atelier.agents.models.gateway import Gateway, ModelCallError
from atelier.agents.models.ledger import call_tags
from atelier.agents.models.scripted import token_estimate
from atelier.agents.models.tool_calls import (
    TOOL_TURN_NOTE,
    content_text,
    flatten_messages,
    openai_tool_calls,
    schema_model,
    tool_turn_schema,
)

T = TypeVar("T")


class _Tokened(Protocol):
    @property
    def token(self) -> str: ...


S = TypeVar("S", bound=_Tokened)
B = TypeVar("B", bound=BaseModel)


@dataclass
class EndpointSession:
    """One caller of the endpoint (an agent working on one case, or a whole `gateway serve`)."""

    gateway: Gateway
    agent: str = "external"
    tags: dict[str, str] = field(default_factory=dict)  # case, system
    roles: dict[str, str] = field(default_factory=dict)  # the agent's call name -> gateway role
    default_role: str = "system"
    embedder: str = "local"
    loop: asyncio.AbstractEventLoop | None = None  # where the gateway's calls run (the episode's loop)
    # the context they run in: the opening graph node's, so its trace (Studio) shows the agent's calls
    context: contextvars.Context | None = None
    token: str = field(default_factory=lambda: "atl-" + secrets.token_hex(16))
    calls: Counter = field(default_factory=Counter)  # requests per call name
    errors: list[str] = field(default_factory=list)

    def role_for(self, call: str) -> str:
        return self.roles.get(call, self.default_role)

    async def run(self, make: Callable[[], Coroutine[Any, Any, T]], call: str | None = None) -> T:
        """Run a gateway (or web) coroutine on the session's loop, tagged for the ledger with the
        case, system and, as its node, the agent's call name."""
        node = f"{self.agent}:{call}" if call else None

        async def tagged() -> T:
            with call_tags(**self.tags, node=node):
                return await make()

        if self.loop is None or self.loop is asyncio.get_running_loop():
            return await tagged()
        # the task is created in (a copy of) the context run_coroutine_threadsafe is called in
        context = (self.context or contextvars.copy_context()).copy()
        return await asyncio.wrap_future(context.run(asyncio.run_coroutine_threadsafe, tagged(), self.loop))


class TokenRegistry(Generic[S]):
    """Sessions by token, opened by episodes and read by the server's thread. With a `fallback`,
    unknown or missing tokens get it (`gateway serve`)."""

    def __init__(self, fallback: S | None = None) -> None:
        self._sessions: dict[str, S] = {}
        self._lock = threading.Lock()
        self.fallback = fallback

    def add(self, session: S) -> S:
        with self._lock:
            self._sessions[session.token] = session
        return session

    def remove(self, session: S) -> None:
        with self._lock:
            self._sessions.pop(session.token, None)

    def get(self, token: str | None) -> S | None:
        with self._lock:
            found = self._sessions.get(token or "")
        return found or self.fallback


class Sessions(TokenRegistry[EndpointSession]):
    def from_request(self, request: Request) -> EndpointSession | None:
        """The session of a request's bearer token."""
        header = request.headers.get("authorization", "")
        token = header.split(" ", 1)[1].strip() if header.lower().startswith("bearer ") else None
        return self.get(token)


class ChatRequest(BaseModel):
    """The fields of an OpenAI chat request this endpoint acts on; others are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model: str = "default"
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    response_format: dict[str, Any] | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str = "local"
    input: str | list[str] | list[int] | list[list[int]]


def _error(status: int, message: str, kind: str, *, retry: bool = False) -> JSONResponse:
    # x-should-retry: the gateway already retried; an OpenAI client must not multiply the attempts
    headers = {} if retry else {"x-should-retry": "false"}
    return JSONResponse(
        {"error": {"message": message, "type": kind, "code": kind}}, status_code=status, headers=headers
    )


def _call_name(model: str) -> str:
    """`openai/research` or `research` -> `research` (clients sometimes keep a provider prefix)."""
    return model.rsplit("/", 1)[-1].rsplit(":", 1)[-1] or "default"


MAX_SCHEMA_DEPTH = 100  # JSON levels (objects and arrays) of one schema, its $refs followed
_SCHEMA_DATA = frozenset({"const", "enum", "default", "examples"})  # values here are data, not schemas


def schema_problem(schema: Any) -> str | None:
    """Why an agent's JSON schema cannot be used, or None: a `$ref` cycle (a recursive schema: the
    scripted model's instance generator never finishes one, and the failure came back as a
    connection error retried to the end), a `$ref` that is not a JSON pointer resolving within the
    schema, or nesting deeper than `MAX_SCHEMA_DEPTH`. A bounded walk: each `$ref` target is
    walked once."""
    acyclic: set[str] = set()  # refs whose targets were walked without meeting a cycle

    def walk(node: Any, depth: int, trail: tuple[str, ...]) -> str | None:
        if depth > MAX_SCHEMA_DEPTH:
            return f"it is nested more than {MAX_SCHEMA_DEPTH} levels deep"
        if isinstance(node, list):
            children: list[Any] = node
        elif isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref not in acyclic:
                if ref in trail:
                    cycle = " -> ".join(trail[trail.index(ref) :] + (ref,))
                    return f"it is recursive: $ref {cycle}"
                target = _pointer_target(schema, ref)
                if target is None:
                    return f"$ref {ref!r} does not resolve within the schema (only local '#/...' references are taken)"
                problem = walk(target, depth + 1, trail + (ref,))
                if problem is not None:
                    return problem
                acyclic.add(ref)
            children = [value for key, value in node.items() if key not in _SCHEMA_DATA]
        else:
            return None
        for child in children:
            problem = walk(child, depth + 1, trail)
            if problem is not None:
                return problem
        return None

    return walk(schema, 0, ())


_MISSING = object()


def _pointer_target(schema: Any, ref: str) -> Any:
    """What a local `$ref` ("#" or "#/a/b", RFC 6901) points at in `schema`, or None."""
    if not ref.startswith("#") or (len(ref) > 1 and not ref.startswith("#/")):
        return None
    node = schema
    for raw in ref[2:].split("/") if len(ref) > 1 else []:
        part = unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict):
            node = node.get(part, _MISSING)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
        if node is _MISSING:
            return None
    return node


def _checked_schema(what: str, schema: Any) -> Any:
    problem = schema_problem(schema)
    if problem is not None:
        raise ValueError(f"{what} cannot be used: {problem}")
    return schema


async def _answer(session: EndpointSession, request: ChatRequest) -> dict[str, Any]:
    """The assistant message for `request`: content and, for tool turns, tool_calls."""
    call = _call_name(request.model)
    role = session.role_for(call)
    messages = flatten_messages(request.messages)
    gateway = session.gateway
    with_tools = bool(request.tools) and request.tool_choice != "none"
    if with_tools:
        for tool in request.tools or []:
            function = tool.get("function", tool)
            if isinstance(function, dict):
                _checked_schema(f"the parameters of tool {function.get('name')!r}", function.get("parameters"))
        schema = tool_turn_schema(request.tools or [], request.tool_choice or "auto")
        model = schema_model("ToolTurn", schema)
        asked = messages + [{"role": "user", "content": TOOL_TURN_NOTE}]
        turn = (await session.run(lambda: gateway.structured(role, asked, model), call)).root
        key = hashlib.sha256(json.dumps([asked, turn], sort_keys=True, default=str).encode()).hexdigest()
        tool_calls = openai_tool_calls(turn, key)
        return {"role": "assistant", "content": turn.get("content") or "", "tool_calls": tool_calls or None}
    response_format = request.response_format or {}
    kind = response_format.get("type")
    if kind == "json_schema":
        spec = response_format.get("json_schema") or {}
        name = spec.get("name") or "Answer"
        model = schema_model(name, _checked_schema(f"schema {name!r}", spec.get("schema") or {"type": "object"}))
    elif kind == "json_object":
        schema = response_format.get("schema") or {"type": "object"}
        model = schema_model("Answer", _checked_schema("schema 'Answer'", schema))
    else:
        text = await session.run(lambda: gateway.text(role, messages), call)
        return {"role": "assistant", "content": text}
    value = (await session.run(lambda: gateway.structured(role, messages, model), call)).root
    return {"role": "assistant", "content": json.dumps(value, ensure_ascii=False)}


def _completion(request: ChatRequest, message: dict[str, Any]) -> dict[str, Any]:
    prompt_tokens = sum(token_estimate(content_text(m.get("content"))) for m in request.messages)
    answer = (message.get("content") or "") + json.dumps(message.get("tool_calls") or "")
    digest = hashlib.sha256(json.dumps([request.messages, message], sort_keys=True, default=str).encode()).hexdigest()
    if not message.get("tool_calls"):
        message = {k: v for k, v in message.items() if k != "tool_calls"}
    return {
        "id": "chatcmpl-" + digest[:24],
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
            }
        ],
        # estimates: the exact counts of each provider request are in the run's ledger
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": token_estimate(answer),
            "total_tokens": prompt_tokens + token_estimate(answer),
        },
    }


def _stream(completion: dict[str, Any], include_usage: bool):
    """The completed answer as OpenAI server-sent events: role, content, tool calls, finish."""
    choice = completion["choices"][0]
    message = choice["message"]
    base = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        body = {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}], **extra}
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    if message.get("content"):
        yield chunk({"content": message["content"]})
    for index, call in enumerate(message.get("tool_calls") or []):
        yield chunk({"tool_calls": [{"index": index, **call}]})
    yield chunk({}, choice["finish_reason"])
    if include_usage:
        yield f"data: {json.dumps({**base, 'choices': [], 'usage': completion['usage']})}\n\n"
    yield "data: [DONE]\n\n"


async def _json_body(request: Request, model: type[B]) -> B | JSONResponse:
    try:
        return model.model_validate(json.loads(await request.body()))
    except json.JSONDecodeError as exc:
        return _error(400, f"the request body is not JSON: {exc.msg}", "invalid_request_error")
    except RecursionError:
        return _error(400, "the request body is nested too deeply", "invalid_request_error")
    except UnicodeDecodeError as exc:
        return _error(400, f"the request body is not UTF-8 (byte {exc.start})", "invalid_request_error")
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(body)"
        return _error(400, f"invalid request: {where}: {first['msg']}", "invalid_request_error")
    except ValueError as exc:  # an integer of more digits than Python converts (4300), ...
        return _error(400, f"the request body is not JSON this server reads: {exc}", "invalid_request_error")


def openai_routes(sessions: Sessions, prefix: str = "/v1") -> list[Route]:
    """The OpenAI-compatible routes under `prefix`."""

    async def caller(request: Request, model: type[B]) -> tuple[EndpointSession, B] | Response:
        session = sessions.from_request(request)
        if session is None:
            return _error(401, "unknown API key: this endpoint serves only the sessions it opened", "invalid_api_key")
        body = await _json_body(request, model)
        return body if isinstance(body, Response) else (session, body)

    async def chat_completions(request: Request) -> Response:
        called = await caller(request, ChatRequest)
        if isinstance(called, Response):
            return called
        session, body = called
        session.calls[_call_name(body.model)] += 1
        try:
            message = await _answer(session, body)
        except ValueError as exc:  # a schema or tool list the agent sent that cannot be used
            return _error(400, str(exc), "invalid_request_error")
        except ModelCallError as exc:
            session.errors.append(str(exc))
            return _error(502, str(exc), "model_call_error")
        completion = _completion(body, message)
        if body.stream:
            usage = bool((body.stream_options or {}).get("include_usage"))
            return StreamingResponse(_stream(completion, usage), media_type="text/event-stream")
        return JSONResponse(completion)

    async def embeddings(request: Request) -> Response:
        called = await caller(request, EmbeddingRequest)
        if isinstance(called, Response):
            return called
        session, body = called
        given = [body.input] if isinstance(body.input, str) else body.input
        texts = [t for t in given if isinstance(t, str)]
        if len(texts) < len(given):
            return _error(400, "input must be text (token arrays are not supported)", "invalid_request_error")
        session.calls["embeddings"] += 1
        vectors = await session.run(lambda: embed_texts(session, texts), "embeddings")
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
        tokens = sum(token_estimate(t) for t in texts)
        return JSONResponse(
            {
                "object": "list",
                "data": data,
                "model": body.model,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    async def models(request: Request) -> Response:
        session = sessions.from_request(request)
        if session is None:
            return _error(401, "unknown API key: this endpoint serves only the sessions it opened", "invalid_api_key")
        names = sorted({"default", *session.roles})
        return JSONResponse(
            {"object": "list", "data": [{"id": n, "object": "model", "owned_by": "atelier"} for n in names]}
        )

    return [
        Route(f"{prefix}/chat/completions", chat_completions, methods=["POST"]),
        Route(f"{prefix}/embeddings", embeddings, methods=["POST"]),
        Route(f"{prefix}/models", models, methods=["GET"]),
    ]


DEFAULT_MAX_BODY_BYTES = 8 * 2**20
DEFAULT_BODY_TIMEOUT_S = 60.0
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def is_loopback_host(host: str) -> bool:
    """`localhost`, or an IPv4/IPv6 loopback address (brackets allowed)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def checked_host(host: str, public: bool, why: str) -> None:
    """Refuse to listen beyond this machine unless asked to in so many words (`--public`): `why`
    says what a stranger reaching the server would get (`gateway serve`, `view`)."""
    from atelier.benchmarks.common.errors import ConfigError

    if not public and not is_loopback_host(host):
        raise ConfigError(
            f"--host {host}: not a loopback address; {why}, so serving beyond this machine needs --public"
        )


def loopback_hosts(port: int) -> frozenset[str]:
    """The Host headers a loopback server on `port` answers (the bare names too on port 80)."""
    names = {f"{name}:{port}" for name in LOOPBACK_NAMES}
    return frozenset(names | (set(LOOPBACK_NAMES) if port == 80 else set()))


def _loopback_origin(origin: str) -> bool:
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and is_loopback_host(parts.hostname or "")


class RequestBodyTooLarge(Exception):
    """Raised inside the app by `RequestGuard`'s receive once a body passes the cap."""


class RequestBodyTooSlow(Exception):
    """Raised inside the app by `RequestGuard`'s receive when a body has not arrived in time."""


class RequestGuard:
    """ASGI middleware in front of an endpoint that spends a provider key (`gateway serve`):

    - `hosts`: the Host headers accepted (None: any); a DNS-rebinding page reaches a loopback
      server under its own name, so only the bound address's names are answered -> 403;
    - an `Origin` header, when present, must be a loopback origin: a web page's cross-site request
      (a `text/plain` POST needs no preflight) is refused -> 403;
    - request bodies are capped at `max_body_bytes`, by Content-Length before reading and counted
      as the chunks arrive otherwise; the rest of a body over the cap is never read -> 413;
    - a body must arrive whole within `body_timeout_s` of the request's start (its headers): one
      that trickles (a client holding a connection and a worker open) -> 408;
    - a client that goes away mid-body ends its request quietly (no traceback per abandoned body).

    Install it with Starlette's `add_middleware`, so it sits between Starlette's outer error
    handler and the routes and turns its own `RequestBodyTooLarge` into the 413.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        hosts: frozenset[str] | None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    ) -> None:
        self.app = app
        self.hosts = None if hosts is None else frozenset(h.lower() for h in hosts)
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = headers.get("host", "").lower()
        if self.hosts is not None and host not in self.hosts:
            await self._refuse(scope, receive, send, 403, f"Host {host!r} is not this server's address")
            return
        origin = headers.get("origin")
        if origin is not None and not _loopback_origin(origin):
            await self._refuse(scope, receive, send, 403, f"Origin {origin!r} is not a loopback origin")
            return
        length = headers.get("content-length", "")  # the HTTP server has refused one that is not digits
        if length.isdigit() and int(length) > self.max_body_bytes:
            await self._refuse(scope, receive, send, 413, self._too_large())
            return

        received = 0
        started = False
        body_done = False
        deadline = asyncio.get_running_loop().time() + self.body_timeout_s  # from the request's start

        async def capped_receive() -> Message:
            nonlocal received, body_done, deadline
            if body_done:  # past the body: a streaming answer waits for the client to leave, untimed
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise RequestBodyTooSlow(f"the request body did not arrive within {self.body_timeout_s:g} s") from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise RequestBodyTooLarge(self._too_large())
                body_done = not message.get("more_body", False)
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, capped_receive, tracked_send)
        except (RequestBodyTooLarge, RequestBodyTooSlow) as exc:
            if started:
                raise
            await self._refuse(scope, receive, send, 413 if isinstance(exc, RequestBodyTooLarge) else 408, str(exc))
        except ClientDisconnect:
            return  # the client went away mid-body: no one to answer, nothing to report

    def _too_large(self) -> str:
        return f"the request body is over the endpoint's limit of {self.max_body_bytes} bytes"

    @staticmethod
    async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, message: str) -> None:
        kind = {413: "request_too_large", 408: "request_timeout"}.get(status, "forbidden")
        response = _error(status, message, kind)
        response.headers["connection"] = "close"  # the body left unread must not be taken for the next request
        await response(scope, receive, send)


async def embed_texts(session: EndpointSession, texts: list[str]) -> list[list[float]]:
    """Embed with the session's embedder, through the gateway's cache, with one ledger line."""
    from atelier.agents.models.cache import request_key
    from atelier.agents.models.embeddings import get_embedder

    gateway = session.gateway
    key = request_key({"embedding": session.embedder, "texts": texts})
    started = time.perf_counter()
    common = {
        "role": "embedding",
        "model": session.embedder,
        "call_id": secrets.token_hex(6),
        "kind": "embedding",
        "prompt_tokens": sum(token_estimate(t) for t in texts),
        "attempts": 1,
    }
    cached = gateway.cache.get(key) if gateway.cache else None
    if cached is not None:
        gateway.ledger.record(**common, cache_hit=True, latency_ms=round((time.perf_counter() - started) * 1000, 3))
        return cached["vectors"]
    embedder = get_embedder(session.embedder)
    vectors = (await asyncio.to_thread(embedder.embed, texts)).tolist() if texts else []
    if gateway.cache is not None:
        gateway.cache.put(key, {"vectors": vectors})
    gateway.ledger.record(**common, latency_ms=round((time.perf_counter() - started) * 1000, 3))
    return vectors
