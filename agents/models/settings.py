"""Model settings: one per role, each naming any litellm provider or the offline `scripted` model."""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from atelier.agents.models.local_model import LocalModelError, LocalModelSpec, is_local, parse_local_model
from atelier.agents.models.scripted import parse_model_string
from atelier.agents.models.structured_output import StructuredMode

# The roles every run knows. Later graphs add their own (researcher, writer, ...); a role without
# its own setting falls back to `system` for systems under test and to `judge` for evaluators.
ROLES = ("system", "user_sim", "judge")
ROLE_FALLBACK = {
    "researcher": "system",
    "writer": "system",
    "planner": "system",
    "memory": "system",
    "clarifier": "system",
}
# Each judge's own roles (agents/judges/*), and the meta-evaluator of `atelier meta-eval`.
JUDGE_ROLES = (
    "pqr_criteria",
    "pqr_judge",
    "pqr_fact_checker",
    "bespoke_rubric",
    "bespoke_judge",
    "bespoke_recall",
    "lampqa_judge",
    "aepd_judge",
    "locomo_judge",
    "prefeval_judge",
    "meta_judge",
)
ROLE_FALLBACK.update({role: "judge" for role in JUDGE_ROLES})
# Judge roles whose output is made once per case and shared by every system, repeat and epoch (PQR's
# criteria, BESPOKE's rubric): the judge's instrument, not a sample of its judgment, so a new epoch's
# judgments keep their seeds (`runs.folder.epochs.judge_context`)
INSTRUMENT_ROLES = ("pqr_criteria", "bespoke_rubric")
ROLE_FALLBACK.update({"history_writer": "user_sim", "history_checker": "user_sim"})  # the simulated user's roles
# A small local model left unbounded can repeat itself up to its context's end (minutes on a CPU).
LOCAL_DEFAULT_MAX_TOKENS = 512
# The key sent to an OpenAI-compatible server named by its `api_base` (`openai/<alias>`: llama.cpp's
# `llama-server`, llama-cpp-python, `atelier model serve`, ...) when no key is configured — none in
# the recipe, no OPENAI_API_KEY in the environment. Such servers ignore keys, but litellm and the
# OpenAI SDK send no request without one (litellm's "Missing credentials"). A server that does want
# a key answers this one 401, which is never retried: the command stops, exit 2, naming the model.
NO_KEY_PLACEHOLDER = "sk-no-key"
# Why `extra = { background = true }` is refused on a model asked through chat completions: a chat
# completion has no background run, and its queued reply holds no answer (no `choices`) that
# anything would poll. The same words as the research_api pipeline's refusal of `background` with
# api = "chat" (graphs/research_api.py).
BACKGROUND_IS_RESPONSES = "background is the Responses API's (the Interactions API's always)"


