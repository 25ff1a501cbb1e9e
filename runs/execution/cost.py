"""What a run will cost, before paying: `atelier recipe cost RECIPE`.

No provider is called. The recipe's grid is run on a sample of its cases with every role answered
by the offline `scripted` model (its own `max_tokens` kept), in a scratch folder with no response
cache: that measures how many calls each role makes per episode and how long its prompts are. The
forecast scales this to every episode of the recipe (cases x systems) and prices it per role:

- calls: as measured, per case, from -50% to +100% (cases differ, and a real model's answers are not
  the dry run's: a judge's call per rubric aspect, a researcher's per source, a plan's sub-topics, an
  agent's loop that runs to its budget);
- prompt tokens: per call as measured, from -55% to +50% (a real model's answers, which later
  prompts carry — notes, briefs, drafts — are longer or shorter than the scripted model's; cases
  differ; and another model's tokenizer counts the same text differently), over the calls' range;
  at the high end a judge's or the simulated user's call also carries the system's answer at its
  longest (the `max_tokens` of the system's text roles): long answers make long judge prompts;
- completion tokens: the point estimate modelled per call from its role and kind: when earlier
  runs of this recipe on the same model left real calls in their ledgers (the run folder being
  resumed, or run folders of the recipe under its `out_dir`), the mean of what those calls of the
  role and kind took; otherwise the role's typical length (`TYPICAL_TEXT_TOKENS`,
  `TYPICAL_STRUCTURED_TOKENS`: a report, an answer, a JSON verdict); capped at the role's
  `max_tokens`. The range runs from one token a call (a terse model) to every call at its role's
  `max_tokens` (its model's maximum output, or `DEFAULT_MAX_TOKENS` when litellm does not know it:
  said in the forecast): a real model may stop at once or write to its limit, and the range holds
  both;
- prices: the role's own `input_cost_per_token` / `output_cost_per_token`, else litellm's cost map
  (offline copy); `scripted` and local models cost nothing; a model with no known price makes its
  role's and the total's dollars `null`, never `$0`.

A system's counterfactual controls (`[run] controls`) are forecast as episodes of their own, under
`<system>~<kind>` (the name a budget reserves them under): the dry run runs them too.

Each figure is a low–high range with a point estimate (`point`, where the range is centred on one).
`[run] budget_usd` (`--budget-usd`) plans episodes by the point estimate and holds each call's own
bound while it is in flight (`runs.execution.budget.Budget`); the high end per episode is the
worst case an executor that cannot hold calls (Ray) reserves.
"""

from __future__ import annotations

import tempfile
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from atelier.agents.models.pricing import Price, price_of
from atelier.agents.models.settings import settings_for_role
from atelier.agents.models.spend import DEFAULT_MAX_TOKENS, output_limit
from atelier.benchmarks.controls import control_name
from atelier.graphs.context import SystemSpec
from atelier.runs.execution.budget import Budget
from atelier.runs.folder.recipe import Recipe
from atelier.runs.folder.resume import JUDGE_SIDE

# calls: an agent's loop (agentic researchers, tool turns) can run to its budget on a real model's
# answers where the dry run's stopped halfway (16 researcher calls for the dry run's 8), or stop sooner
CALL_SPREAD = (0.5, 2.0)
# prompt tokens: a real model's answers are longer or shorter, and another model's tokenizer counts the same text differently (a server
# reporting words, as the test stub does, counts 0.5-0.7x of cl100k's tokens: fewer on JSON)
PROMPT_SPREAD = (0.45, 1.5)
# What one completion of a role typically takes when no earlier run says better: a report, an answer,
# a note; and a JSON answer (a verdict with feedback, a plan, a profile). Priors, replaced by what the
# recipe's earlier runs on the same model took (`earlier_calls`).
TYPICAL_TEXT_TOKENS: dict[str, int] = {"writer": 1200, "system": 500, "user_sim": 150}
DEFAULT_TEXT_TOKENS = 400
TYPICAL_STRUCTURED_TOKENS: dict[str, int] = {"memory": 300, "planner": 250, "researcher": 250}
DEFAULT_STRUCTURED_TOKENS = 200  # a judge's verdict with feedback, a clarifying question, ...


