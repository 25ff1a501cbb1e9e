"""The judge interface, the judge registry and what every judge shares.

A judge sees the full case (gold included) and one response. `Judge.judge` is the one entry point:
it runs the judge's `judge_once` `repeats` times (each repeat with its own seed, so a sampling model
gives a per-case variance), and turns a model whose output stays malformed after repair, or an
output that cannot be scored, into a failed judgment with its reason — never into a zero.

Each judge also declares what a case must carry for it to apply (`requirements`), so a run can
refuse a judge/benchmark misfit before any episode (`check_judge_fit`).
"""

from __future__ import annotations

import copy
import math
import re
import statistics
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Generic, NamedTuple, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from atelier.agents.judges.store import ArtifactStore
from atelier.agents.models.gateway import Gateway, ModelCallError
from atelier.agents.response import SystemResponse
from atelier.benchmarks.case import Case
from atelier.benchmarks.common.degradation import Degradation, degradation
from atelier.benchmarks.common.errors import ConfigError
from atelier.benchmarks.common.named_registry import NamedRegistry
from atelier.benchmarks.common.names import checked_folder_name


class JudgeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    label: str | None = Field(
        default=None,
        description="The key of this judge's scores in results (default: its name); lets one "
        "recipe use the same judge twice, e.g. with two models.",
    )
    repeats: int = Field(default=1, ge=1, le=20, description="Judge each response n times: mean and per-case std.")

    @field_validator("label")
    @classmethod
    def _a_label_not_a_path(cls, label: str | None) -> str | None:
        """The label keys the judge's folders of the run folder (`labels/<label>/`, artifacts)."""
        return None if label is None else checked_folder_name(label, "a judge's label")

    @property
    def key(self) -> str:
        return self.label or self.name


def is_bool(value: Any) -> bool:
    """Whether `value` is a boolean of any type: Python's `bool`, or numpy's (`numpy.bool_`, a 0-d
    boolean array: dtype kind 'b'), which is no `bool` yet reads as 1.0 or 0.0 (numpy is not imported)."""
    if isinstance(value, bool) or type(value).__name__ in {"bool", "bool_"}:
        return True
    return getattr(getattr(value, "dtype", None), "kind", None) == "b"


class JudgeResult(BaseModel):
    judge: str = Field(description="The judge's key (its label, or its name).")
    score: float | None = Field(default=None, description="The judge's headline score on its own scale.")
    scale: str = Field(default="0-1", description="The range of `score`, e.g. 0-1 or 0-100.")
    criteria: dict[str, float | None] = Field(
        default_factory=dict, description="Per-criterion scores on the judge's own scale (what meta-eval compares)."
    )
    details: dict[str, Any] = Field(default_factory=dict)
    flags: list[str] = Field(
        default_factory=list, description="Conditions a summary counts (no_cited_claims, order_flip, empty_gold, ...)."
    )
    repeats: int = Field(default=1, description="Repeats that succeeded (a failed one is in details).")
    std: float | None = Field(default=None, description="Sample standard deviation of the score over repeats.")
    error: str | None = None
    degraded: list[Degradation] = Field(
        default_factory=list, description="What this judgment rests on that degraded (gated outputs, unread sources)."
    )

    @field_validator("score", "std", mode="before")
    @classmethod
    def _a_number(cls, value: Any) -> Any:
        """A bool is no score (pydantic would read `true`, or numpy's `bool_(True)`, as 1.0: a judge's
        bug, or an edited file)."""
        if is_bool(value):
            raise ValueError(f"{str(value).lower()} is a bool, not a score")
        return value

    @field_validator("criteria", mode="before")
    @classmethod
    def _numbers(cls, value: Any) -> Any:
        if isinstance(value, dict):
            for name, score in value.items():
                if is_bool(score):
                    raise ValueError(f"criterion {name!r}: {str(score).lower()} is a bool, not a score")
        return value

    @property
    def failed(self) -> bool:
        return self.error is not None


class JudgeFailed(Exception):
    """This judgment cannot be made (the model's output could not be scored); the reason is recorded."""


# --------------------------------------------------------------------------- degenerate outputs

T = TypeVar("T", bound=BaseModel)


