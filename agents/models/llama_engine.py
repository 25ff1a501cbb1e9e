"""llama.cpp's chat completions behind an OpenAI-compatible HTTP API, on cyllama's prebuilt binding.

cyllama installs llama.cpp as a manylinux wheel built for any x86-64 CPU with AVX2 (no AVX-512, no
AMX), so nothing compiles on install. It ships the binding, not an OpenAI server; this module is
that server, as thin as the gateway needs:

    GET  /v1/models             the one model, under its alias
    POST /v1/chat/completions   messages -> one choice; `stream` (server-sent events, usage at the end)

`response_format` `{"type": "json_schema", "json_schema": {"schema": ...}}` and
`{"type": "json_object", "schema": ...}` constrain decoding with a grammar made from the schema by
llama.cpp's own converter, so a finished answer always parses; a schema it cannot convert is
refused (400), never ignored. `tools`, `n` > 1 and other options it cannot honour are refused by
name too. The prompt is the model's own chat template (GGUF `tokenizer.chat_template`, rendered by
jinja2 as the Hugging Face tokenizer does). A prompt longer than the context is refused with
OpenAI's wording ("This model's maximum context length is ..."); a completion that reaches
`max_tokens` or the end of the context stops with `finish_reason = "length"`.

Requests are served one at a time (one llama.cpp context). Concurrent episodes interleave their
prompts, so the state after each answer is kept in a RAM cache of prompt states; a request resumes
from the longest prefix it shares with the live context or a cached state.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

PENALTY_LAST_N = 64  # the tokens repeat_penalty looks back on (llama.cpp's default)
# options OpenAI clients send that change nothing here (or are the defaults we follow anyway)
_HARMLESS = {"user", "metadata", "store", "logprobs", "parallel_tool_calls", "service_tier", "stream_options"}


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.get("text", "") for part in self.content if part.get("type") == "text")
        return self.content or ""


class ChatRequest(BaseModel):
    """The subset of OpenAI's chat request the engine honours; anything else is refused by name."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=0.8, ge=0.0, le=2.0)
    top_p: float = Field(default=0.95, gt=0.0, le=1.0)
    # llama.cpp's own sampling defaults, as its server and llama-cpp-python's apply them: a small
    # penalty on tokens repeated within the last 64, which keeps a 135M model from looping greedily
    repeat_penalty: float = Field(default=1.1, ge=0.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    n: Literal[1] = 1
    stream: bool = False
    response_format: dict[str, Any] | None = None

    def unsupported(self) -> list[str]:
        extra = set(self.model_extra or {}) - _HARMLESS
        return sorted(name for name in extra if (self.model_extra or {}).get(name) is not None)

    def limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def stops(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else [s for s in self.stop if s]

    def output_schema(self) -> dict[str, Any] | None:
        """The JSON schema the answer must follow (`{"type": "object"}` for a bare json_object),
        None for free text. Raises ValueError for a response_format it does not know."""
        form = self.response_format
        if not form or form.get("type") in (None, "text"):
            return None
        if form["type"] == "json_object":
            return form.get("schema") or {"type": "object"}
        if form["type"] == "json_schema":
            schema = (form.get("json_schema") or {}).get("schema")
            if not isinstance(schema, dict):
                raise ValueError("response_format json_schema needs json_schema.schema (an object)")
            return schema
        raise ValueError(f"response_format type {form['type']!r} is not supported: text, json_object or json_schema")


class RequestError(Exception):
    """A request the engine will not serve: answered 400 with OpenAI's error shape."""

    def __init__(self, message: str, code: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.code = code


class Completion(BaseModel):
    text: str
    finish_reason: Literal["stop", "length"]
    prompt_tokens: int
    completion_tokens: int


class PromptStates:
    """States of the context after earlier answers, by their tokens, least recently used dropped
    first once `capacity` bytes are held."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._states: OrderedDict[tuple[int, ...], bytes] = OrderedDict()
        self._bytes = 0

    def put(self, tokens: tuple[int, ...], state: bytes) -> None:
        if len(state) > self.capacity:
            return
        if tokens in self._states:
            self._bytes -= len(self._states.pop(tokens))
        self._states[tokens] = state
        self._bytes += len(state)
        while self._bytes > self.capacity:
            _, dropped = self._states.popitem(last=False)
            self._bytes -= len(dropped)

    def longest(self, prompt: list[int]) -> tuple[int, tuple[int, ...] | None]:
        """The cached state sharing the longest prefix with `prompt`, and that prefix's length."""
        best, key = 0, None
        for tokens in self._states:
            shared = common_prefix(tokens, prompt)
            if shared > best:
                best, key = shared, tokens
        return best, key

    def take(self, tokens: tuple[int, ...]) -> bytes:
        self._states.move_to_end(tokens)
        return self._states[tokens]


def common_prefix(a: tuple[int, ...] | list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class Engine:
    """One GGUF model and one context, serving one request at a time."""

    def __init__(
        self, gguf: str, alias: str, n_ctx: int, threads: int, n_batch: int, cache_bytes: int, verbose: bool = False
    ) -> None:
        from cyllama.llama import llama_cpp as cy
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        if not verbose:
            cy.disable_logging()
        self._cy = cy
        self.alias = alias
        self.n_ctx = n_ctx
        self.n_batch = n_batch
        self.model = cy.LlamaModel(gguf, cy.LlamaModelParams())
        params = cy.LlamaContextParams()
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = n_batch
        params.n_threads = params.n_threads_batch = threads
        params.n_seq_max = 1
        self.context = cy.LlamaContext(self.model, params)
        self.vocab = self.model.get_vocab()
        self.created = int(time.time())

        def raise_exception(message: str) -> None:
            raise RequestError(f"the model's chat template refused the messages: {message}")

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        self._template = env.from_string(self.model.get_default_chat_template())
        self._special = {
            "bos_token": self.vocab.token_to_piece(self.vocab.token_bos(), special=True),
            "eos_token": self.vocab.token_to_piece(self.vocab.token_eos(), special=True),
        }
        self._lock = threading.Lock()
        self._tokens: list[int] = []  # what the context holds now
        self._states = PromptStates(cache_bytes)

    # ------------------------------------------------------------------ one completion

    def prompt_tokens(self, request: ChatRequest) -> list[int]:
        messages = [{**m.model_dump(exclude_none=True), "content": m.text()} for m in request.messages]
        prompt = self._template.render(messages=messages, add_generation_prompt=True, **self._special)
        return self.vocab.tokenize(prompt, add_special=self.vocab.get_add_bos(), parse_special=True)

    def _sampler(self, request: ChatRequest, schema: dict[str, Any] | None):
        cy = self._cy
        sampler = cy.LlamaSampler(cy.LlamaSamplerChainParams())
        sampler.add_penalties(
            PENALTY_LAST_N, request.repeat_penalty, request.frequency_penalty, request.presence_penalty
        )
        if schema is not None:
            try:
                grammar = cy.json_schema_to_grammar(json.dumps(schema))
            except (ValueError, RuntimeError) as exc:
                raise RequestError(f"response_format schema is not supported (no grammar for it): {exc}") from None
            sampler.add_grammar(self.vocab, grammar, "root")
        if request.temperature == 0:
            sampler.add_greedy()
        else:
            sampler.add_top_k(40)
            sampler.add_top_p(request.top_p, 1)
            sampler.add_min_p(0.05, 1)
            sampler.add_temp(request.temperature)
            sampler.add_dist(request.seed if request.seed is not None else 0xFFFFFFFF)
        return sampler

    def _load_prompt(self, prompt: list[int]) -> None:
        """Bring the context to `prompt` from the longest prefix it shares with what the context
        holds or with a cached state (the last token is always decoded again: its logits start
        the answer)."""
        keep = min(common_prefix(self._tokens, prompt), len(prompt) - 1)
        cached, key = self._states.longest(prompt)
        cached = min(cached, len(prompt) - 1)
        if key is not None and cached > keep:
            self.context.memory_seq_rm(0, -1, -1)
            self.context.set_state_seq_data(self._states.take(key), 0)
            self._tokens, keep = list(key), cached
        self.context.memory_seq_rm(0, keep, -1)
        self._tokens = self._tokens[:keep]
        for start in range(keep, len(prompt), self.n_batch):
            chunk = prompt[start : start + self.n_batch]
            self._decode(chunk, start)

    def _decode(self, tokens: list[int], position: int) -> None:
        try:
            self.context.decode(self._cy.llama_batch_get_one(tokens, position))
        except BaseException:
            self._tokens = []  # the context's contents are unknown now: start the next prompt afresh
            self.context.memory_seq_rm(0, -1, -1)
            raise
        self._tokens.extend(tokens)

    def complete(self, request: ChatRequest, on_text: Callable[[str], None] | None = None) -> Completion:
        """Answer one request (blocking; requests queue on the engine's lock). `on_text` receives
        the answer's text as it grows, piece by piece."""
        if unsupported := request.unsupported():
            raise RequestError(f"not supported by this server: {', '.join(unsupported)}")
        try:
            schema = request.output_schema()
        except ValueError as exc:
            raise RequestError(str(exc)) from None
        with self._lock:
            prompt = self.prompt_tokens(request)
            if len(prompt) >= self.n_ctx:
                raise RequestError(
                    f"This model's maximum context length is {self.n_ctx} tokens. However, you requested "
                    f"{len(prompt)} tokens in the messages. Please reduce the length of the messages.",
                    code="context_length_exceeded",
                )
            sampler = self._sampler(request, schema)
            self._load_prompt(prompt)
            room = self.n_ctx - len(prompt)
            limit = min(request.limit() or room, room)
            return self._generate(sampler, limit, request.stops(), len(prompt), on_text)

    def _generate(
        self, sampler: Any, limit: int, stops: list[str], n_prompt: int, on_text: Callable[[str], None] | None
    ) -> Completion:
        generated: list[int] = []
        text, sent, finish = "", 0, "length"
        while len(generated) < limit:
            token = sampler.sample(self.context, -1)
            if self.vocab.is_eog(token):
                finish = "stop"
                break
            generated.append(token)
            text = self.vocab.detokenize(generated, remove_special=False, unparse_special=False)
            hit = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
            if hit >= 0:
                text, finish = text[:hit], "stop"
                break
            if len(generated) < limit:
                self._decode([token], n_prompt + len(generated) - 1)
            # hold back what may be the start of a stop string or of a multi-byte character
            ready = len(text) - max((len(s) - 1 for s in stops), default=0)
            if on_text is not None and ready > sent and not text.endswith("\ufffd"):
                on_text(text[sent:ready])
                sent = ready
        if on_text is not None and len(text) > sent:
            on_text(text[sent:])
        self._states.put(tuple(self._tokens), self.context.get_state_seq_data(0))
        return Completion(text=text, finish_reason=finish, prompt_tokens=n_prompt, completion_tokens=len(generated))

    # ------------------------------------------------------------------ OpenAI's shapes

    def answer(self, request: ChatRequest, done: Completion) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.model or self.alias,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": done.text},
                    "finish_reason": done.finish_reason,
                    "logprobs": None,
                }
            ],
            "usage": usage(done),
        }

    def models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": self.alias, "object": "model", "created": self.created, "owned_by": "atelier"}],
        }