class Span(BaseModel):
    low: float
    high: float
    point: float | None = Field(default=None, description="The estimate itself (inside the range).")

    @classmethod
    def of(cls, low: float, high: float, digits: int = 0, point: float | None = None) -> Span:
        middle = (low + high) / 2 if point is None else min(max(point, low), high)
        return cls(low=round(low, digits), high=round(high, digits), point=round(middle, digits))

    def __add__(self, other: Span) -> Span:
        return Span(
            low=round(self.low + other.low, 6),
            high=round(self.high + other.high, 6),
            point=round(self.estimate + other.estimate, 6),
        )

    @property
    def estimate(self) -> float:
        return self.point if self.point is not None else (self.low + self.high) / 2


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
        description="Per system, the most one episode may cost (what a budget reserves while it runs)."
    )
    per_episode_usd: dict[str, float | None] = Field(
        default_factory=dict, description="Per system, what one episode is expected to cost (the point estimate)."
    )
    history_calls: int = Field(
        default=0, description="Real calls of earlier runs of the recipe its completion lengths were taken from."
    )
    notes: list[str] = Field(default_factory=list)


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


def completion_span(
    role: str, entries: list[Any], limit: int, history: dict[tuple[str, str], list[int]]
) -> tuple[float, float, float]:
    """The completion tokens of the dry run's calls of one role (one system), as a real model would
    write them: (low, point, high): one token a call, the modelled length (the mean of earlier real
    calls of the role and kind, else its typical length), every call at its role's `max_tokens`
    (see the module's docstring)."""
    point = 0.0
    for entry in entries:
        kind = "text" if entry.kind == "text" else "structured"
        seen = history.get((role, kind))
        if seen:
            typical = sum(seen) / len(seen)
        elif kind == "text":
            typical = TYPICAL_TEXT_TOKENS.get(role, DEFAULT_TEXT_TOKENS)
        else:
            typical = TYPICAL_STRUCTURED_TOKENS.get(role, DEFAULT_STRUCTURED_TOKENS)
        point += min(typical, limit)
    return float(min(1, limit) * len(entries)), point, float(limit * len(entries))


def earlier_calls(recipe: Recipe, folders: list[Path] | None = None) -> list[Any]:
    """Real model calls of earlier runs of this recipe (same name): `folders` when given, else every
    run folder under its `out_dir`. Calls answered by `scripted` are left out (they say nothing of a
    real model's lengths)."""
    from atelier.agents.models.ledger import read_ledger
    from atelier.runs.folder.layout import stored_config

    if folders is None:
        root = Path(recipe.run.out_dir)
        folders = sorted(p.parent for p in root.glob("*/config.json")) if root.is_dir() else []
    calls: list[Any] = []
    for folder in folders:
        try:
            stored = stored_config(folder / "config.json")
            if stored is None or stored.model_dump()["recipe"].get("name") != recipe.name:
                continue
            entries = read_ledger(folder / "ledger.jsonl") if (folder / "ledger.jsonl").exists() else []
        except Exception:  # noqa: BLE001 - a folder that cannot be read teaches nothing; the priors stand
            continue
        calls += [e for e in entries if e.status == "ok" and not e.dry_run and e.system and e.completion_tokens]
    return calls


def _history(recipe: Recipe, calls: list[Any]) -> dict[tuple[str, str], list[int]]:
    """Completion tokens of earlier real calls by (role, kind), of the model each role uses now."""
    specs = {s.name: s for s in recipe.systems}
    out: dict[tuple[str, str], list[int]] = defaultdict(list)
    for entry in calls:
        spec = specs.get(entry.system)
        if spec is None:
            continue
        settings = settings_for_role({**recipe.role_models(), **spec.models}, entry.role)
        if settings.model != entry.model and not entry.model.endswith(settings.model.split("/", 1)[-1]):
            continue
        out[(entry.role, "text" if entry.kind == "text" else "structured")].append(entry.completion_tokens)
    return dict(out)


