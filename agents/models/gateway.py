"""The model gateway: every LLM call in Atelier goes through `Gateway`.

One path for every provider (litellm, with `scripted` registered as a custom provider, and local
GGUF models served by llama.cpp on loopback for the run):

    cache lookup (an identical request in flight: await its answer) -> (local model: start its
    server) -> rate limit + concurrency bound
    -> provider call with timeout -> bounded retries on timeouts / 429 / 5xx, after the wait the
    provider asked for (`Retry-After`) or else a jittered exponential backoff; errors no retry can
    fix (bad request, validation errors whatever their status, unknown model, authentication) fail
    at once with the server's message
    -> (structured) the strongest output mode the endpoint accepts (`agents.models.structured_output`),
    parse + validate into a pydantic model, one repair attempt
    -> cache store -> one ledger line per request

Roles (`system`, `user_sim`, `judge`, ...) each have their own `ModelSettings`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import re
import threading
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, SecretStr, ValidationError

from atelier.agents.models.answer_contract import (
    WHOLE,
    IncompleteAnswer,
    answer_breaches,
    answer_or_reasoning,
    choice_finish,
    note,
    recording_answers,
    replayed,
    stored,
    stream_broken,
    with_a_choice,
)
from atelier.agents.models.cache import RedisResponseCache, ResponseCache, request_key
from atelier.agents.models.grounding import (
    GroundedAnswer,
    Grounding,
    ProviderReply,
    billed_cost,
    interactions_call,
    is_perplexity,
    perplexity_call,
    read_chat,
    read_chat_stream,
    responses_call,
)
from atelier.agents.models.ledger import Ledger
from atelier.agents.models.litellm_setup import configured_litellm, litellm_call_scope
from atelier.agents.models.local_model import SERVERS, LlamaServer, LocalModelError, LocalModelSpec, LocalServerDied
from atelier.agents.models.provider_errors import Verdict, bad_credentials, classify, server_message, status_of
from atelier.agents.models.scripted import PROVIDER as SCRIPTED_PROVIDER
from atelier.agents.models.scripted import parse_model_string
from atelier.agents.models.settings import BACKGROUND_IS_RESPONSES, ModelSettings, settings_for_role
from atelier.agents.models.spend import BUDGET_REACHED, SpendGuard, call_bound_usd, output_limit
from atelier.agents.models.structured_output import (
    MODES,
    ModeMemory,
    StructuredMode,
    answer_text,
    mode_params,
    supported_modes,
)
from atelier.agents.models.trace import traced_request
from atelier.agents.prompts import json_instructions, repair_instructions
from atelier.benchmarks.common.degradation import Degradation

T = TypeVar("T", bound=BaseModel)


class ModelCallError(RuntimeError):
    """A model call failed for good: after retries, or at once with an error no retry can fix
    (`verdict` `refused` or `fatal`; `server_message` is what the server said)."""

    def __init__(
        self,
        message: str,
        *,
        role: str,
        model: str,
        attempts: int,
        verdict: Verdict = "retry",
        status: int | None = None,
        server_message: str | None = None,
    ) -> None:
        super().__init__(message)
        self.role = role
        self.model = model
        self.attempts = attempts
        self.verdict = verdict
        self.status = status
        self.server_message = server_message


class StructuredOutputError(ModelCallError):
    """The model's answer did not validate against the requested schema, even after repair."""

    def __init__(self, message: str, *, role: str, model: str, attempts: int, raw: str) -> None:
        super().__init__(message, role=role, model=model, attempts=attempts)
        self.raw = raw


class _Request(BaseModel):
    """A provider request as the cache sees it: everything that changes the answer."""

    model: str
    api_base: str | None
    messages: list[dict[str, Any]]
    structured_mode: StructuredMode | None
    output: dict[str, Any]  # the mode's parameters: response_format or a forced tool
    temperature: float
    seed: int | None
    max_tokens: int | None
    extra: dict[str, Any]


@dataclass(frozen=True)
class _Answered:
    """About one answer: its cache key, whether it was cut at max_tokens (finish_reason "length"),
    (a grounded request) the provider's citations, search results and reported usage, and what it
    broke of the provider contract."""

    key: str | None
    cut: bool = False
    grounding: dict[str, Any] | None = None
    cost_usd: float = 0.0  # what the provider call cost (0: a cache hit, a free model)
    # what the answer broke of the provider contract (agents.models.answer_contract)
    broken: tuple[Degradation, ...] = ()


@dataclass(frozen=True)
class _Schema:
    name: str
    schema: dict[str, Any]


@dataclass(frozen=True)
class StreamTiming:
    """One streamed text request: time to the first token, total time, and the server's counts."""

    ttft_ms: float
    total_ms: float
    completion_tokens: int
    text: str


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def extract_json(text: str) -> Any:
    """The JSON value in a model's answer: bare, fenced, or between the outer braces."""
    text = text.strip()
    candidates = [text]
    candidates += [m.group(1).strip() for m in _FENCE.finditer(text)]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    error: json.JSONDecodeError | None = None
    for candidate in candidates:
        try:
            # strict=False: raw control characters (a newline) inside strings are kept, not refused;
            # llama.cpp's schema grammars let a model write them
            return json.loads(candidate, strict=False)
        except json.JSONDecodeError as exc:
            error = error or exc
    raise ValueError(f"not valid JSON ({error.msg} at char {error.pos})" if error else "empty answer")


