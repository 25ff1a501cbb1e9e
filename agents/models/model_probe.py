"""The model probe: is each role's model reachable, which structured mode does it take, how fast
is it. `atelier model check` and a run's preflight call `probe_models`.

Each distinct model setting is probed once (roles sharing one are reported together) with one
text request and one structured request, through the gateway (so with the same mode discovery,
retries and errors as a run) but never from the response cache.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from pydantic import BaseModel, Field

from atelier.agents.models.gateway import Gateway, ModelCallError
from atelier.agents.models.ledger import Ledger, LedgerEntry
from atelier.agents.models.provider_errors import bad_credentials
from atelier.agents.models.settings import ModelSettings
from atelier.agents.models.structured_output import ModeMemory

PROBE_MAX_TOKENS = 32
PROBE_TIMEOUT_S = 60.0
TEXT_PROBE = [
    {"role": "system", "content": "You are a concise assistant."},
    {"role": "user", "content": "In one short sentence: what is the capital of France?"},
]
STRUCTURED_PROBE = [
    {"role": "system", "content": "You are a concise assistant."},
    {"role": "user", "content": "What is the capital of France? Give the city's name."},
]


class CapitalAnswer(BaseModel):
    city: str = Field(description="The capital's name.")


class ProbeStep(BaseModel):
    ok: bool
    latency_ms: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tokens_per_s: float | None = Field(default=None, description="Completion tokens per second of the provider's time.")
    structured_mode: str | None = None
    refused_modes: list[str] = Field(default_factory=list, description="Modes the endpoint refused before one worked.")
    answer: str | None = None
    error: str | None = None


class ModelProbe(BaseModel):
    roles: list[str]
    model: str
    api_base: str | None = None
    dry_run: bool = False
    text: ProbeStep
    structured: ProbeStep
    calls: list[LedgerEntry] = Field(
        default_factory=list, exclude=True, description="The probe's requests, for a run's ledger (a preflight's)."
    )

    @property
    def ok(self) -> bool:
        return self.text.ok and self.structured.ok


def _step(entries: list[LedgerEntry], *, answer: str | None = None, error: str | None = None) -> ProbeStep:
    done = [e for e in entries if e.status == "ok"]
    last = done[-1] if done else (entries[-1] if entries else None)
    if last is None:
        return ProbeStep(ok=False, error=error or "no request was made")
    seconds = (last.provider_ms or last.latency_ms) / 1000
    return ProbeStep(
        ok=error is None,
        latency_ms=round(sum(e.latency_ms for e in entries), 1),
        prompt_tokens=sum(e.prompt_tokens for e in done),
        completion_tokens=sum(e.completion_tokens for e in done),
        tokens_per_s=round(last.completion_tokens / seconds, 2) if done and seconds > 0 else None,
        structured_mode=last.structured_mode if done else None,
        refused_modes=[e.structured_mode for e in entries if e.status == "refused" and e.structured_mode],
        answer=answer,
        error=error,
    )


def _endpoint_refusal(exc: ModelCallError) -> str | None:
    """What a failed probe says of the endpoint as a whole — credentials that cannot work (401,
    403, a missing key), an unknown model or endpoint (404), a request that cannot be sent — when
    no other request to it could fare better; None for a failure of this request alone."""
    if exc.verdict != "fatal":
        return None
    if exc.status in (401, 403, 404) or bad_credentials(exc.__cause__ if exc.__cause__ is not None else exc):
        return f"HTTP {exc.status}" if exc.status else "bad credentials"
    if exc.attempts == 0:  # refused before any request (a background run asked of chat, a budget)
        return "nothing was sent"
    return None


async def _probe_one(
    roles: list[str], settings: ModelSettings, modes: ModeMemory | None, max_tokens: int
) -> ModelProbe:
    probe = settings.model_copy(
        update={
            "max_tokens": min(settings.max_tokens or max_tokens, max_tokens),
            "max_retries": min(settings.max_retries, 1),
            "timeout_s": min(settings.timeout_s, PROBE_TIMEOUT_S),
        }
    )
    ledger = Ledger(None)
    gateway = Gateway({"probe": probe}, cache=None, ledger=ledger, modes=modes or ModeMemory())
    try:
        steps = []
        unusable: str | None = None  # why the endpoint serves no request at all (the text probe said)
        for kind in ("text", "structured"):
            if unusable is not None:  # the structured probe would be refused the same: not sent
                steps.append(ProbeStep(ok=False, error=f"not asked: the text probe failed ({unusable})"))
                continue
            before = len(ledger.entries)
            answer, error = None, None
            try:
                if kind == "text":
                    answer = (await gateway.text("probe", TEXT_PROBE)).strip()[:200]
                else:
                    answer = (await gateway.structured("probe", STRUCTURED_PROBE, CapitalAnswer)).city[:200]
            except ModelCallError as exc:
                error = str(exc)
                unusable = _endpoint_refusal(exc)
            steps.append(_step(ledger.entries[before:], answer=answer, error=error))
    finally:
        await gateway.aclose()
    return ModelProbe(
        roles=roles,
        model=settings.model,
        api_base=settings.api_base,
        dry_run=settings.is_scripted,
        text=steps[0],
        structured=steps[1],
        calls=list(ledger.entries),
    )


async def probe_models(
    models: Mapping[str, ModelSettings],
    *,
    modes: ModeMemory | None = None,
    max_tokens: int = PROBE_MAX_TOKENS,
) -> list[ModelProbe]:
    """Probe every distinct model setting among `models` (role -> settings), concurrently.
    `modes`: where learned structured modes go (a run folder's, for a preflight)."""
    groups: dict[str, tuple[list[str], ModelSettings]] = {}
    for role, settings in models.items():
        key = settings.model_dump_json(exclude={"api_key"}) + repr(settings.resolved_api_key())
        groups.setdefault(key, ([], settings))[0].append(role)
    return list(await asyncio.gather(*(_probe_one(roles, s, modes, max_tokens) for roles, s in groups.values())))
