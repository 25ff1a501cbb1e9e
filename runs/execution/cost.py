"""What a run will cost, before paying: `atelier recipe cost RECIPE`.

No provider is called. The recipe's grid is run on a sample of its cases with every role answered
by the offline `scripted` model (its own `max_tokens` kept), in a scratch folder with no response
cache: that measures how many calls each role makes per episode and how long its prompts are. The
forecast scales this to every episode of the recipe (cases x systems) and prices it per role:

- calls: as measured, per case; when the sample is not every case, from -25% to +50% (cases differ:
  a judge's call per rubric aspect, a researcher's per source);
- prompt tokens: as measured, from -25% to +50% (a real model's answers, which later prompts carry
  — notes, briefs, drafts — are longer or shorter than the scripted model's; and cases differ);
- completion tokens: bounded by the role's `max_tokens` (the high end) and, at the low end, its
  typical share of it for a text answer (`TYPICAL_SHARE`) or what the dry run's structured answer
  took (a structured answer is as short as its schema allows); a role with no `max_tokens` is
  bounded by its model's maximum output, or `DEFAULT_MAX_TOKENS` when litellm does not know it
  (said in the forecast);
- prices: the role's own `input_cost_per_token` / `output_cost_per_token`, else litellm's cost map
  (offline copy); `scripted` and local models cost nothing; a model with no known price makes its
  role's and the total's dollars `null`, never `$0`.

Each figure is a low–high range. `[run] budget_usd` (`--budget-usd`) uses the high end per
episode to decide whether an episode may start.
"""

from __future__ import annotations

import tempfile
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from atelier.agents.models.settings import ModelSettings, settings_for_role
from atelier.runs.execution.budget import Budget
from atelier.runs.folder.recipe import Recipe

TYPICAL_SHARE = 0.25  # of max_tokens a completion uses, at the low end of the range
DEFAULT_MAX_TOKENS = 4096  # a role with no max_tokens, on a model litellm has no output limit for
SPREAD = (0.75, 1.5)  # a measured figure scaled to the range's ends


class Span(BaseModel):
    low: float
    high: float

    @classmethod
    def of(cls, low: float, high: float, digits: int = 0) -> Span:
        return cls(low=round(low, digits), high=round(high, digits))

    def __add__(self, other: Span) -> Span:
        return Span(low=round(self.low + other.low, 6), high=round(self.high + other.high, 6))


class Price(BaseModel):
    input_per_token: float | None
    output_per_token: float | None
    source: str = Field(description="recipe | litellm | free (scripted, local) | unknown")

    @property
    def known(self) -> bool:
        return self.input_per_token is not None and self.output_per_token is not None


class RoleForecast(BaseModel):
    role: str
    model: str
    calls: Span = Field(description="Model calls over the whole run.")
    prompt_tokens: Span
    completion_tokens: Span
    max_tokens: int
    max_tokens_assumed: bool = Field(description="True when neither the role nor litellm gave an output limit.")
    price: Price
    usd: Span | None = Field(description="null: the model's price is unknown.")


class CostForecast(BaseModel):
    recipe: str
    episodes: int
    sampled_cases: int
    roles: dict[str, RoleForecast]
    systems: dict[str, dict[str, Any]]
    total: dict[str, Any]
    per_episode_usd_high: dict[str, float | None] = Field(
        description="Per system, the most one episode may cost (what a budget reserves before it starts)."
    )
    notes: list[str] = Field(default_factory=list)


def price_of(settings: ModelSettings) -> Price:
    if settings.is_scripted or settings.is_local:
        return Price(input_per_token=0.0, output_per_token=0.0, source="free")
    if settings.input_cost_per_token is not None and settings.output_cost_per_token is not None:
        return Price(
            input_per_token=settings.input_cost_per_token,
            output_per_token=settings.output_cost_per_token,
            source="recipe",
        )
    info = _model_info(settings.model)
    if info.get("input_cost_per_token") is not None and info.get("output_cost_per_token") is not None:
        return Price(
            input_per_token=info["input_cost_per_token"],
            output_per_token=info["output_cost_per_token"],
            source="litellm",
        )
    return Price(input_per_token=None, output_per_token=None, source="unknown")


def _model_info(model: str) -> dict[str, Any]:
    from atelier.agents.models.gateway import configured_litellm

    try:
        return dict(configured_litellm().get_model_info(model))
    except Exception:  # noqa: BLE001 - litellm raises its own error types for a model it has not mapped
        return {}


