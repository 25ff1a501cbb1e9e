"""The model gateway: every LLM call in Atelier goes through `Gateway`.

One path for every provider (litellm, with `scripted` registered as a custom provider):

    cache lookup -> rate limit + concurrency bound -> provider call with timeout
    -> bounded retries with jittered exponential backoff on timeouts / 429 / 5xx
    -> (structured) parse + validate into a pydantic model, one repair attempt
    -> cache store -> one ledger line per request

Roles (`system`, `user_sim`, `judge`, ...) each have their own `ModelSettings`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import threading
import time
import uuid
from typing import Any, Mapping, TypeVar

from pydantic import BaseModel, ValidationError

from agents.cache import ResponseCache, request_key
from agents.ledger import Ledger
from agents.prompts import json_instructions, repair_instructions
from agents.scripted import parse_model_string, register_with_litellm
from agents.settings import ModelSettings, settings_for_role
from agents.trace import traced_request

T = TypeVar("T", bound=BaseModel)


class ModelCallError(RuntimeError):
    """A model call failed for good (after retries, or with a non-retryable error)."""

    def __init__(self, message: str, *, role: str, model: str, attempts: int) -> None:
        super().__init__(message)
        self.role = role
        self.model = model
        self.attempts = attempts


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
    response_format: dict[str, Any] | None
    temperature: float
    seed: int | None
    max_tokens: int | None
    extra: dict[str, Any]


_litellm_ready = False
_litellm_lock = threading.Lock()


def _litellm():
    global _litellm_ready
    import litellm

    with _litellm_lock:
        if not _litellm_ready:
            litellm.suppress_debug_info = True
            litellm.drop_params = True  # providers that reject `seed` or `response_format` still answer
            litellm.telemetry = False
            register_with_litellm()
            _litellm_ready = True
    return litellm


def _is_retryable(exc: BaseException) -> bool:
    litellm = _litellm()
    retryable = (
        asyncio.TimeoutError,
        litellm.Timeout,
        litellm.RateLimitError,
        litellm.InternalServerError,
        litellm.ServiceUnavailableError,
        litellm.BadGatewayError,
        litellm.APIConnectionError,
    )
    if isinstance(exc, retryable):
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and (status == 429 or status >= 500)


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
            return json.loads(candidate)
        except json.JSONDecodeError as exc:
            error = error or exc
    raise ValueError(f"not valid JSON ({error.msg} at char {error.pos})" if error else "empty answer")


class _ModelLimits:
    """Per-model rate limiters and concurrency bounds, shared by every gateway in the process."""

    def __init__(self) -> None:
        self._limiters: dict[tuple[str, int], Any] = {}
        self._semaphores: dict[tuple[str, int, int], asyncio.Semaphore] = {}
        self._lock = threading.Lock()

    def semaphore(self, model: str, bound: int) -> asyncio.Semaphore:
        key = (model, bound, id(asyncio.get_running_loop()))
        with self._lock:
            if key not in self._semaphores:
                self._semaphores[key] = asyncio.Semaphore(bound)
            return self._semaphores[key]

    def limiter(self, model: str, rpm: int):
        from aiolimiter import AsyncLimiter

        with self._lock:
            if (model, rpm) not in self._limiters:
                self._limiters[(model, rpm)] = AsyncLimiter(rpm, 60)
            return self._limiters[(model, rpm)]


_LIMITS = _ModelLimits()


class Gateway:
    def __init__(
        self,
        roles: Mapping[str, ModelSettings] | None = None,
        *,
        cache: ResponseCache | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        self.roles = dict(roles or {"system": ModelSettings(), "judge": ModelSettings(), "user_sim": ModelSettings()})
        self.cache = cache
        self.ledger = ledger or Ledger(None)

    def settings(self, role: str) -> ModelSettings:
        return settings_for_role(self.roles, role)

    @property
    def dry_run(self) -> bool:
        """True when any role is served by the scripted model."""
        return any(s.is_scripted for s in self.roles.values())

    # ------------------------------------------------------------------ public API

    async def text(self, role: str, messages: list[dict[str, Any]]) -> str:
        content, _ = await self._request(role, messages, response_format=None, kind="text")
        return content

    async def structured(self, role: str, messages: list[dict[str, Any]], schema: type[T]) -> T:
        """Ask for an instance of `schema`; validate; repair once; raise StructuredOutputError."""
        json_schema = _json_schema(schema)
        response_format = {
            "type": "json_schema",
            "json_schema": {"name": schema.__name__, "schema": json_schema, "strict": False},
        }
        messages = _with_json_instructions(messages, json_schema)
        content, key = await self._request(role, messages, response_format=response_format, kind="structured")
        try:
            return _validate(schema, content)
        except ValueError as first_error:
            repair = messages + [
                {"role": "assistant", "content": content},
                {"role": "user", "content": repair_instructions(str(first_error))},
            ]
            fixed, repair_key = await self._request(role, repair, response_format=response_format, kind="repair")
            try:
                return _validate(schema, fixed)
            except ValueError as second_error:
                for k in (key, repair_key):  # a rerun should ask again, not replay the failure
                    if self.cache and k:
                        self.cache.discard(k)
                settings = self.settings(role)
                raise StructuredOutputError(
                    f"{role} model {settings.model} gave no valid {schema.__name__} after one repair: {second_error}",
                    role=role,
                    model=settings.model,
                    attempts=2,
                    raw=fixed,
                ) from second_error

    # ------------------------------------------------------------------ one provider request

    @traced_request  # each request shows up in graph traces (prompt and answer)
    async def _request(
        self, role: str, messages: list[dict[str, Any]], *, response_format: dict[str, Any] | None, kind: str
    ) -> tuple[str, str | None]:
        settings = self.settings(role)
        litellm = _litellm()
        scripted = settings.is_scripted
        params = parse_model_string(settings.model) if scripted else None
        request = _Request(
            model=f"scripted:{json.dumps(params.answer_identity(), sort_keys=True)}" if params else settings.model,
            api_base=settings.api_base,
            messages=messages,
            response_format=response_format,
            temperature=settings.temperature,
            seed=settings.seed,
            max_tokens=settings.max_tokens,
            extra=settings.extra,
        )
        key = request_key(request.model_dump())
        call_id = uuid.uuid4().hex[:12]
        started = time.perf_counter()
        common = {"role": role, "model": settings.model, "call_id": call_id, "kind": kind, "dry_run": scripted}
        cached = self.cache.get(key) if self.cache else None
        if cached is not None:
            self.ledger.record(
                **common,
                prompt_tokens=cached.get("prompt_tokens", 0),
                completion_tokens=cached.get("completion_tokens", 0),
                cost_usd=0.0,
                latency_ms=round((time.perf_counter() - started) * 1000, 3),
                cache_hit=True,
                status="ok",
            )
            return cached["content"], key

        kwargs: dict[str, Any] = {
            "model": "scripted/scripted" if scripted else settings.model,
            "messages": messages,
            "temperature": settings.temperature,
            "timeout": settings.timeout_s,
            "num_retries": 0,  # retries are ours, so every attempt is counted and backed off the same way
            "max_retries": 0,
            **settings.extra,
        }
        for name, value in (("seed", settings.seed), ("max_tokens", settings.max_tokens),
                            ("api_base", settings.api_base), ("api_key", settings.resolved_api_key()),
                            ("response_format", response_format)):
            if value is not None:
                kwargs[name] = value
        if params is not None:
            kwargs["extra_body"] = {"scripted": params.model_dump()}

        attempts = 0
        try:
            from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

            retrying = AsyncRetrying(
                stop=stop_after_attempt(settings.max_retries + 1),
                wait=wait_exponential_jitter(initial=settings.retry_backoff_s, max=60, jitter=settings.retry_backoff_s),
                retry=retry_if_exception(_is_retryable),
                reraise=True,
            )
            async for attempt in retrying:
                with attempt:
                    attempts += 1
                    response = await self._provider_call(litellm, settings, kwargs)
        except Exception as exc:  # noqa: BLE001 - recorded in the ledger, then re-raised typed
            self.ledger.record(
                **common,
                latency_ms=round((time.perf_counter() - started) * 1000, 3),
                attempts=attempts,
                status="error",
                error=f"{type(exc).__name__}: {str(exc)[:300]}",
            )
            what = "timed out" if isinstance(exc, asyncio.TimeoutError) else f"failed: {type(exc).__name__}: {exc}"
            raise ModelCallError(
                f"{role} model {settings.model} {what} (after {attempts} attempt{'s' * (attempts != 1)})",
                role=role,
                model=settings.model,
                attempts=attempts,
            ) from exc

        content = response.choices[0].message.content or ""
        usage = getattr(response, "usage", None)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        cost = (getattr(response, "_hidden_params", None) or {}).get("response_cost")
        if self.cache is not None:
            self.cache.put(key, {"content": content, "prompt_tokens": prompt_tokens,
                                 "completion_tokens": completion_tokens, "model": settings.model})
        self.ledger.record(
            **common,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=float(cost) if cost is not None else None,
            latency_ms=round((time.perf_counter() - started) * 1000, 3),
            attempts=attempts,
            status="ok",
        )
        return content, key

    async def _provider_call(self, litellm, settings: ModelSettings, kwargs: dict[str, Any]):
        async with _LIMITS.semaphore(settings.model, settings.max_concurrency):
            if settings.rpm:
                await _LIMITS.limiter(settings.model, settings.rpm).acquire()
            return await asyncio.wait_for(litellm.acompletion(**kwargs), timeout=settings.timeout_s)


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
