"""What one model call may cost at most, and the guard a run's budget puts in front of every call.

A call's bound is known before it is sent: its prompt (the request's messages, plus the tools and
response format it carries, counted with litellm's tokenizer and a margin for another provider's
tokenizer counting more) and its completion, at most `max_tokens`. A role with no `max_tokens` is
bounded by its model's known output limit (litellm's map), else `DEFAULT_MAX_TOKENS`; under a
budget the call is then sent with that limit (`Gateway._bounded`), so the bound holds.

`SpendGuard` is what a run's budget (`runs.execution.budget.Budget`) offers the gateway: `hold` a
call's bound before it is sent (waiting while calls in flight could still settle for less; False:
it can never fit, the budget is reached), `settle` it for what it cost once it answered (or
failed: nothing). So spent plus the bounds of the calls in flight never passes the budget,
whatever the answers' lengths and however many calls run at once.
"""

from __future__ import annotations

import json
import math
from typing import Any, Protocol

from atelier.agents.models.pricing import model_info
from atelier.agents.models.settings import ModelSettings

BUDGET_REACHED = "budget reached"  # how a call the budget refused fails (its episode is left for a resume)
DEFAULT_MAX_TOKENS = 4096  # a role with no max_tokens, on a model litellm has no output limit for
PROMPT_MARGIN = 1.3  # another provider's tokenizer may count a prompt this much above litellm's count
PROMPT_OVERHEAD = 32  # tokens a chat template adds per request, at most (role markers, separators)
# web searches one call of a grounded model (priced per search) is taken to make at most: its
# provider decides how many, so a budget over such a model holds only within this
GROUNDED_SEARCHES = 10


class SpendGuard(Protocol):
    async def hold(self, bound_usd: float) -> bool: ...

    def settle(self, bound_usd: float, spent_usd: float) -> None: ...


def output_limit(settings: ModelSettings) -> tuple[int, bool]:
    """The most tokens one completion of this role can take, and whether that is an assumption."""
    if settings.max_tokens is not None:
        return settings.max_tokens, False
    if not (settings.is_scripted or settings.is_local):
        known = model_info(settings.model).get("max_output_tokens")
        if known:
            return int(known), False
    return DEFAULT_MAX_TOKENS, True


def prompt_bound(messages: list[dict[str, Any]], carried: dict[str, Any]) -> int:
    """At most how many prompt tokens a request of `messages` carrying `carried` (its tools and
    response format) is billed for."""
    from atelier.agents.models.litellm_setup import configured_litellm

    text = json.dumps(messages, ensure_ascii=False) + json.dumps(carried, ensure_ascii=False)
    counted = int(configured_litellm().token_counter(model="gpt-4o", text=text))
    return math.ceil(counted * PROMPT_MARGIN) + PROMPT_OVERHEAD


def call_bound_usd(settings: ModelSettings, messages: list[dict[str, Any]], carried: dict[str, Any]) -> float | None:
    """The most a request can cost at the role's price, its completion at most `max_tokens` (None:
    the price is unknown)."""
    if settings.input_cost_per_token is not None and settings.output_cost_per_token is not None:
        prices = (settings.input_cost_per_token, settings.output_cost_per_token)
    else:
        info = model_info(settings.model)
        if info.get("input_cost_per_token") is None or info.get("output_cost_per_token") is None:
            return None
        prices = (float(info["input_cost_per_token"]), float(info["output_cost_per_token"]))
    limit, _ = output_limit(settings)
    bound = prompt_bound(messages, carried) * prices[0] + limit * prices[1]
    if settings.search_cost_per_call is not None:
        bound += settings.search_cost_per_call * GROUNDED_SEARCHES
    return bound