def output_limit(settings: ModelSettings) -> tuple[int, bool]:
    """The most tokens one completion of this role can take, and whether that is an assumption."""
    if settings.max_tokens is not None:
        return settings.max_tokens, False
    if not (settings.is_scripted or settings.is_local):
        known = _model_info(settings.model).get("max_output_tokens")
        if known:
            return int(known), False
    return DEFAULT_MAX_TOKENS, True


def _dry_recipe(recipe: Recipe, sample: int, folder: Path) -> Recipe:
    """The recipe on `sample` cases, every role scripted (max_tokens kept), no cache, the sandbox web."""
    data = recipe.model_dump(mode="python")

    def scripted(settings: dict[str, Any]) -> dict[str, Any]:
        return {"model": "scripted", "max_tokens": settings.get("max_tokens")}

    data["models"] = {role: scripted(s) for role, s in data["models"].items()}
    for system in data["systems"]:
        system["models"] = {role: scripted(s) for role, s in system["models"].items()}
    data["benchmark"]["limit"] = sample
    data["cache"] = {"enabled": False}
    web = data["web"]
    if not recipe.web.uses_sandbox:  # a real search service would be called: measure on the sandbox instead
        web.update(provider="searxng", provider_options={}, reader="direct", reader_options={}, sandbox=None)
    web.update(mode="record", cache_dir=None, copy_dir=None)
    data["run"] = {**data["run"], "out_dir": str(folder), "executor": "local", "budget_usd": None, "epochs": 1}
    data["report"] = {**data["report"], "paper": []}
    return Recipe.model_validate(data)


# Runs a recipe in a run folder and returns its ledger: the runner's `dry_run_ledger` (the runner
# plans a budget with this module, so it hands its own way of running in rather than being imported)
RunForLedger = Callable[[Recipe, Path], list[Any]]


def _measure(recipe: Recipe, sample: int, run: RunForLedger) -> tuple[list[Any], int]:
    """The ledger of a scripted dry run of `recipe` on `sample` cases, and how many cases it ran."""
    with tempfile.TemporaryDirectory(prefix="atelier-cost-") as scratch:
        dry = _dry_recipe(recipe, sample, Path(scratch))
        return run(dry, Path(scratch) / "run"), len(dry.cases())


def forecast(recipe: Recipe, *, run: RunForLedger, sample: int = 2) -> CostForecast:
    cases = recipe.cases()
    epochs = recipe.run.epochs  # each epoch makes the calls of one (measured) epoch again
    episodes = len(cases) * len(recipe.systems) * epochs
    ledger, measured_cases = _measure(recipe, min(sample, len(cases)), run)
    per_case = len(cases) * epochs / max(1, measured_cases)  # episodes of each system scale with the cases
    every_case = measured_cases == len(cases)  # then the calls are as measured, not a range
    notes: list[str] = []
    if not recipe.web.uses_sandbox:
        notes.append(f"prompts measured on the sandbox web, not on {recipe.web.provider}: page texts differ in length")

    grouped: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for entry in ledger:
        if entry.status == "ok" and entry.system is not None:  # episodes' calls (not the run's own probes)
            grouped[(entry.system, entry.role)].append(entry)

    roles: dict[str, RoleForecast] = {}
    systems: dict[str, dict[str, Any]] = {
        s.name: {"calls": Span.of(0, 0), "usd": Span.of(0, 0, 6)} for s in recipe.systems
    }
    per_episode_high: dict[str, float | None] = {s.name: 0.0 for s in recipe.systems}
    specs = {s.name: s for s in recipe.systems}
    for (system, role), entries in sorted(grouped.items()):
        settings = settings_for_role({**recipe.role_models(), **specs[system].models}, role)
        limit, assumed = output_limit(settings)
        price = price_of(settings)
        measured = len(entries) * per_case
        calls = Span.of(measured, measured) if every_case else Span.of(measured * SPREAD[0], measured * SPREAD[1])
        prompt = sum(e.prompt_tokens for e in entries) * per_case
        prompt_span = Span.of(prompt * SPREAD[0], prompt * SPREAD[1])
        shortest = sum(e.completion_tokens if e.kind != "text" else limit * TYPICAL_SHARE for e in entries) * per_case
        completion_span = Span.of(shortest * calls.low / measured, calls.high * limit)
        usd = (
            Span.of(
                prompt_span.low * price.input_per_token + completion_span.low * price.output_per_token,
                prompt_span.high * price.input_per_token + completion_span.high * price.output_per_token,
                6,
            )
            if price.input_per_token is not None and price.output_per_token is not None  # price.known
            else None
        )
        if assumed:
            notes.append(
                f"role {role} ({settings.model}) has no max_tokens and litellm knows no output limit: "
                f"{DEFAULT_MAX_TOKENS} tokens assumed per completion"
            )
        previous = roles.get(role)
        roles[role] = _merged(
            previous,
            RoleForecast(
                role=role,
                model=settings.model,
                calls=calls,
                prompt_tokens=prompt_span,
                completion_tokens=completion_span,
                max_tokens=limit,
                max_tokens_assumed=assumed,
                price=price,
                usd=usd,
            ),
        )
        systems[system]["calls"] = systems[system]["calls"] + calls
        if usd is None or systems[system]["usd"] is None:
            systems[system]["usd"] = None
            per_episode_high[system] = None
        else:
            systems[system]["usd"] = systems[system]["usd"] + usd
            per_episode_high[system] = (per_episode_high[system] or 0.0) + usd.high / (len(cases) * epochs)

    priced = [r.usd for r in roles.values()]
    known = [u for u in priced if u is not None]
    total_usd = None if len(known) < len(priced) else sum(known, Span.of(0, 0, 6))
    total = {
        "calls": sum((r.calls for r in roles.values()), Span.of(0, 0)),
        "prompt_tokens": sum((r.prompt_tokens for r in roles.values()), Span.of(0, 0)),
        "completion_tokens": sum((r.completion_tokens for r in roles.values()), Span.of(0, 0)),
        "usd": total_usd,
        "unpriced_roles": sorted(r.role for r in roles.values() if r.usd is None),
    }
    return CostForecast(
        recipe=recipe.name,
        episodes=episodes,
        sampled_cases=measured_cases,
        roles=roles,
        systems=systems,
        total=total,
        per_episode_usd_high={k: (round(v, 6) if v is not None else None) for k, v in per_episode_high.items()},
        notes=list(dict.fromkeys(notes)),
    )