def forecast(recipe: Recipe, *, run: RunForLedger, sample: int = 2, history: list[Any] | None = None) -> CostForecast:
    """The forecast of `recipe` (see the module's docstring). `history`: real calls of earlier runs
    of the recipe (default: those under its `out_dir`, `earlier_calls`)."""
    cases = recipe.cases()
    epochs = recipe.run.epochs  # each epoch makes the calls of one (measured) epoch again
    # a system's counterfactual controls (`[run] controls`) are episodes of their own, each with its own line
    specs = {name: spec for spec in recipe.systems for name in episode_names(recipe, spec)}
    episodes = len(cases) * len(specs) * epochs
    ledger, measured_cases = _measure(recipe, min(sample, len(cases)), run)
    per_case = len(cases) * epochs / max(1, measured_cases)  # episodes of each system scale with the cases
    notes: list[str] = []
    if not recipe.web.uses_sandbox:
        notes.append(f"prompts measured on the sandbox web, not on {recipe.web.provider}: page texts differ in length")
    earlier = earlier_calls(recipe) if history is None else history
    lengths = _history(recipe, earlier)
    if lengths:
        notes.append(
            f"completion lengths from {sum(len(v) for v in lengths.values())} calls of earlier runs of the recipe"
        )

    grouped: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for entry in ledger:
        if entry.status == "ok" and entry.system is not None:  # episodes' calls (not the run's own probes)
            name = control_name(entry.system, entry.control) if entry.control else entry.system
            grouped[(name, entry.role)].append(entry)

    answer_bound = _answer_bounds(recipe, ledger, specs)
    roles: dict[str, RoleForecast] = {}
    systems: dict[str, dict[str, Any]] = {name: {"calls": Span.of(0, 0), "usd": Span.of(0, 0, 6)} for name in specs}
    per_episode_high: dict[str, float | None] = dict.fromkeys(specs, 0.0)
    per_episode_point: dict[str, float | None] = dict.fromkeys(specs, 0.0)
    for (system, role), entries in sorted(grouped.items()):
        settings = settings_for_role({**recipe.role_models(), **specs[system].models}, role)
        limit, assumed = output_limit(settings)
        price = price_of(settings)
        measured = len(entries) * per_case
        # a range even on every case: a real model's answers are not the dry run's (a plan with more
        # sub-topics, a judge finding more aspects, a researcher reading more pages)
        calls = Span.of(measured * CALL_SPREAD[0], measured * CALL_SPREAD[1], point=measured)
        prompt = sum(e.prompt_tokens for e in entries) * per_case
        # per call as PROMPT_SPREAD, over as many calls as the calls' range
        # a judge's (or the simulated user's) prompt carries the system's answer, which may run to
        # its max_tokens: at the high end, every such call's prompt holds an answer that long
        carried = answer_bound.get(system, 0) if role in ANSWER_READERS else 0
        prompt_span = Span.of(
            prompt * PROMPT_SPREAD[0] * calls.low / measured,
            prompt * PROMPT_SPREAD[1] * calls.high / measured + carried * calls.high,
            point=prompt,
        )
        low, point, high = completion_span(role, entries, limit, lengths)
        completion_span_ = Span.of(
            low * per_case * calls.low / measured,
            high * per_case * calls.high / measured,
            point=point * per_case,
        )
        usd = (
            Span.of(
                prompt_span.low * price.input_per_token + completion_span_.low * price.output_per_token,
                prompt_span.high * price.input_per_token + completion_span_.high * price.output_per_token,
                6,
                point=prompt_span.estimate * price.input_per_token + completion_span_.estimate * price.output_per_token,
            )
            if price.input_per_token is not None and price.output_per_token is not None  # price.known
            else None
        )
        if assumed:
            notes.append(
                f"role {role} ({settings.model}) has no max_tokens and litellm knows no output limit: "
                f"completions capped at {DEFAULT_MAX_TOKENS} tokens assumed"
            )
        previous = roles.get(role)
        roles[role] = _merged(
            previous,
            RoleForecast(
                role=role,
                model=settings.model,
                calls=calls,
                prompt_tokens=prompt_span,
                completion_tokens=completion_span_,
                max_tokens=limit,
                max_tokens_assumed=assumed,
                price=price,
                usd=usd,
            ),
        )
        systems[system]["calls"] = systems[system]["calls"] + calls
        if usd is None or systems[system]["usd"] is None:
            systems[system]["usd"] = None
            per_episode_high[system] = per_episode_point[system] = None
        else:
            systems[system]["usd"] = systems[system]["usd"] + usd
            per_episode_high[system] = (per_episode_high[system] or 0.0) + usd.high / (len(cases) * epochs)
            per_episode_point[system] = (per_episode_point[system] or 0.0) + usd.estimate / (len(cases) * epochs)

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
        per_episode_usd={k: (round(v, 6) if v is not None else None) for k, v in per_episode_point.items()},
        history_calls=sum(len(v) for v in lengths.values()),
        notes=list(dict.fromkeys(notes)),
    )