def blank(text: str | None) -> bool:
    """No letter or digit: empty, spaces, or punctuation only (`","`, `");"`), nothing a score can rest on."""
    return not text or not any(ch.isalnum() for ch in text)


def quoted(text: str, limit: int = 40) -> str:
    """A model's text in a problem's description: repr'd, cut to `limit` characters."""
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


@dataclass(frozen=True)
class Gated(Generic[T]):
    """A judge's output past the degenerate-output gate: the answer kept, what is still degenerate in
    it (empty: sound), and the re-ask as a `judge_output_gated` degradation when there was one."""

    output: T
    problems: list[str]
    degraded: list[Degradation]
    source: str = ""  # who answered, for a failure's reason: "<role> model <model>"

    def failure(self, what: str, problems: Sequence[str]) -> JudgeFailed:
        """The failed judgment's reason: which model, what stayed degenerate after asking again."""
        return JudgeFailed(f"{self.source}: {what} still degenerate after asking again: {'; '.join(problems)}")

    def or_fail(self, what: str) -> T:
        """The output, or JudgeFailed naming the model and what stayed degenerate after asking again."""
        if self.problems:
            raise self.failure(what, self.problems)
        return self.output


def with_note(messages: list[dict[str, str]], problems: Sequence[str]) -> list[dict[str, str]]:
    """The same request with a note on what was unusable in the previous answer: a new prompt, so a
    new sample (the response cache cannot hand back the same answer)."""
    note = (
        f"\n\n# Note\nYour previous answer to this task could not be used: {'; '.join(problems)}. "
        "Answer again, following the task exactly."
    )
    return [*messages[:-1], {**messages[-1], "content": messages[-1]["content"] + note}]


async def ask_again_once(
    gateway: Gateway,
    role: str,
    messages: list[dict[str, str]],
    schema: type[T],
    problems_of: Callable[[T], list[str]],
    step: str,
) -> Gated[T]:
    """A structured judge output; when `problems_of` finds it degenerate, asked once more with a note
    naming what was wrong (recorded as `judge_output_gated` at `step`), and the second answer kept
    with whatever is still wrong in it. What then happens to a still degenerate output (a failed
    judgment, spans removed, a criterion left unscored) is the judge's to decide."""
    source = f"{role} model {gateway.settings(role).model}"
    output = await gateway.structured(role, messages, schema)
    problems = problems_of(output)
    if not problems:
        return Gated(output, [], [], source)
    again = await gateway.structured(role, with_note(messages, problems), schema)
    return Gated(again, problems_of(again), [degradation("judge_output_gated", step, "; ".join(problems))], source)


class PageSource(Protocol):
    """What a judge needs from the run's web: fetch a URL (through its cache), get a page's text."""

    async def fetch(self, url: str) -> Any: ...


@dataclass(frozen=True)
class JudgeEnv:
    """What a judge may use besides the case and the response."""

    gateway: Gateway
    web: Callable[[], Awaitable[PageSource]] | None = (
        None  # the run's web (search + fetch + cache), started on first use
    )
    store: ArtifactStore | None = None  # artifacts generated once and reused (PQR criteria, BESPOKE rubrics)
    # the run's source store: the text a system read, by its sha256 (raises LookupError when absent);
    # how PQR's R reads a cited source that has no web address (gold information, a context item)
    sources: Callable[[str], str] | None = None

    def model_identity(self, role: str) -> dict[str, Any]:
        """What identifies the model behind `role` in a stored artifact's key (no secrets)."""
        settings = self.gateway.settings(role)
        return settings.model_dump(
            mode="json", include={"model", "api_base", "temperature", "seed", "max_tokens", "extra"}
        )

    async def generated_once(
        self, kind: str, identity: dict[str, Any], create: Callable[[], Awaitable[dict[str, Any]]], reuse: bool = True
    ) -> tuple[dict[str, Any], str | None]:
        """An artifact from the store (made by `create` the first time), with its key; made afresh,
        with no key, when reuse is off or there is no store."""
        if not reuse or self.store is None:
            return await create(), None
        artifact, key, _ = await self.store.get_or_create(kind, identity, create)
        return artifact, key

    def for_repeat(self, index: int, roles: Sequence[str]) -> JudgeEnv:
        """The same environment with the seeds of `roles` moved by `index`: a new sample per repeat
        (and a new cache key), identical to this one for the first repeat."""
        if index == 0:
            return self
        gateway = copy.copy(self.gateway)
        gateway.roles = dict(self.gateway.roles)
        for role in roles:
            settings = self.gateway.settings(role)
            gateway.roles[role] = settings.model_copy(update={"seed": (settings.seed or 0) + index})
        return replace(self, gateway=gateway)


