"""mem0's LLM and embedder slots filled by Atelier's gateway and embedders.

mem0 (mem0ai 2.x) calls its LLM synchronously from worker threads (`asyncio.to_thread`) and
validates provider names against a fixed list. `register_with_mem0()` adds an `atelier` provider
to mem0's LlmFactory and EmbedderFactory; `llm_config` / `embedder_config` build the matching
config entries (bypassing the name check, which does not know registered providers).

`GatewayLLM` sends every request through `agents.models.gateway.Gateway` — cache, retries, ledger and
the scripted model included — by running the gateway coroutine on the event loop that called
mem0 (bound with `bind_loop`). mem0's only JSON request is its memory extraction, answered as a
validated `Mem0Extraction` (the output format of mem0's ADDITIVE_EXTRACTION_PROMPT).

mem0 writes today's date into that prompt and offers no parameter for it; `extraction_date(day)`
sets it, so an add replayed on another day (a resumed run rebuilding its memory) asks the very
request it asked first, which the response cache then answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Iterator
from typing import Any, Literal

from mem0.configs.embeddings.base import BaseEmbedderConfig
from mem0.configs.llms.base import BaseLlmConfig
from mem0.embeddings.base import EmbeddingBase
from mem0.embeddings.configs import EmbedderConfig
from mem0.llms.base import LLMBase
from mem0.llms.configs import LlmConfig
from mem0.utils.factory import EmbedderFactory, LlmFactory
from pydantic import BaseModel, Field

from atelier.agents.models.embeddings import get_embedder
from atelier.agents.models.gateway import Gateway

PROVIDER = "atelier"


class ExtractedMemory(BaseModel):
    id: str = Field(description='Sequential integers as strings starting at "0".')
    text: str = Field(description="A contextually rich, self-contained factual statement (15-80 words).")
    attributed_to: Literal["user", "assistant"] = Field(description="Who this memory is about.")
    linked_memory_ids: list[str] = Field(default_factory=list, description="Ids of related Existing Memories.")


class Mem0Extraction(BaseModel):
    memory: list[ExtractedMemory] = Field(default_factory=list)


class GatewayLlmConfig(BaseLlmConfig):
    def __init__(self, gateway: Gateway, role: str, **kwargs: Any) -> None:
        super().__init__(model=f"{PROVIDER}:{role}", **kwargs)
        self.gateway = gateway
        self.role = role


class GatewayLLM(LLMBase):
    config: GatewayLlmConfig

    def __init__(self, config: GatewayLlmConfig) -> None:
        super().__init__(config)
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop the gateway's coroutines run on: the one awaiting mem0."""
        self._loop = loop

    def generate_response(self, messages, tools=None, tool_choice="auto", response_format=None, **kwargs) -> str:
        if tools:
            raise NotImplementedError("mem0 tool calls (graph memory) are not routed through the Atelier gateway")
        coroutine = self._answer(messages, response_format)
        loop = self._loop
        if loop is None or not loop.is_running():
            return asyncio.run(coroutine)  # synchronous mem0.Memory use
        if _running_loop() is loop:
            coroutine.close()
            raise RuntimeError("GatewayLLM was called on its event loop's own thread; use mem0's AsyncMemory")
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result()

    async def _answer(self, messages: list[dict[str, Any]], response_format: Any) -> str:
        gateway, role = self.config.gateway, self.config.role
        if isinstance(response_format, dict) and response_format.get("type") in ("json_object", "json_schema"):
            extraction = await gateway.structured(role, messages, Mem0Extraction)
            return extraction.model_dump_json()
        return await gateway.text(role, messages)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class AtelierEmbedding(EmbeddingBase):
    """`config.model`: `local` (MiniLM) or any litellm embedding model; `openai_base_url` and
    `api_key` reach litellm's api_base and api_key."""

    def __init__(self, config: BaseEmbedderConfig | None = None) -> None:
        super().__init__(config)
        self._embedder = get_embedder(
            self.config.model or "local", api_base=self.config.openai_base_url, api_key=self.config.api_key
        )

    def embed(self, text, memory_action=None) -> list[float]:
        return self._embedder.embed([text])[0].tolist()

    def embed_batch(self, texts, memory_action="add") -> list[list[float]]:
        return self._embedder.embed(list(texts)).tolist()


_registered = False
_lock = threading.Lock()
_extraction_day: contextvars.ContextVar[str | None] = contextvars.ContextVar("atelier_mem0_day", default=None)


@contextlib.contextmanager
def extraction_date(day: str) -> Iterator[None]:
    """mem0 adds inside this block date their extraction prompt `day` (ISO) instead of today."""
    token = _extraction_day.set(day)
    try:
        yield
    finally:
        _extraction_day.reset(token)


def _date_extraction_prompts() -> None:
    from mem0.memory import main

    build = getattr(main, "generate_additive_extraction_prompt", None)
    if build is None:
        raise RuntimeError(
            "this mem0ai no longer builds its extraction prompt with generate_additive_extraction_prompt: "
            "memory/mem0_bridge.py cannot date it, so a resumed run could not rebuild mem0's memory"
        )

    def dated(*args: Any, current_date: str | None = None, **kwargs: Any) -> str:
        return build(*args, current_date=current_date or _extraction_day.get(), **kwargs)

    main.generate_additive_extraction_prompt = dated


def register_with_mem0() -> None:
    global _registered
    with _lock:
        if not _registered:
            LlmFactory.register_provider(PROVIDER, f"{__name__}.GatewayLLM", GatewayLlmConfig)
            EmbedderFactory.provider_to_class[PROVIDER] = f"{__name__}.AtelierEmbedding"
            _date_extraction_prompts()
            _registered = True


def llm_config(gateway: Gateway, role: str) -> LlmConfig:
    register_with_mem0()
    return LlmConfig.model_construct(provider=PROVIDER, config={"gateway": gateway, "role": role})


def embedder_config(model: str) -> EmbedderConfig:
    register_with_mem0()
    return EmbedderConfig.model_construct(provider=PROVIDER, config={"model": model})