def usage(done: Completion) -> dict[str, int]:
    return {
        "prompt_tokens": done.prompt_tokens,
        "completion_tokens": done.completion_tokens,
        "total_tokens": done.prompt_tokens + done.completion_tokens,
    }


def error_body(message: str, code: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}


def create_app(engine: Engine):
    """The Starlette app serving `engine`."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    async def models(_: Request) -> Response:
        return JSONResponse(engine.models())

    async def chat(http: Request) -> Response:
        try:
            request = ChatRequest.model_validate(await http.json())
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            return JSONResponse(error_body(f"validation error: {problems}"), status_code=400)
        except ValueError as exc:
            return JSONResponse(error_body(f"the request body is not JSON: {exc}"), status_code=400)
        if request.stream:
            return await _stream(request)
        try:
            done = await asyncio.to_thread(engine.complete, request)
        except RequestError as exc:
            return JSONResponse(error_body(str(exc), exc.code), status_code=400)
        return JSONResponse(engine.answer(request, done))

    async def _stream(request: ChatRequest) -> Response:
        loop = asyncio.get_running_loop()
        pieces: asyncio.Queue[str | Completion | BaseException] = asyncio.Queue()

        def send(text: str) -> None:
            loop.call_soon_threadsafe(pieces.put_nowait, text)

        def work() -> None:
            try:
                done = engine.complete(request, send)
            except BaseException as exc:  # noqa: BLE001 - handed to the response, which reports it
                loop.call_soon_threadsafe(pieces.put_nowait, exc)
            else:
                loop.call_soon_threadsafe(pieces.put_nowait, done)

        worker = loop.run_in_executor(None, work)
        first = await pieces.get()
        if isinstance(first, RequestError):
            await worker
            return JSONResponse(error_body(str(first), first.code), status_code=400)
        if isinstance(first, BaseException):
            await worker
            raise first

        async def events() -> AsyncIterator[str]:
            ident, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
            head = {"id": ident, "object": "chat.completion.chunk", "created": created}
            head["model"] = request.model or engine.alias

            def event(choices: list[dict[str, Any]], **extra: Any) -> str:
                return f"data: {json.dumps({**head, 'choices': choices, **extra})}\n\n"

            def delta(content: dict[str, Any], finish: str | None = None) -> list[dict[str, Any]]:
                return [{"index": 0, "delta": content, "finish_reason": finish}]

            yield event(delta({"role": "assistant", "content": ""}))
            item: str | Completion | BaseException = first
            while not isinstance(item, Completion):
                if isinstance(item, BaseException):
                    raise item
                yield event(delta({"content": item}))
                item = await pieces.get()
            yield event(delta({}, item.finish_reason))
            yield event([], usage=usage(item))
            yield "data: [DONE]\n\n"
            await worker

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(
        routes=[
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/chat/completions", chat, methods=["POST"]),
        ]
    )