_SCALE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*-\s*(-?\d+(?:\.\d+)?)\s*$")


def parse_scale(scale: str) -> tuple[float, float] | None:
    """A judge's declared scale, `low-high`, as two finite numbers (low < high); None when it is not
    that (a bound of 400 digits reads as infinity: no scale, or every score would lie within it)."""
    match = _SCALE.match(scale) if isinstance(scale, str) else None
    if match is None:
        return None
    low, high = float(match[1]), float(match[2])
    return (low, high) if math.isfinite(low) and math.isfinite(high) and low < high else None


def _scale_shown(scale: Any, limit: int = 40) -> str:
    """`scale` as a message names it: its repr, cut (with its length said) when it is long."""
    shown = repr(scale)
    return shown if len(shown) <= limit else f"{shown[:limit]}… ({len(str(scale))} characters)"


class Requirement(NamedTuple):
    """Something a case must carry for a judge to apply, e.g. ("rubric aspects (gold.rubric_aspects)", check)."""

    what: str
    present: Callable[[Case], bool]


class Judge(ABC):
    name: ClassVar[str]
    config_model: ClassVar[type[JudgeConfig]]
    roles: ClassVar[tuple[str, ...]] = ("judge",)  # model roles it calls; the first is its main role
    scale: ClassVar[str] = "0-1"
    comparative: ClassVar[bool] = False  # judges a response against another system's (see ComparativeJudge)

    @property
    def uses_web(self) -> bool:
        """Whether this judge reads pages through the run's web (the preflight then checks it answers)."""
        return False

    preparation: ClassVar[str] = "preparation"  # what `prepare` does, for failure messages
    # True when a criterion's name means something else in each case (LaMP-QA's aspect_1 is the case's own
    # first rubric aspect): its criteria are then not compared across cases (personalization effects)
    case_specific_criteria: ClassVar[bool] = False

    def __init__(self, config: JudgeConfig) -> None:
        self.config = config

    @property
    def key(self) -> str:
        return self.config.key

    @property
    def role(self) -> str:
        return self.roles[0]

    @property
    def step(self) -> str:
        """Where this judge's degradations are recorded, e.g. `judge:pqr`."""
        return f"judge:{self.key}"

    def scale_problem(self) -> str | None:
        """Why the declared `scale` cannot hold a score (agents/judges/contract.py); None when it is `low-high`."""
        if parse_scale(self.scale) is not None:
            return None
        match = _SCALE.match(self.scale) if isinstance(self.scale, str) else None
        if match is not None and not all(math.isfinite(float(bound)) for bound in match.groups()):
            return (
                f"judge {self.key!r} declares scale {_scale_shown(self.scale)}, whose bounds are not both finite "
                "numbers (e.g. '0-1', '1-5', '0-100')"
            )
        return (
            f"judge {self.key!r} declares scale {_scale_shown(self.scale)}, not 'low-high' (e.g. '0-1', '1-5', '0-100')"
        )

    def requirements(self) -> list[Requirement]:
        """What a case must carry for this judge (under this config) to apply."""
        return []

    def missing(self, case: Case) -> list[str]:
        return [r.what for r in self.requirements() if not r.present(case)]

    def recipe_problems(self, systems: Sequence[str]) -> list[str]:
        """Problems with this judge's settings given the recipe's systems (e.g. a name it refers to)."""
        return []

    async def prepare(self, case: Case, env: JudgeEnv) -> Any:
        """What every repeat and every system judged on this case share, made once (PQR's criteria, a
        BESPOKE rubric). Nothing by default."""
        return None

    @abstractmethod
    async def judge_once(
        self, case: Case, response: SystemResponse, env: JudgeEnv, prepared: Any = None
    ) -> JudgeResult:
        """One judgment. Raise JudgeFailed (or let ModelCallError through) when it cannot be made."""

    async def judge(self, case: Case, response: SystemResponse, env: JudgeEnv) -> JudgeResult:
        """`repeats` judgments, aggregated; failures become a failed result with the reason."""
        prepared = await self.prepare_or_fail(case, env)
        if isinstance(prepared, JudgeResult):
            return prepared
        return await self.repeated(lambda repeat_env: self.judge_once(case, response, repeat_env, prepared), env)

    async def prepare_or_fail(self, case: Case, env: JudgeEnv) -> Any:
        """`prepare`'s result, or a failed JudgeResult when the case lacks what the judge needs or
        the preparation failed."""
        missing = self.missing(case)
        if missing:
            return self.failure(f"case {case.id} lacks {', '.join(missing)}")
        try:
            return await self.prepare(case, env)
        except (ModelCallError, JudgeFailed) as exc:
            return self.failure(f"{self.preparation} failed: {exc}")

    def aggregate(self, results: list[JudgeResult]) -> dict[str, Any]:
        """System-level figures beyond the headline's mean, from this judge's judgments of one system:
        each criterion's mean over the responses where it is defined."""
        names = list(dict.fromkeys(name for r in results for name in r.criteria))
        return {"criteria": {name: _mean([r.criteria.get(name) for r in results]) for name in names}}

    async def repeated(self, once: Callable[[JudgeEnv], Awaitable[JudgeResult]], env: JudgeEnv) -> JudgeResult:
        results: list[JudgeResult] = []
        errors: list[str] = []
        for index in range(self.config.repeats):
            try:
                results.append(await once(env.for_repeat(index, self.roles)))
            except (ModelCallError, JudgeFailed) as exc:
                errors.append(str(exc))
        return combine_repeats(self.key, self.scale, results, errors)

    def failure(self, reason: str) -> JudgeResult:
        return JudgeResult(judge=self.key, scale=self.scale, error=reason)

    def result(
        self,
        score: float | None,
        *,
        criteria: dict[str, float | None] | None = None,
        details: dict[str, Any] | None = None,
        flags: Sequence[str] = (),
        degraded: Sequence[Degradation] = (),
    ) -> JudgeResult:
        return JudgeResult(
            judge=self.key,
            score=score,
            scale=self.scale,
            criteria=criteria or {},
            details=details or {},
            flags=sorted(set(flags)),
            degraded=list(degraded),
        )


