"""`atelier bench model`: how fast the configured model answers, and what the framework adds.

Prompts are the answerer's prompts for the bundled sample suite's queries (no user context), one
distinct prompt per request so no server-side prompt cache flatters the figures. After one warm-up
request (which also starts a local model's server) it measures, through the gateway with the
response cache off:

- plain requests: end-to-end completion tokens per second of the provider's time, and the
  framework's time (gateway + litellm: everything in a call that is not the provider's answer)
  as a share of the provider's;
- streamed requests: time to the first token, and the decoding rate after it.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from atelier.agents.answerer import answer_messages
from atelier.agents.models.gateway import Gateway
from atelier.agents.models.ledger import Ledger
from atelier.agents.models.settings import ModelSettings

if TYPE_CHECKING:
    from atelier.benchmarks.case import CaseView


class ModelBenchSettings(BaseModel):
    requests: int = Field(default=6, ge=1, description="Requests of each kind (plain and streamed).")
    max_tokens: int = Field(default=96, ge=1)


def _prompts(count: int) -> list[list[dict[str, str]]]:
    from atelier.benchmarks.registry import load_cases

    views: dict[str, CaseView] = {}
    for case in load_cases("sample", "all", "task_only"):  # tasks shared by several users: one each
        views.setdefault(case.query.text, case.view(None))
    distinct = list(views.values())
    prompts = []
    for i in range(count):
        messages = answer_messages(distinct[i % len(distinct)], "")
        if i >= len(distinct):  # more requests than sample queries: keep every prompt distinct
            messages[-1] = {**messages[-1], "content": f"{messages[-1]['content']}\n(variant {i // len(distinct)})"}
        prompts.append(messages)
    return prompts


def _spread(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "p50": None, "p95": None}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {
        "mean": round(statistics.fmean(values), 2),
        "p50": round(statistics.median(values), 2),
        "p95": round(p95, 2),
    }


async def run_model_bench(settings: ModelSettings, bench: ModelBenchSettings) -> dict[str, Any]:
    model = settings.model_copy(update={"max_tokens": bench.max_tokens})
    ledger = Ledger(None)
    gateway = Gateway({"bench": model}, cache=None, ledger=ledger)
    prompts = _prompts(2 * bench.requests + 1)
    load_before = os.getloadavg()[0]
    try:
        started = time.perf_counter()
        await gateway.text("bench", prompts[0])
        warmup_s = time.perf_counter() - started
        ledger.entries.clear()
        for messages in prompts[1 : bench.requests + 1]:
            await gateway.text("bench", messages)
        streams = [await gateway.stream_timing("bench", m) for m in prompts[bench.requests + 1 :]]
    finally:
        await gateway.aclose()
    plain = ledger.entries
    provider_ms = sum(e.provider_ms or e.latency_ms for e in plain)
    framework_ms = sum(e.latency_ms - (e.provider_ms or e.latency_ms) for e in plain)
    decoded = [(s.completion_tokens - 1, s.total_ms - s.ttft_ms) for s in streams if s.completion_tokens > 1]
    return {
        "model": settings.model,
        "api_base": settings.api_base,
        "dry_run": settings.is_scripted,
        "requests": bench.requests,
        "max_tokens": bench.max_tokens,
        "warmup_s": round(warmup_s, 2),
        "prompt_tokens_mean": round(statistics.fmean(e.prompt_tokens for e in plain), 1),
        "completion_tokens_mean": round(statistics.fmean(e.completion_tokens for e in plain), 1),
        "tokens_per_s": round(sum(e.completion_tokens for e in plain) / (provider_ms / 1000), 2)
        if provider_ms
        else None,
        "decode_tokens_per_s": round(sum(n for n, _ in decoded) / (sum(ms for _, ms in decoded) / 1000), 2)
        if decoded and sum(ms for _, ms in decoded) > 0
        else None,
        "ttft_ms": _spread([s.ttft_ms for s in streams]),
        "latency_ms": _spread([e.latency_ms for e in plain]),
        "provider_ms_total": round(provider_ms, 1),
        "framework_ms_total": round(framework_ms, 1),
        "framework_ms_per_call": round(framework_ms / len(plain), 2),
        "framework_share": round(framework_ms / provider_ms, 4) if provider_ms else None,
        "load_avg_1m": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
    }