class _ModelLimits:
    """Per-model rate limiters and concurrency bounds, shared by every gateway in the process."""

    def __init__(self) -> None:
        self._limiters: dict[tuple[str, int], Any] = {}
        # per event loop (a semaphore belongs to one), held weakly: a loop that ended (each
        # `asyncio.run`) takes its semaphores with it
        self._semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, int], asyncio.Semaphore]]
        self._semaphores = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def semaphore(self, model: str, bound: int) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        with self._lock:
            mine = self._semaphores.setdefault(loop, {})
            if (model, bound) not in mine:
                mine[(model, bound)] = asyncio.Semaphore(bound)
            return mine[(model, bound)]

    def limiter(self, model: str, rpm: int):
        from aiolimiter import AsyncLimiter

        with self._lock:
            if (model, rpm) not in self._limiters:
                # a smooth rate, one request per 60/rpm s with a burst of two, so a late wake-up of the
                # loop can catch its slot up rather than lose it: `AsyncLimiter(rpm, 60)` would let a
                # whole minute's requests go at once, which a provider limiting its rate answers with 429s
                self._limiters[(model, rpm)] = AsyncLimiter(2, 120 / rpm)
            return self._limiters[(model, rpm)]


_LIMITS = _ModelLimits()

RETRY_AFTER_MAX_S = 120.0  # a longer wait a provider asks for is cut to this


def retry_after_s(exc: BaseException) -> float | None:
    """How long a provider's error asked to wait before a retry: its `retry-after-ms` header (as
    OpenAI sends it), else `Retry-After` (seconds, or an HTTP date); None when it did not say."""
    from email.utils import parsedate_to_datetime

    headers = getattr(exc, "litellm_response_headers", None) or getattr(getattr(exc, "response", None), "headers", None)
    if not headers:
        return None
    milliseconds, value = headers.get("retry-after-ms"), headers.get("retry-after")
    try:
        if milliseconds is not None:
            return max(float(milliseconds) / 1000, 0.0)
        if value is not None:
            return max(float(value), 0.0)
    except ValueError:
        with contextlib.suppress(TypeError, ValueError):  # not a number: an HTTP date, or nothing usable
            return max(parsedate_to_datetime(value).timestamp() - time.time(), 0.0)
    return None


def _wait_retry_after(otherwise):
    """A tenacity wait: what the failed attempt's provider asked for (`retry_after_s`, at most
    RETRY_AFTER_MAX_S), else `otherwise` (the jittered exponential backoff)."""

    def wait(retry_state) -> float:
        outcome = retry_state.outcome
        exc = outcome.exception() if outcome is not None and outcome.failed else None
        said = retry_after_s(exc) if exc is not None else None
        return min(said, RETRY_AFTER_MAX_S) if said is not None else otherwise(retry_state)

    return wait


async def _retried(attempt: Callable[[], Awaitable[None]], settings: ModelSettings, failed: BaseException) -> None:
    """Attempts 2 to `max_retries + 1` of a call whose first attempt failed with `failed` (retryable),
    on the schedule tenacity would have kept had it made the first attempt too: the wait after
    attempt n is the provider's Retry-After, else the jittered exponential backoff for n."""
    from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_exponential_jitter

    wait = _wait_retry_after(
        wait_exponential_jitter(initial=settings.retry_backoff_s, max=60, jitter=settings.retry_backoff_s)
    )
    first = RetryCallState(None, None, (), {})  # type: ignore[arg-type]  # only the wait reads it
    first.set_exception((type(failed), failed, failed.__traceback__))
    await asyncio.sleep(wait(first))

    def after_the_first(state: RetryCallState) -> float:  # tenacity's attempt n is the call's n + 1
        later = RetryCallState(None, None, (), {})  # type: ignore[arg-type]
        later.attempt_number, later.outcome = state.attempt_number + 1, state.outcome
        return wait(later)

    retrying = AsyncRetrying(
        stop=stop_after_attempt(settings.max_retries),
        wait=after_the_first,
        retry=retry_if_exception(lambda exc: classify(exc) == "retry"),
        reraise=True,
    )
    async for step in retrying:
        with step:
            await attempt()


_WHY = {401: "authentication failed", 403: "permission denied", 404: "unknown model or endpoint"}


def _failure_message(role: str, model: str, exc: BaseException, verdict: Verdict, attempts: int) -> str:
    plural = "s" * (attempts != 1)
    if verdict == "retry":
        what = "timed out" if isinstance(exc, asyncio.TimeoutError) else f"failed: {type(exc).__name__}: {exc}"
        return f"{role} model {model} {what} (after {attempts} attempt{plural})"
    status = status_of(exc)
    why = (
        "authentication failed"
        if bad_credentials(exc) and status not in _WHY
        else _WHY.get(status or 0) or ("request refused" if verdict == "refused" else type(exc).__name__)
    )
    where = f"HTTP {status}, " if status else ""
    return f"{role} model {model}: {why} ({where}not retried): {server_message(exc)}"