class ComparativeJudge(Judge):
    """A judge of one system's response against another system's response to the same case (LaMP-QA
    pairwise). A run judges these after every episode, when both responses exist."""

    comparative = True

    @property
    @abstractmethod
    def baseline(self) -> str:
        """The system every other system is compared with."""

    @abstractmethod
    async def judge_pair_once(
        self, case: Case, response: SystemResponse, other: SystemResponse, env: JudgeEnv
    ) -> JudgeResult: ...

    async def judge_pair(
        self, case: Case, response: SystemResponse, other: SystemResponse, env: JudgeEnv
    ) -> JudgeResult:
        prepared = await self.prepare_or_fail(case, env)
        if isinstance(prepared, JudgeResult):
            return prepared
        return await self.repeated(lambda repeat_env: self.judge_pair_once(case, response, other, repeat_env), env)

    async def judge_once(
        self, case: Case, response: SystemResponse, env: JudgeEnv, prepared: Any = None
    ) -> JudgeResult:
        raise JudgeFailed(f"{self.name} compares two systems' responses; it runs after the episodes")

    def recipe_problems(self, systems: Sequence[str]) -> list[str]:
        if self.baseline not in systems:
            return [
                f"judge {self.key!r}: baseline system {self.baseline!r} is not in the recipe "
                f"(systems: {', '.join(systems)})"
            ]
        return []