def _merged(previous: RoleForecast | None, new: RoleForecast) -> RoleForecast:
    """One role over several systems: calls, tokens and dollars added (a role priced on one system
    and not on another is unpriced)."""
    if previous is None:
        return new
    usd = previous.usd + new.usd if previous.usd is not None and new.usd is not None else None
    model = previous.model if previous.model == new.model else f"{previous.model}, {new.model}"
    return new.model_copy(
        update={
            "model": model,
            "calls": previous.calls + new.calls,
            "usd": usd,
            "prompt_tokens": previous.prompt_tokens + new.prompt_tokens,
            "completion_tokens": previous.completion_tokens + new.completion_tokens,
            "max_tokens": max(previous.max_tokens, new.max_tokens),
            "max_tokens_assumed": previous.max_tokens_assumed or new.max_tokens_assumed,
        }
    )


def format_usd(span: Span | None) -> str:
    if span is None:
        return "unknown"
    return f"${span.low:,.4f} – ${span.high:,.4f}" if span.high < 1 else f"${span.low:,.2f} – ${span.high:,.2f}"


# ----------------------------------------------------------------------------- the budget


def plan_budget(recipe: Recipe, run: RunForLedger) -> Budget | None:
    """The run's budget with each system's reservation per episode, or None when it has none. A
    budget over a model with no known price is refused (ConfigError), before any call: it could not
    be kept. Runs the forecast's scripted dry run (no provider call)."""
    from atelier.benchmarks.common.errors import ConfigError

    limit = recipe.run.budget_usd
    if limit is None:
        return None
    for system in recipe.systems:
        roles = {**recipe.role_models(), **system.models}
        for role in recipe.roles_used():
            settings = settings_for_role(roles, role)
            if not price_of(settings).known:
                raise ConfigError(
                    f"[run] budget_usd: role {role} of system {system.name!r} uses {settings.model}, whose price "
                    "is unknown, so no budget can be kept; set input_cost_per_token and output_cost_per_token "
                    f"in [models.{role}], or run without a budget"
                )
    predicted = forecast(recipe, run=run)
    unpriced = {name: usd for name, usd in predicted.per_episode_usd_high.items() if usd is None}
    if unpriced:
        raise ConfigError(
            f"[run] budget_usd: roles {', '.join(predicted.total['unpriced_roles'])} have no known price "
            f"(systems {', '.join(unpriced)}), so no budget can be kept; set input_cost_per_token and "
            "output_cost_per_token for them, or run without a budget"
        )
    per_episode = {name: float(usd or 0.0) for name, usd in predicted.per_episode_usd_high.items()}
    return Budget(limit, per_episode)