def episode_names(recipe: Recipe, system: SystemSpec) -> list[str]:
    """The names a system's episodes are forecast and budgeted under: its own, then each of its
    counterfactual controls' (`<system>~<kind>`)."""
    kinds = system.controls if system.controls is not None else recipe.run.controls
    return [system.name, *(control_name(system.name, kind) for kind in kinds)]


# roles whose prompts carry the system's answer: the judges' and the simulated user's
ANSWER_READERS = frozenset((*JUDGE_SIDE, "user_sim"))


def _answer_bounds(recipe: Recipe, ledger: list[Any], specs: dict[str, Any]) -> dict[str, int]:
    """Per system (and control: `specs` by episode name), the longest answer it can give: the largest
    `max_tokens` of its roles that wrote free text in the dry run (the answer a judge then reads)."""
    out: dict[str, int] = {}
    for entry in ledger:
        name = control_name(entry.system, entry.control) if entry.system and entry.control else entry.system
        if entry.status != "ok" or name not in specs or entry.kind != "text" or entry.role in ANSWER_READERS:
            continue
        settings = settings_for_role({**recipe.role_models(), **specs[name].models}, entry.role)
        out[name] = max(out.get(name, 0), output_limit(settings)[0])
    return out


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


def plan_budget(recipe: Recipe, run: RunForLedger, folder: Path | None = None) -> Budget | None:
    """The run's budget with each system's planned and worst-case cost per episode, or None when it has none. A
    budget over a model with no known price is refused (ConfigError), before any call: it could not
    be kept. Runs the forecast's scripted dry run (no provider call); completion lengths come from
    earlier runs of the recipe, `folder` (the run folder, when resumed) among them."""
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
    folders = sorted(p.parent for p in Path(recipe.run.out_dir).glob("*/config.json"))
    if folder is not None and folder.resolve() not in {f.resolve() for f in folders}:
        folders.append(folder)
    predicted = forecast(recipe, run=run, history=earlier_calls(recipe, folders))
    unpriced = {name: usd for name, usd in predicted.per_episode_usd_high.items() if usd is None}
    if unpriced:
        raise ConfigError(
            f"[run] budget_usd: roles {', '.join(predicted.total['unpriced_roles'])} have no known price "
            f"(systems {', '.join(unpriced)}), so no budget can be kept; set input_cost_per_token and "
            "output_cost_per_token for them, or run without a budget"
        )
    return Budget(
        limit,
        {name: float(usd or 0.0) for name, usd in predicted.per_episode_usd.items()},
        worst_case_usd={name: float(usd or 0.0) for name, usd in predicted.per_episode_usd_high.items()},
        hold_calls=recipe.run.executor == "local",  # a Ray worker's calls run in its own process
    )