def combine_repeats(key: str, scale: str, results: list[JudgeResult], errors: list[str]) -> JudgeResult:
    """One result from repeated judgments: the mean score and per-criterion means over the repeats,
    their standard deviation, every repeat's details; failed when no repeat succeeded. A repeat
    score that is not a finite number (inf, NaN) is not averaged: the score is left undefined and
    `repeat_scores` keeps the values, which the judge contract's scale clause then names
    (`contract.score_problems`: `judge_off_scale`)."""
    if not results:
        return JudgeResult(judge=key, scale=scale, error="; ".join(dict.fromkeys(errors)) or "no judgment")
    if len(results) == 1 and not errors:
        return results[0]
    scores = [r.score for r in results if r.score is not None]
    if not all(math.isfinite(s) for s in scores):  # no mean, no std (fsum raises on inf + -inf, stdev on any)
        scores = []
    names = list(dict.fromkeys(name for r in results for name in r.criteria))
    return JudgeResult(
        judge=key,
        score=math.fsum(scores) / len(scores) if scores else None,
        scale=scale,
        criteria={name: _mean([r.criteria.get(name) for r in results]) for name in names},
        details={
            "repeats": [r.details for r in results],
            "repeat_scores": [r.score for r in results],
            "failed_repeats": errors,
        },
        flags=sorted({flag for r in results for flag in r.flags} | ({"failed_repeat"} if errors else set())),
        repeats=len(results),
        std=statistics.stdev(scores) if len(scores) > 1 else None,
        degraded=[d for r in results for d in r.degraded],
    )


def _mean(values: list[float | None]) -> float | None:
    defined = [v for v in values if v is not None]
    if not defined:
        return None
    if not all(math.isfinite(v) for v in defined):  # a criterion's inf and -inf: NaN, not fsum's ValueError
        return sum(defined) / len(defined)
    return math.fsum(defined) / len(defined)


def each_details(results: Sequence[JudgeResult]) -> list[dict[str, Any]]:
    """The details of every judgment, one per repeat (a repeated judgment nests them)."""
    return [d for r in results for d in (r.details.get("repeats") or [r.details])]


def has(what: str, present: Callable[[Case], Any]) -> Requirement:
    return Requirement(what, lambda case: bool(present(case)))


# --------------------------------------------------------------------------- registry


def plugin_judge(value: Any, name: str) -> type[Judge]:
    """A plugin's `Judge` subclass as the judge registered as `name` (a researcher's own judge,
    benchmarks/common/plugins.py): a subclass whose `name` is `name` and whose config model takes
    `name = ...` as the recipe spells it (its `config_model`, default `JudgeConfig`, validates the
    rest of its `[[judges]]` table)."""
    from atelier.benchmarks.common.plugins import adapt_class

    return adapt_class(value, name, kind="judge", base=Judge, config_base=JudgeConfig, name_field="name")


JUDGES: NamedRegistry[type[Judge]] = NamedRegistry(
    "judge",
    modules=(
        "atelier.agents.judges.lampqa",
        "atelier.agents.judges.pqr",
        "atelier.agents.judges.bespoke",
        "atelier.agents.judges.aepd",
        "atelier.agents.judges.locomo",
        "atelier.agents.judges.prefeval",
    ),
    adapt=plugin_judge,
)


def register_judge(cls: type[Judge]) -> type[Judge]:
    JUDGES.register(cls.name, cls)
    return cls


def create_judge(config: JudgeConfig | dict[str, Any]) -> Judge:
    if isinstance(config, dict):
        config = JUDGES.get(str(config.get("name"))).config_model.model_validate(config)
    return JUDGES.get(config.name)(config)


def check_judge_fit(
    judges: Sequence[Judge], cases: Sequence[Case], benchmark: str, systems: Sequence[str] = ()
) -> None:
    """Refuse, before any episode, judges the benchmark's cases cannot feed, naming judge and
    benchmark, and judges whose declared scale cannot hold a score (agents/judges/contract.py)."""
    problems: list[str] = [p for p in (j.scale_problem() for j in judges) if p is not None]
    keys = [j.key for j in judges]
    for key in sorted({k for k in keys if keys.count(k) > 1}):
        problems.append(f"judge {key!r} appears twice; give one of them a `label`")
    for judge in judges:
        problems += judge.recipe_problems(systems) if systems else []
        lacking: Counter[str] = Counter()
        example: dict[str, str] = {}
        for case in cases:
            for what in judge.missing(case):
                lacking[what] += 1
                example.setdefault(what, case.id)
        for what, count in lacking.items():
            problems.append(
                f"judge {judge.key!r} does not fit benchmark {benchmark!r}: {count} of {len(cases)} "
                f"cases lack {what} (e.g. {example[what]})"
            )
    if problems:
        raise ConfigError("\n  ".join(["judges do not fit this run:", *problems]))