def set_model_limits(limits) -> object:
    """Replace the process's model limits (what `_LIMITS` is asked for a model's semaphore and rate
    limiter) and return the previous ones. The Ray executor's workers install cluster-wide limits
    here (`runs.executors.limits`), so every process of a run shares one bound per model."""
    global _LIMITS
    previous, _LIMITS = _LIMITS, limits
    return previous


class _InFlight:
    """One gateway's provider calls in flight, by cache key. An identical request made meanwhile
    waits for the call's end rather than asking too, then reads its answer from the cache (a cache
    hit in the ledger). If the call fails, the waiters fail with the same error: its retries are
    spent, and retrying again would multiply them. If it is cancelled, the waiters ask again.
    Futures of `concurrent.futures`, as a gateway serves callers on more than one event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[str, Future[None]] = {}

    def join(self, key: str) -> Future[None] | None:
        """None: the caller leads the call (and must `land` it); else the leader's future."""
        with self._lock:
            running = self._calls.get(key)
            if running is not None:
                return running
            future: Future[None] = Future()
            future.set_running_or_notify_cancel()  # so a waiter's cancellation cannot cancel it for the others
            self._calls[key] = future
            return None

    def land(self, key: str, failure: BaseException | None) -> None:
        with self._lock:
            future = self._calls.pop(key)
        if failure is None:
            future.set_result(None)
        else:
            future.set_exception(failure)