class ModelSettings(BaseModel):
    """How to call one model. `model` is a litellm provider string (`openai/gpt-4o-mini`,
    `anthropic/claude-...`, `ollama/llama3`, `hosted_vllm/...`), `scripted[?k=v&...]`, or a local
    open-weight model served for the run (`local/smollm2`, `local?gguf=PATH`)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(default="scripted", min_length=1)
    api_base: str | None = Field(default=None, description="Any OpenAI-compatible endpoint.")
    api_key: SecretStr | None = Field(default=None, description="Prefer api_key_env in recipes.")
    api_key_env: str | None = Field(default=None, description="Environment variable holding the key.")
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int | None = Field(default=None, gt=0)
    seed: int | None = Field(default=0, description="Sent to providers that accept it; part of the cache key.")
    timeout_s: float = Field(default=120.0, gt=0)
    max_retries: int = Field(default=4, ge=0, le=20, description="Retries on timeouts, 429 and 5xx.")
    retry_backoff_s: float = Field(default=1.0, ge=0, description="First backoff; doubles per retry, jittered.")
    rpm: int | None = Field(default=None, gt=0, description="Requests per minute allowed for this model.")
    max_concurrency: int = Field(default=8, gt=0, description="Calls in flight at once for this model.")
    extra: dict[str, Any] = Field(default_factory=dict, description="Passed to litellm as is (top_p, ...).")
    input_cost_per_token: float | None = Field(
        default=None,
        ge=0,
        description="USD per prompt token, for a model "
        "litellm has no price for (a self-hosted or new one); both or neither.",
    )
    output_cost_per_token: float | None = Field(default=None, ge=0, description="USD per completion token.")
    search_cost_per_call: float | None = Field(
        default=None,
        ge=0,
        description="USD per web search a model that researches reports (OpenAI's web_search_call items), added to "
        "the call's cost where litellm's price map has none for them.",
    )
    structured_mode: Literal["auto"] | StructuredMode = Field(
        default="auto",
        description="How structured answers are asked for: `auto` tries json_schema, json_object (+ schema), "
        "tool, prompt in this order and keeps the first the endpoint accepts; a mode here is used alone.",
    )

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        value = value.strip()
        if _is_scripted(value):
            parse_model_string(value)  # its parameters are checked now, not at the first call
        elif is_local(value):
            try:
                parse_local_model(value)  # the GGUF file and the local extra, likewise
            except LocalModelError as exc:
                raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _both_prices(self) -> ModelSettings:
        if (self.input_cost_per_token is None) != (self.output_cost_per_token is None):
            raise ValueError("give both input_cost_per_token and output_cost_per_token, or neither")
        return self

    @model_validator(mode="after")
    def _bounded_local_answers(self) -> ModelSettings:
        if self.max_tokens is None and is_local(self.model):
            self.max_tokens = LOCAL_DEFAULT_MAX_TOKENS
        return self

    @property
    def is_scripted(self) -> bool:
        return _is_scripted(self.model)

    def answer_identity(self) -> dict[str, Any]:
        """What decides this model's answers (what the response cache keys on, besides the request):
        the model — for `scripted`, only its parameters that change an answer — endpoint,
        temperature, seed, max tokens, extra parameters and a pinned structured mode. Timeouts,
        retries, rate limits, keys and the scripted model's latency and fault injection are not
        part of it."""
        model: Any = self.model
        if self.is_scripted:
            model = {"scripted": parse_model_string(self.model).answer_identity()}
        return {
            "model": model,
            "api_base": self.api_base,
            "temperature": self.temperature,
            "seed": self.seed,
            "max_tokens": self.max_tokens,
            "extra": self.extra,
            "structured_mode": self.structured_mode,
        }

    @property
    def is_local(self) -> bool:
        return is_local(self.model)

    def local_spec(self) -> LocalModelSpec:
        return parse_local_model(self.model)

    @property
    def endpoint(self) -> str:
        """The endpoint's identity for what is learned about it (its structured mode): model and
        api_base; a local model is the same endpoint whatever port it is served on."""
        return self.model if self.is_local or not self.api_base else f"{self.model}@{self.api_base.rstrip('/')}"

    def resolved_api_key(self) -> str | None:
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        if self.api_key_env:
            return os.environ.get(self.api_key_env)
        return None

    def placeholder_api_key(self) -> str | None:
        """NO_KEY_PLACEHOLDER for an OpenAI-compatible server at an explicit `api_base` (`openai/...`)
        with no key configured — neither in these settings (`api_key`, `api_key_env`) nor in
        OPENAI_API_KEY, which litellm would send instead; None otherwise (a key is sent, or the
        provider's own rules apply)."""
        if self.api_key is not None or self.api_key_env or not self.api_base or self.is_scripted or self.is_local:
            return None
        if not self.model.startswith("openai/") or os.environ.get("OPENAI_API_KEY"):
            return None
        return NO_KEY_PLACEHOLDER

    @property
    def asks_background(self) -> bool:
        """Whether its `extra` asks for a background run (`background = true`): the Responses API's."""
        return bool(self.extra.get("background"))


def _is_scripted(model: str) -> bool:
    return model == "scripted" or model.startswith(("scripted?", "scripted/"))


def settings_for_role(roles: dict[str, ModelSettings], role: str) -> ModelSettings:
    if role in roles:
        return roles[role]
    fallback = ROLE_FALLBACK.get(role)
    if fallback and fallback in roles:
        return roles[fallback]
    return roles.get("system", ModelSettings())