class Gateway:
    def __init__(
        self,
        roles: Mapping[str, ModelSettings] | None = None,
        *,
        cache: ResponseCache | RedisResponseCache | None = None,
        ledger: Ledger | None = None,
        modes: ModeMemory | None = None,
        spend: SpendGuard | None = None,
    ) -> None:
        self.roles = dict(roles or {"system": ModelSettings(), "judge": ModelSettings(), "user_sim": ModelSettings()})
        self.cache = cache
        self.ledger = ledger or Ledger(None)
        self.spend = spend  # a run's budget: every priced call holds its bound while in flight (agents.models.spend)
        self.modes = modes or ModeMemory()
        self._local: dict[LocalModelSpec, LlamaServer] = {}  # the local servers this gateway uses
        self._local_dead: dict[LocalModelSpec, LocalServerDied] = {}  # died as they started: not started again
        self._local_specs: dict[str, LocalModelSpec] = {}
        self._local_lock = threading.Lock()
        self._in_flight = _InFlight()

    def settings(self, role: str) -> ModelSettings:
        return settings_for_role(self.roles, role)

    @property
    def dry_run(self) -> bool:
        """True when any role is served by the scripted model."""
        return any(s.is_scripted for s in self.roles.values())

    # ------------------------------------------------------------------ public API

    async def text(self, role: str, messages: list[dict[str, Any]]) -> str:
        content, answered = await self._request(role, messages, mode=None, schema=None, kind="text")
        note(answered.broken)
        return content

    async def grounded(self, role: str, messages: list[dict[str, Any]], grounding: Grounding) -> GroundedAnswer:
        """Ask a model that researches the web itself (`agents.models.grounding`): its text with
        the citations, search results and usage its provider returned. Cached and ledgered like
        every call (the ledger line adds reasoning tokens, citation tokens and web searches)."""
        content, answered = await self._request(
            role, messages, mode=None, schema=None, kind="grounded", grounding=grounding
        )
        note(answered.broken)
        return GroundedAnswer.model_validate({**(answered.grounding or {}), "text": content})

    async def structured(self, role: str, messages: list[dict[str, Any]], schema: type[T]) -> T:
        """Ask for an instance of `schema` in the strongest mode the endpoint accepts; validate;
        repair once; raise StructuredOutputError."""
        wanted = _Schema(schema.__name__, _json_schema(schema))
        messages = _with_json_instructions(messages, wanted.schema)
        content, first, mode = await self._structured_request(role, messages, wanted)
        try:
            answer = _validate(schema, content)
            note(first.broken)  # an answer that broke the contract yet validated is used: said
            return answer
        except ValueError as first_error:
            repair = messages + [
                {"role": "assistant", "content": content},
                {"role": "user", "content": repair_instructions(str(first_error))},
            ]
            fixed, second = await self._request(role, repair, mode=mode, schema=wanted, kind="repair")
            try:
                answer = _validate(schema, fixed)
                note(second.broken)
                return answer
            except ValueError as second_error:
                for answered in (first, second):  # a rerun should ask again, not replay the failure
                    if self.cache and answered.key:
                        self.cache.discard(answered.key)
                settings = self.settings(role)
                cut = (
                    f"; the answer was cut at max_tokens = {settings.max_tokens} before it was complete: raise "
                    f"max_tokens for the {role} role"
                    if second.cut
                    else ""
                )
                raise StructuredOutputError(
                    f"{role} model {settings.model} gave no valid {schema.__name__} after one repair "
                    f"({mode} mode): {second_error}{cut}",
                    role=role,
                    model=settings.model,
                    attempts=2,
                    raw=fixed,
                ) from second_error

    async def stream_timing(self, role: str, messages: list[dict[str, Any]]) -> StreamTiming:
        """Stream one text answer (never cached): time to the first token and in all (benchmarks)."""
        settings = self.settings(role)
        kwargs, served = await self._provider_kwargs(role, settings, messages, mode=None, schema=None)
        kwargs.update(stream=True, stream_options={"include_usage": True})
        litellm = configured_litellm()
        first: float | None = None
        parts: list[str] = []
        completion_tokens = 0
        async with _LIMITS.semaphore(served.endpoint, served.max_concurrency):
            self._raise_if_server_died(settings)
            started = time.perf_counter()
            try:
                stream = await asyncio.wait_for(litellm.acompletion(**kwargs), timeout=served.timeout_s)
            except Exception:
                await asyncio.to_thread(self._raise_if_server_died, settings, 0.5)
                raise
            async for chunk in stream:
                delta = chunk.choices[0].delta.content if chunk.choices else None
                if delta:
                    first = first or time.perf_counter()
                    parts.append(delta)
                usage = getattr(chunk, "usage", None)
                if usage is not None and getattr(usage, "completion_tokens", None):
                    completion_tokens = int(usage.completion_tokens)
            ended = time.perf_counter()
        return StreamTiming(
            ttft_ms=round(((first or ended) - started) * 1000, 3),
            total_ms=round((ended - started) * 1000, 3),
            completion_tokens=completion_tokens,
            text="".join(parts),
        )

    async def aclose(self) -> None:
        """Release the local model servers this gateway started or shared (the last user stops one)."""
        with self._local_lock:
            specs, self._local = list(self._local), {}
        for spec in specs:
            await asyncio.to_thread(SERVERS.release, spec)

    # ------------------------------------------------------------------ structured output modes

    async def _structured_request(
        self, role: str, messages: list[dict[str, Any]], schema: _Schema
    ) -> tuple[str, _Answered, StructuredMode]:
        settings = self.settings(role)
        if settings.structured_mode != "auto":
            content, answered = await self._request(
                role, messages, mode=settings.structured_mode, schema=schema, kind="structured"
            )
            return content, answered, settings.structured_mode
        known = self.modes.known(settings.endpoint)
        if known is not None:
            return await self._first_accepted(role, settings, messages, schema, start=known, learn=False)
        async with self.modes.discovery_lock(settings.endpoint):
            known = self.modes.known(settings.endpoint)  # found by another call while this one waited
            if known is None:
                return await self._first_accepted(role, settings, messages, schema, start=None, learn=True)
        # outside the lock: the calls that waited for the discovery run side by side again
        return await self._first_accepted(role, settings, messages, schema, start=known, learn=False)

    async def _first_accepted(
        self,
        role: str,
        settings: ModelSettings,
        messages: list[dict[str, Any]],
        schema: _Schema,
        *,
        start: StructuredMode | None,
        learn: bool,
    ) -> tuple[str, _Answered, StructuredMode]:
        """Ask in `start` (default: the strongest mode) and weaker modes until one is accepted."""
        served_model = "openai/local" if settings.is_local else settings.model
        supported = MODES if settings.is_scripted else supported_modes(served_model)
        candidates = [m for m in MODES[MODES.index(start or MODES[0]) :] if m in supported] or ["prompt"]
        refusals: list[str] = []
        for mode in candidates:
            try:
                content, answered = await self._request(
                    role, messages, mode=mode, schema=schema, kind="structured", may_fall_back=mode != candidates[-1]
                )
            except ModelCallError as exc:
                if exc.verdict != "refused" or mode == candidates[-1]:
                    if refusals and exc.verdict == "refused":
                        raise ModelCallError(
                            f"{role} model {settings.model} refused every structured output mode "
                            f"({', '.join(candidates)}); it said: "
                            + " | ".join(refusals + [f"{mode}: {exc.server_message}"]),
                            role=role,
                            model=settings.model,
                            attempts=len(refusals) + 1,
                            verdict="refused",
                            status=exc.status,
                            server_message=exc.server_message,
                        ) from exc
                    raise
                refusals.append(f"{mode}: {exc.server_message}")
                continue
            if learn or mode == start:  # also records a mode the process knew in this run's folder
                self.modes.learn(settings.endpoint, mode)
            return content, answered, mode
        raise AssertionError("unreachable: the last mode either answers or raises")

    # ------------------------------------------------------------------ one provider request

    def _identity(self, settings: ModelSettings) -> tuple[str, str | None]:
        """The model and endpoint as the cache sees them: what changes the answer, not where it runs."""
        if settings.is_scripted:
            return f"scripted:{json.dumps(parse_model_string(settings.model).answer_identity(), sort_keys=True)}", None
        if settings.is_local:
            return self._local_spec(settings).identity(), None
        return settings.model, settings.api_base

    def _local_spec(self, settings: ModelSettings) -> LocalModelSpec:
        if settings.model not in self._local_specs:
            self._local_specs[settings.model] = settings.local_spec()
        return self._local_specs[settings.model]

    async def _served(self, settings: ModelSettings) -> ModelSettings:
        """A local model's settings pointed at its running server (started on first use); an
        OpenAI-compatible server's at an `api_base` with no key configured, with the placeholder key
        (`ModelSettings.placeholder_api_key`: such a server ignores it; one that wants a key says 401)."""
        if not settings.is_local:
            placeholder = settings.placeholder_api_key()
            return settings if placeholder is None else settings.model_copy(update={"api_key": SecretStr(placeholder)})
        spec = self._local_spec(settings)
        with self._local_lock:
            server = self._local.get(spec)
        if server is None:
            if spec in self._local_dead:
                raise self._local_dead[spec]
            try:
                acquired = await asyncio.to_thread(SERVERS.acquire, spec)
            except LocalServerDied as exc:
                self._local_dead[spec] = exc
                raise
            with self._local_lock:  # never held across an await: other calls on this loop take it
                counted_twice = spec in self._local  # another call of this gateway got there first
                server = self._local.setdefault(spec, acquired)
            if counted_twice:
                await asyncio.to_thread(SERVERS.release, spec)
        base_url = server.base_url
        # llama.cpp's server answers one request at a time: queue here, so timeouts time the answer
        return settings.model_copy(
            update={
                "model": f"openai/{spec.alias}",
                "api_base": base_url,
                "api_key": SecretStr("sk-local"),
                "max_concurrency": 1,
            }
        )

    async def _provider_kwargs(
        self,
        role: str,
        settings: ModelSettings,
        messages: list[dict[str, Any]],
        *,
        mode: StructuredMode | None,
        schema: _Schema | None,
    ) -> tuple[dict[str, Any], ModelSettings]:
        """litellm's arguments for one request, and the settings it is served with (a local
        model's point at its running server)."""
        try:
            served = await self._served(settings)
        except LocalServerDied:
            raise
        except LocalModelError as exc:
            raise ModelCallError(
                f"{role} model {settings.model}: {exc}",
                role=role,
                model=settings.model,
                attempts=0,
                verdict="fatal",
                server_message=str(exc),
            ) from None
        scripted = settings.is_scripted
        kwargs: dict[str, Any] = {
            "model": f"{SCRIPTED_PROVIDER}/{SCRIPTED_PROVIDER}" if scripted else served.model,
            "messages": messages,
            "temperature": served.temperature,
            "timeout": served.timeout_s,
            "num_retries": 0,  # retries are ours, so every attempt is counted and backed off the same way
            "max_retries": 0,
            **served.extra,
        }
        for name, value in (
            ("seed", served.seed),
            ("max_tokens", served.max_tokens),
            ("api_base", served.api_base),
            ("api_key", served.resolved_api_key()),
        ):
            if value is not None:
                kwargs[name] = value
        if mode is not None and schema is not None:
            kwargs.update(mode_params(mode, schema.name, schema.schema))
        if "tools" in kwargs:
            # litellm 1.106 looks for MCP tools in every tool request and needs the `mcp` package
            # to do so; these are plain function tools
            kwargs["_skip_mcp_handler"] = True
        if scripted:
            kwargs["extra_body"] = {"scripted": parse_model_string(settings.model).model_dump()}
        return kwargs, served

    @traced_request  # each request shows up in graph traces (prompt and answer)
    async def _request(
        self,
        role: str,
        messages: list[dict[str, Any]],
        *,
        mode: StructuredMode | None,
        schema: _Schema | None,
        kind: str,
        may_fall_back: bool = False,
        grounding: Grounding | None = None,
    ) -> tuple[str, _Answered]:
        """One request (with its retries). `may_fall_back`: a refusal is not final, the caller
        will ask in a weaker structured mode; the ledger marks it `refused` rather than `error`.
        `grounding`: a model that researches (its API and tools are part of the cache key)."""
        settings = self.settings(role)
        litellm = configured_litellm()
        model, api_base = self._identity(settings)
        output = mode_params(mode, schema.name, schema.schema) if mode and schema else {}
        request = _Request(
            model=model,
            api_base=api_base,
            messages=messages,
            structured_mode=mode,
            output=grounding.identity() if grounding is not None else output,
            temperature=settings.temperature,
            seed=settings.seed,
            max_tokens=settings.max_tokens,
            extra=settings.extra,
        )
        key = request_key(request.model_dump())
        call_id = uuid.uuid4().hex[:12]
        started = time.perf_counter()
        common = {
            "role": role,
            "model": settings.model,
            "call_id": call_id,
            "kind": kind,
            "dry_run": settings.is_scripted,
            "structured_mode": mode,
            "request_key": key,
        }
        while True:
            cached = self.cache.get(key) if self.cache else None
            if cached is not None:  # also the answer of an identical request this one waited for
                self.ledger.record(
                    **common,
                    prompt_tokens=cached.get("prompt_tokens", 0),
                    completion_tokens=cached.get("completion_tokens", 0),
                    cost_usd=0.0,
                    latency_ms=round((time.perf_counter() - started) * 1000, 3),
                    cache_hit=True,
                    finish_reason=cached.get("finish_reason"),
                    status="ok",
                    **_usage_fields(cached.get("grounding")),
                )
                return cached["content"], _Answered(
                    key,
                    cached.get("finish_reason") == "length",
                    grounding=cached.get("grounding"),
                    broken=tuple(replayed(cached.get("broken"), lambda: _step(role))),
                )
            if self.cache is None:  # nothing to share an answer through: each request is its own call
                return await self._held_request(
                    role,
                    settings,
                    litellm,
                    messages,
                    mode=mode,
                    schema=schema,
                    common=common,
                    started=started,
                    may_fall_back=may_fall_back,
                    grounding=grounding,
                )
            leader = self._in_flight.join(key)
            if leader is None:
                break
            try:
                await asyncio.wrap_future(leader)
            except ModelCallError as exc:  # the leader's retries are spent: not retried again here
                refused = exc.verdict == "refused" and may_fall_back
                self.ledger.record(
                    **common,
                    latency_ms=round((time.perf_counter() - started) * 1000, 3),
                    attempts=0,
                    status="refused" if refused else "error",
                    error=f"shared with the identical request in flight: {str(exc)[:300]}",
                )
                raise
            # the leader's answer is in the cache now, or it gave up (cancelled): look again
        failure: ModelCallError | None = None
        try:
            return await self._held_request(
                role,
                settings,
                litellm,
                messages,
                mode=mode,
                schema=schema,
                common=common,
                started=started,
                may_fall_back=may_fall_back,
                grounding=grounding,
            )
        except ModelCallError as exc:
            failure = exc
            raise
        finally:
            self._in_flight.land(key, failure)

    async def _provider_request(
        self,
        role: str,
        settings: ModelSettings,
        litellm: Any,
        messages: list[dict[str, Any]],
        *,
        mode: StructuredMode | None,
        schema: _Schema | None,
        common: dict[str, Any],
        started: float,
        may_fall_back: bool,
        grounding: Grounding | None = None,
    ) -> tuple[str, _Answered]:
        """`_request`'s call to the provider (with its retries), its cache store and ledger line."""
        key = common["request_key"]
        attempts = 0
        response: Any = None
        reply: ProviderReply | None = None
        # the scripted and local models speak chat only (and search nothing)
        native = grounding is not None and grounding.api != "chat" and not (settings.is_scripted or settings.is_local)
        # a chat completion read as a stream, whose bytes may stop coming part-way (answer_contract.stream_broken)
        chat_stream = grounding is not None and grounding.stream and not native
        try:
            if settings.asks_background and not native:
                raise ModelCallError(  # sent, it would come back queued, with no answer to read
                    f"{role} model {settings.model}: extra background = true, but it is asked through chat "
                    f"completions, which have no background run: {BACKGROUND_IS_RESPONSES}; not sent",
                    role=role,
                    model=settings.model,
                    attempts=0,
                    verdict="fatal",
                )
            kwargs, served = await self._provider_kwargs(role, settings, messages, mode=mode, schema=schema)
            started = time.perf_counter()  # a local server's start-up is not this call's latency

            async def attempt() -> None:
                nonlocal attempts, response, reply
                attempts += 1
                self._raise_if_server_died(settings)
                try:
                    if grounding is None:
                        response = with_a_choice(await self._provider_call(litellm, served, kwargs))
                    else:
                        reply = await self._grounded_call(litellm, served, kwargs, grounding, native=native)
                except Exception as exc:
                    # a call cut off by its server's death is that death, not a retryable error
                    await asyncio.to_thread(self._raise_if_server_died, settings, 0.5)
                    broken = stream_broken(exc, retryable=classify(exc) == "retry") if chat_stream else None
                    if broken is not None:
                        raise broken from exc
                    raise

            try:  # the first attempt on its own: most calls need no other, and tenacity's machinery
                await attempt()  # costs ~0.05 ms a call (it inspects its callbacks on every attempt)
            except Exception as exc:
                if settings.max_retries == 0 or classify(exc) != "retry":
                    raise
                await _retried(attempt, settings, exc)
        except LocalServerDied as exc:  # not a ModelCallError: no step falls back past a dead server
            self.ledger.record(
                **common,
                latency_ms=round((time.perf_counter() - started) * 1000, 3),
                attempts=attempts,
                status="error",
                error=str(exc)[:300],
            )
            raise
        except ModelCallError as exc:  # the local server would not start
            self.ledger.record(
                **common,
                latency_ms=round((time.perf_counter() - started) * 1000, 3),
                attempts=attempts,
                status="error",
                error=str(exc)[:300],
            )
            raise
        except Exception as exc:
            verdict = classify(exc)
            said = server_message(exc)
            if isinstance(exc, IncompleteAnswer):  # failed, and never cached: recorded where it was asked
                plural = "s" * (attempts != 1)
                note(
                    [
                        WHOLE.broken(
                            f"the {role} model {settings.model}: {exc.reason} (after {attempts} attempt{plural})",
                            _step(role),
                        )
                    ]
                )
            self.ledger.record(
                **common,
                latency_ms=round((time.perf_counter() - started) * 1000, 3),
                attempts=attempts,
                status="refused" if verdict == "refused" and may_fall_back else "error",
                error=f"{type(exc).__name__}: {said[:300]}",
            )
            raise ModelCallError(
                _failure_message(role, settings.model, exc, verdict, attempts),
                role=role,
                model=settings.model,
                attempts=attempts,
                verdict=verdict,
                status=status_of(exc),
                server_message=said,
            ) from exc

        grounded: dict[str, Any] | None = None
        if grounding is None:
            choice = response.choices[0]
            finish_reason = choice_finish(choice)  # the provider's own word for a cut, which litellm may rewrite
            content = answer_or_reasoning(answer_text(choice.message, mode), choice.message, finish_reason)
            usage = getattr(response, "usage", None)
            prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
            completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
            hidden = getattr(response, "_hidden_params", None) or {}
            cost = hidden.get("response_cost")
            # the role's own price wins over litellm's map (ModelSettings has both prices or neither)
            if settings.input_cost_per_token is not None and settings.output_cost_per_token is not None:
                cost = (
                    prompt_tokens * settings.input_cost_per_token + completion_tokens * settings.output_cost_per_token
                )
        else:
            assert reply is not None  # the grounded call answered
            response = reply.raw
            content, finish_reason = reply.answer.text, reply.finish_reason
            prompt_tokens, completion_tokens = reply.prompt_tokens, reply.completion_tokens
            cost = billed_cost(reply, settings)  # tokens and searches, each priced once
            grounded = reply.answer.model_dump(exclude={"text"})
        content, broken = answer_breaches(
            finish_reason, content, lambda: _step(role), f"the {role} model {settings.model}"
        )
        if self.cache is not None:
            self.cache.put(
                key,
                {
                    "content": content,
                    "prompt_tokens": prompt_tokens,
                    "finish_reason": finish_reason,
                    "completion_tokens": completion_tokens,
                    "model": settings.model,
                    "messages": messages,
                    **({"grounding": grounded} if grounded is not None else {}),
                    **({"broken": stored(broken)} if broken else {}),  # a replay records them again
                },
            )  # the prompt, for `atelier trace`
        self.ledger.record(
            **common,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=0.0
            if settings.is_scripted
            else (float(cost) if cost is not None else None),  # None: litellm has no price
            latency_ms=round((time.perf_counter() - started) * 1000, 3),
            provider_ms=_provider_ms(response),
            finish_reason=finish_reason,
            attempts=attempts,
            status="ok",
            **_usage_fields(grounded),
        )
        return content, _Answered(
            key,
            finish_reason == "length",
            grounding=grounded,
            cost_usd=0.0 if settings.is_scripted else float(cost or 0.0),
            broken=tuple(broken),
        )

    async def _held_request(
        self, role: str, settings: ModelSettings, litellm: Any, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[str, _Answered]:
        """`_provider_request` with the call's bound held on the run's budget while it is in flight
        (`agents.models.spend`), settled for what it cost; with no budget, just the request."""
        if self.spend is None or settings.is_scripted or settings.is_local:
            return await self._provider_request(role, settings, litellm, messages, **kwargs)
        settings, bound = self._bounded(role, settings, messages, kwargs.get("mode"), kwargs.get("schema"))
        if not await self.spend.hold(bound):
            message = f"{BUDGET_REACHED}: the {role} call's bound (${bound:.4f}) does not fit in what is left"
            self.ledger.record(**kwargs["common"], latency_ms=0.0, attempts=0, status="error", error=message)
            raise ModelCallError(message, role=role, model=settings.model, attempts=0, verdict="fatal")
        spent = 0.0  # a failed call costs nothing (as the ledger counts it)
        try:
            content, answered = await self._provider_request(role, settings, litellm, messages, **kwargs)
            spent = answered.cost_usd
            return content, answered
        finally:
            self.spend.settle(bound, spent)

    def _bounded(
        self,
        role: str,
        settings: ModelSettings,
        messages: list[dict[str, Any]],
        mode: StructuredMode | None,
        schema: _Schema | None,
    ) -> tuple[ModelSettings, float]:
        """The settings to send the call with (a role with no max_tokens capped at its output limit,
        so the bound holds) and the most the call can cost."""
        limit, _ = output_limit(settings)
        capped = settings if settings.max_tokens is not None else settings.model_copy(update={"max_tokens": limit})
        carried = mode_params(mode, schema.name, schema.schema) if mode and schema else {}
        bound = call_bound_usd(capped, messages, carried)
        if bound is None:  # a budget run prices every role before it starts (runs.execution.cost.plan_budget)
            raise ModelCallError(
                f"{role} model {settings.model}: its price is unknown, so the run's budget cannot hold the call",
                role=role,
                model=settings.model,
                attempts=0,
                verdict="fatal",
            )
        return capped, bound

    def _raise_if_server_died(self, settings: ModelSettings, wait_s: float = 0.0) -> None:
        """A local model whose server process is gone fails at once with LocalServerDied: how it died
        and its log's end, never a retry against a socket nobody answers. It is no ModelCallError, so
        no step of a pipeline falls back past it: the episode fails, naming the dead server."""
        if not settings.is_local:
            return
        with self._local_lock:
            server = self._local.get(self._local_spec(settings))
        death = server.died(wait_s) if server is not None else None
        if death is not None:
            raise LocalServerDied(f"the local model server for {settings.model} {death}")

    async def _provider_call(self, litellm, settings: ModelSettings, kwargs: dict[str, Any]):
        async with _LIMITS.semaphore(settings.endpoint, settings.max_concurrency):
            if settings.rpm:
                await _LIMITS.limiter(settings.endpoint, settings.rpm).acquire()
            with litellm_call_scope():  # set before wait_for makes the call's task, which copies it
                return await asyncio.wait_for(litellm.acompletion(**kwargs), timeout=settings.timeout_s)

    async def _grounded_call(
        self, litellm, settings: ModelSettings, kwargs: dict[str, Any], grounding: Grounding, *, native: bool
    ) -> ProviderReply:
        """One attempt of a grounded request (`settings` as served): the provider's own API
        (`native`: OpenAI's Responses API, Gemini's Interactions API), Perplexity's API
        (`agents.models.grounding`), or litellm's chat completions (search models)."""
        async with _LIMITS.semaphore(settings.endpoint, settings.max_concurrency):
            if settings.rpm:
                await _LIMITS.limiter(settings.endpoint, settings.rpm).acquire()
            if native:
                own = responses_call if grounding.api == "responses" else interactions_call
                return await asyncio.wait_for(own(settings, kwargs["messages"], grounding), timeout=settings.timeout_s)
            if is_perplexity(settings.model):
                return await asyncio.wait_for(
                    perplexity_call(settings, kwargs["messages"], grounding), timeout=settings.timeout_s
                )

            async def chat() -> ProviderReply:
                with litellm_call_scope():
                    if not grounding.stream:
                        return read_chat(with_a_choice(await litellm.acompletion(**kwargs)), settings.model)
                    stream = await litellm.acompletion(**kwargs, stream=True, stream_options={"include_usage": True})
                    return await read_chat_stream(stream, kwargs["messages"], settings.model)

            return await asyncio.wait_for(chat(), timeout=settings.timeout_s)


def _step(role: str) -> str:
    """Where an answer's degradations are recorded: the graph node asking (else the role)."""
    from atelier.agents.models.ledger import current_tags

    return current_tags().get("node") or role


def _usage_fields(grounded: dict[str, Any] | None) -> dict[str, Any]:
    """A grounded answer's reported usage, as ledger fields (none for other calls)."""
    if not grounded:
        return {}
    usage = grounded.get("usage") or {}
    return {k: usage.get(k) for k in ("reasoning_tokens", "citation_tokens", "search_calls")}


def _provider_ms(response: Any) -> float | None:
    """The provider's share of the last attempt (litellm's response time less its own overhead)."""
    hidden = getattr(response, "_hidden_params", None) or {}
    total = getattr(response, "_response_ms", None) or hidden.get("_response_ms")
    overhead = hidden.get("litellm_overhead_time_ms")
    if not isinstance(total, (int, float)):
        return None
    return round(float(total) - float(overhead or 0.0), 3)


@functools.lru_cache(maxsize=512)
def _json_schema_text(schema: type[BaseModel]) -> str:
    return json.dumps(schema.model_json_schema())


def _json_schema(schema: type[BaseModel]) -> dict[str, Any]:
    """A model's JSON schema (a fresh copy), generated once per class: generating it costs milliseconds."""
    return json.loads(_json_schema_text(schema))


def _with_json_instructions(messages: list[dict[str, Any]], json_schema: dict[str, Any]) -> list[dict[str, Any]]:
    out = [dict(m) for m in messages]
    last_user = max((i for i, m in enumerate(out) if m.get("role") == "user"), default=None)
    note = json_instructions(json_schema)
    if last_user is None:
        out.append({"role": "user", "content": note})
    else:
        out[last_user]["content"] = f"{out[last_user]['content']}\n\n{note}"
    return out


def _validate(schema: type[T], content: str) -> T:
    try:
        return schema.model_validate(extract_json(content))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}" for err in exc.errors()[:5]
        )
        raise ValueError(f"does not match the schema: {problems}") from None


@contextlib.contextmanager
def answers_whole(gateway: Gateway, role: str) -> Iterator[list[Degradation]]:
    """For work whose output keeps no record of what an answer broke (a history item written, a
    rating saved, a measurement): the block's calls' answers must keep the provider contract whole.
    One cut at the token limit, filtered, or left inside its reasoning (answer_contract.py) raises
    ModelCallError naming the clause, as a failed call would — it is not used in silence. The block
    may clear the list it is given to take what broke as handled."""
    with recording_answers() as broken:
        yield broken
    if broken:
        model = gateway.settings(role).model
        more = f" (and {len(broken) - 2} more)" if len(broken) > 2 else ""
        raise ModelCallError(
            f"the {role} model {model}'s answer was not used: {'; '.join(d.detail for d in broken[:2])}{more}",
            role=role,
            model=model,
            attempts=1,
            verdict="refused",
        )
