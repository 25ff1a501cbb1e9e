"""PQR judge (PDR-Bench §4, Appendices E and I): Personalization, content Quality, factual Reliability.

P — stage 1: a meta-evaluator weighs GOAL, CONT, PRES, ACTI for this (task, persona); stage 2: for each
dimension it writes weighted sub-criteria; both are generated once per (task, persona, judge model),
stored and reused by every system judged on that pair (`agents.judges.store`). Stage 3: a scorer
rates the report 0-10 on every criterion with its analysis (one call for the axis, as Appendix I.1).
Q — the same for DEIN, LOGC, CLAR, per task (no persona); when the case ships DeepResearch Bench
criteria (`gold.criteria`, `gold.dimension_weights`) those are used as they are, dimensions included.
R — see `agents.judges.pqr_reliability`.

The math (weighted means, unscored criteria, FA/CC conventions, overall) is `benchmarks.metrics.pqr`.

Degenerate output: a criterion the scorer left blank (no score), or whose analysis is empty or
punctuation only, has the axis asked again once (a `judge_output_gated` degradation). An analysis
still degenerate fails the judgment with the reason; a criterion still blank is handled as
DeepResearch Bench's `calculate_weighted_scores` handles an unscored criterion (left out of its
dimension's weighted mean; a dimension with none scored scores 0) and recorded as
`criterion_unscored`; an axis none of whose criteria was scored fails the judgment. R's gates and
its unreadable sources: `agents.judges.pqr_reliability`.
Model roles: `pqr_criteria` (stages 1-2), `pqr_judge` (stage 3), `pqr_fact_checker` (R); each falls
back to `judge`. The prompts are this project's own words in the structure of Appendix I.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, create_model, field_validator

from atelier.agents.judges.base import (
    Gated,
    Judge,
    JudgeConfig,
    JudgeEnv,
    JudgeFailed,
    JudgeResult,
    Requirement,
    ask_again_once,
    blank,
    each_details,
    has,
    quoted,
    register_judge,
)
from atelier.agents.judges.material import per_item_model, persona_text, response_section
from atelier.agents.judges.pqr_reliability import ReliabilitySettings, judge_reliability
from atelier.agents.prompts import Section, build_messages
from atelier.agents.response import SystemResponse
from atelier.benchmarks.case import Case
from atelier.benchmarks.common.degradation import Degradation, degradation
from atelier.benchmarks.metrics.pqr import (
    PERSONALIZATION_DIMENSIONS,
    QUALITY_DIMENSIONS,
    AxisScore,
    DimensionJudgement,
    FactualReliability,
    overall_score,
    personalization_score,
    pooled_reliability,
    quality_score,
)
from atelier.benchmarks.metrics.weights import normalize_weights

ROLE_CRITERIA = "pqr_criteria"
ROLE_SCORER = "pqr_judge"
ROLE_FACTS = "pqr_fact_checker"
PROMPT_VERSION = "pqr-1"
Axis = Literal["P", "Q", "R"]


@dataclass(frozen=True)
class Dimension:
    code: str
    field: str  # the key of its block in the scorer's output (Appendix I's output format)
    title: str
    definition: str  # Appendix E
    focus: str  # what the stage-2 prompt asks its criteria to look at


DIMENSIONS = {
    d.code: d
    for d in (
        Dimension(
            "GOAL",
            "goal_alignment",
            "Goal Alignment",
            "How well the report addresses the user's explicit and implicit goals: whether the research "
            "understands how the task relates to this user, draws out their deeper and unstated needs, and "
            "builds the report on them.",
            "user-centred matching of the persona and the task: the user's core explicit needs and deeper "
            "implicit needs in this scenario, and whether the report's perspective, depth and practicality "
            "fit them",
        ),
        Dimension(
            "CONT",
            "content_alignment",
            "Content Alignment",
            "The suitability of the report's topic, depth and breadth for the user's knowledge and "
            "interests: whether content is selected and customized for this user.",
            "whether the choice of content and its depth match the user's interests and knowledge level "
            "(not merely whether information is present); stay clear of goal alignment, presentation "
            "and actionability",
        ),
        Dimension(
            "PRES",
            "presentation_fit",
            "Presentation Fit",
            "The alignment of the report's language, structure and style with the user's comprehension "
            "and preferences.",
            "language, register, structure, format and medium that suit how this user reads and "
            "understands; stay clear of content choice",
        ),
        Dimension(
            "ACTI",
            "actionability_practicality",
            "Actionability & Practicality",
            "The extent to which the report offers practical value for the user's decisions or actions.",
            "whether recommendations are feasible and useful for this user's decisions given their "
            "constraints (time, budget, situation); stay clear of presentation",
        ),
        Dimension(
            "DEIN",
            "depth_insight",
            "Depth & Insight",
            "The analytical richness, originality of thought and critical perspective of the report.",
            "analytical depth, rigour of reasoning, originality of insights and value of conclusions where "
            "the task calls for them; not structure (logical coherence) or language (clarity)",
        ),
        Dimension(
            "LOGC",
            "logical_coherence",
            "Logical Coherence",
            "The logic and coherence of the report's reasoning: ideas are rigorous and easy to follow.",
            "whether the reasoning framework is rigorous and each step follows; not depth or wording",
        ),
        Dimension(
            "CLAR",
            "clarity_readability",
            "Clarity & Readability",
            "The report's language, information presentation and formatting.",
            "clear language, well-presented information and formatting that readers absorb easily; not depth or logic",
        ),
    )
}
AXIS_DIMENSIONS = {"P": PERSONALIZATION_DIMENSIONS, "Q": QUALITY_DIMENSIONS}
AXIS_NAMES = {"P": "Personalization Alignment", "Q": "Content Quality"}


class PQRJudgeConfig(JudgeConfig):
    name: Literal["pqr"] = "pqr"
    axes: list[Axis] = Field(default=["P", "Q", "R"], min_length=1, description="The axes to judge.")
    reuse_criteria: bool = Field(
        default=True,
        description="Generate P and Q criteria once per (task, persona, judge model) and reuse them "
        "(false: regenerate for every report, for comparison only).",
    )
    quality_criteria: Literal["auto", "generated", "shipped"] = Field(
        default="auto",
        description="Q criteria: the case's shipped ones (DeepResearch Bench) when it has them "
        "('auto'), always generated, or shipped only.",
    )
    max_criteria: int = Field(default=8, ge=1, le=20, description="At most this many criteria per dimension.")
    no_citation: Literal["zero", "exclude"] = Field(
        default="zero", description="A report citing no claim: FA = 0 ('zero') or R undefined ('exclude')."
    )
    dedupe: Literal["exact", "llm"] = Field(
        default="llm", description="Claim deduplication: exact (claim, source) pairs only, or also a model pass."
    )
    max_source_chars: int = Field(default=12000, ge=500, description="Source text shown to the support check.")
    unreadable: Literal["unsupported", "exclude"] = Field(
        default="unsupported",
        description="Claims whose cited source could not be read: unsupported (v_i = 0, "
        "the paper's Eq. 4 for unknown) or left out of FA's denominator ('exclude'; FA is undefined when no cited "
        "source could be read). Either way the report counts them (source_unreadable).",
    )

    @field_validator("axes")
    @classmethod
    def _unique(cls, axes: list[str]) -> list[str]:
        if len(set(axes)) != len(axes):
            raise ValueError(f"axes must not repeat: {axes}")
        return [a for a in ("P", "Q", "R") if a in axes]


# --------------------------------------------------------------------------- stage 1: dimension weights


class _Criterion(BaseModel):
    criterion: str = Field(min_length=1, description="The criterion, as a question or requirement.")
    explanation: str = Field(description="Why this criterion matters for this task (and user).")
    # no upper bound: a model that answers 30 for 30% (a small one does) is normalised like one that answers 0.3
    weight: float = Field(ge=0, description="Its weight within the dimension; the weights sum to 1.0.")


class DimensionWeights(BaseModel):
    """What the judge reads of `_weights_model`'s answers."""

    analysis: str
    weights: BaseModel  # one float field per dimension of the axis


def _weights_model(axis: str) -> type[DimensionWeights]:
    fields: dict[str, Any] = {
        code: (float, Field(ge=0, description=f"Weight of {DIMENSIONS[code].title}."))  # normalised like criteria
        for code in AXIS_DIMENSIONS[axis]
    }
    weights = create_model(f"{axis}Weights", **fields)
    return create_model(
        f"{axis}DimensionWeights",
        __base__=DimensionWeights,
        analysis=(str, Field(description="Why each dimension gets its weight, tied to the task (and persona).")),
        weights=(weights, Field(description="One weight per dimension; they sum to 1.0.")),
    )


def _dimension_list(axis: str) -> str:
    return "\n".join(
        f"{i}. {DIMENSIONS[c].title} ({c}): {DIMENSIONS[c].definition}"
        for i, c in enumerate(AXIS_DIMENSIONS[axis], start=1)
    )


def weight_messages(axis: str, task: str, persona: str) -> list[dict[str, str]]:
    who = " and the person who asked for it" if axis == "P" else ""
    role = (
        "You are an experienced evaluator of research reports. You understand the goals, difficulties and real "
        f"value of a research task{who}, and you set well-reasoned, task-specific weights for the dimensions "
        "a report will be judged on."
    )
    sections = [Section("The research task", task, untrusted=True)]
    if axis == "P":
        sections.append(Section("The user persona", persona, untrusted=True))
    formula = " + ".join(f"{DIMENSIONS[c].title} x its weight" for c in AXIS_DIMENSIONS[axis])
    subject = "task and persona" if axis == "P" else "task"
    task_text = (
        f"A research team will write a {'personalized ' if axis == 'P' else ''}report for this {subject}. Set the "
        f"weights of the {AXIS_NAMES[axis].lower()} dimensions the report will be judged on:\n"
        f"{_dimension_list(axis)}\n\nTotal score = {formula}; the weights must sum to exactly 1.0.\n"
        f"Study the {subject} closely (explicit goals, hidden objectives, difficulties"
        f"{', and the user' + chr(39) + 's needs, background and preferences' if axis == 'P' else ''}). Different "
        f"tasks{' and users' if axis == 'P' else ''} stress different dimensions: weights follow from this "
        f"{subject}, not from a template. First write your analysis, explaining each weight with reference to the "
        f"{subject}; then give the weights as decimals between 0 and 1."
    )
    return build_messages(role, sections, task_text)


# --------------------------------------------------------------------------- stage 2: sub-criteria


class DimensionCriteria(BaseModel):
    """What the judge reads of `criteria_model`'s answers."""

    analysis: str
    criteria: list[_Criterion]


def criteria_model(max_criteria: int) -> type[DimensionCriteria]:
    return create_model(
        "DimensionCriteria",
        __base__=DimensionCriteria,
        analysis=(str, Field(description="How the criteria and their weights follow from the task (and persona).")),
        criteria=(list[_Criterion], Field(min_length=1, max_length=max_criteria)),
    )


def criteria_messages(axis: str, code: str, task: str, persona: str, max_criteria: int) -> list[dict[str, str]]:
    dim = DIMENSIONS[code]
    role = (
        "You are an experienced evaluator of research reports. You break an abstract evaluation dimension down "
        "into concrete, clearly worded criteria tailored to the research task"
        f"{' and the user persona' if axis == 'P' else ''}, and you weight each criterion with a reason."
    )
    sections = [
        Section("The dimension", f"{dim.title} ({code}): {dim.definition}"),
        Section("The research task", task, untrusted=True),
    ]
    if axis == "P":
        sections.append(Section("The user persona", persona, untrusted=True))
    whom = "this particular user in this particular task" if axis == "P" else "this particular task"
    task_text = (
        f"Write the evaluation criteria for the {dim.title} dimension of a report written for {whom}.\n"
        f"1. Analyse the {'persona (background, knowledge, habits, expectations) and the ' if axis == 'P' else ''}"
        f"task to find what {dim.title.lower()} means here: {dim.focus}.\n"
        f"2. Propose at most {max_criteria} specific criteria; avoid generic, templated ones.\n"
        "3. Explain briefly why each criterion matters here.\n"
        "4. Weight each criterion; the weights sum to exactly 1.0, and the criteria that decide success for "
        f"{whom} weigh most.\nKeep strictly to {dim.title}. Write the analysis first, then the criteria."
    )
    return build_messages(role, sections, task_text)


async def generate_criteria(env: JudgeEnv, axis: str, task: str, persona: str, max_criteria: int) -> dict[str, Any]:
    """Stages 1 and 2 for one axis: normalised dimension weights and, per dimension, weighted criteria."""
    gateway = env.gateway
    weights_call = gateway.structured(ROLE_CRITERIA, weight_messages(axis, task, persona), _weights_model(axis))
    model = criteria_model(max_criteria)
    criteria_calls = [
        gateway.structured(ROLE_CRITERIA, criteria_messages(axis, code, task, persona, max_criteria), model)
        for code in AXIS_DIMENSIONS[axis]
    ]
    weights, per_dimension = await asyncio.gather(weights_call, asyncio.gather(*criteria_calls))
    given = weights.weights.model_dump()
    dimensions = {}
    for code, generated in zip(AXIS_DIMENSIONS[axis], per_dimension):
        raw = {str(i): c.weight for i, c in enumerate(generated.criteria)}
        normalized = _normalize(raw, f"{code} criterion weights")
        dimensions[code] = {
            "analysis": generated.analysis,
            "criteria": [
                {
                    "id": f"{code}-{i + 1}",
                    "criterion": c.criterion,
                    "explanation": c.explanation,
                    "weight": normalized[str(i)],
                    "weight_given": c.weight,
                }
                for i, c in enumerate(generated.criteria)
            ],
        }
    return {
        "axis": axis,
        "source": "generated",
        "analysis": weights.analysis,
        "weights": _normalize(given, f"{axis} dimension weights"),
        "weights_given": given,
        "dimensions": dimensions,
    }


def shipped_quality_criteria(case: Case) -> dict[str, Any]:
    """A case's DeepResearch Bench criteria in the same shape as generated ones (weights normalised)."""
    gold = case.gold
    codes = list(dict.fromkeys(c.dimension for c in gold.criteria))
    weights = _normalize({code: gold.dimension_weights.get(code, 0.0) for code in codes}, "shipped dimension weights")
    dimensions = {}
    for code in codes:
        mine = [c for c in gold.criteria if c.dimension == code]
        normalized = _normalize({str(i): c.weight for i, c in enumerate(mine)}, f"shipped {code} criterion weights")
        dimensions[code] = {
            "analysis": "",
            "criteria": [
                {
                    "id": f"{code}-{i + 1}",
                    "criterion": c.criterion,
                    "explanation": c.explanation,
                    "weight": normalized[str(i)],
                    "weight_given": c.weight,
                }
                for i, c in enumerate(mine)
            ],
        }
    return {
        "axis": "Q",
        "source": "shipped",
        "analysis": "",
        "weights": weights,
        "weights_given": dict(gold.dimension_weights),
        "dimensions": dimensions,
    }


def _normalize(weights: dict[str, float], what: str) -> dict[str, float]:
    try:
        return normalize_weights(weights, what)
    except ValueError as exc:
        raise JudgeFailed(str(exc)) from None


# --------------------------------------------------------------------------- stage 3: scoring


class CriterionScore(BaseModel):
    analysis: str = Field(description="How the report meets the criterion: strengths and weaknesses.")
    score: int | None = Field(
        ge=0, le=10, description="Integer 0-10; null only if the report gives nothing to judge it on."
    )


def _criterion_verdicts(criteria: dict[str, Any], scored: BaseModel) -> list[tuple[str, CriterionScore]]:
    """(criterion id as the scorer is shown it, e.g. GOAL_2; its verdict) for every criterion of the axis."""
    return [
        (key, getattr(getattr(scored, _field_name(code)), key))
        for code, dimension in criteria["dimensions"].items()
        for key in (c["id"].replace("-", "_") for c in dimension["criteria"])
    ]


def unscored_criteria(criteria: dict[str, Any], scored: BaseModel) -> list[str]:
    return [cid for cid, verdict in _criterion_verdicts(criteria, scored) if verdict.score is None]


def blank_analyses(criteria: dict[str, Any], scored: BaseModel) -> list[str]:
    """A scored criterion whose analysis is empty or punctuation only: a score resting on nothing."""
    return [
        f"the analysis of {cid} is empty or punctuation only ({quoted(verdict.analysis)})"
        for cid, verdict in _criterion_verdicts(criteria, scored)
        if verdict.score is not None and blank(verdict.analysis)
    ]


def scoring_problems(criteria: dict[str, Any], scored: BaseModel) -> list[str]:
    problems = blank_analyses(criteria, scored)
    unscored = unscored_criteria(criteria, scored)
    if unscored:
        problems.append(f"criteria {', '.join(unscored)} were left without a score (give each an integer 0-10)")
    return problems


def _field_name(code: str) -> str:
    return DIMENSIONS[code].field if code in DIMENSIONS else "".join(ch if ch.isalnum() else "_" for ch in code.lower())


def scores_model(criteria: dict[str, Any]) -> type[BaseModel]:
    """One block per dimension, one entry per criterion id: the model cannot skip or add a criterion."""
    blocks: dict[str, Any] = {}
    for code, dimension in criteria["dimensions"].items():
        ids = [c["id"].replace("-", "_") for c in dimension["criteria"]]
        blocks[_field_name(code)] = (
            per_item_model(f"Scores_{_field_name(code)}", CriterionScore, ids, "criterion"),
            ...,
        )
    return create_model(f"{criteria['axis']}Scores", **blocks)


def criteria_text(criteria: dict[str, Any]) -> str:
    lines = []
    for code, dimension in criteria["dimensions"].items():
        title = DIMENSIONS[code].title if code in DIMENSIONS else code
        lines.append(f"## {title} (`{_field_name(code)}`)")
        lines += [
            f"- {c['id'].replace('-', '_')}: {c['criterion']}" + (f" — {c['explanation']}" if c["explanation"] else "")
            for c in dimension["criteria"]
        ]
    return "\n".join(lines)


def scoring_messages(
    axis: str, criteria: dict[str, Any], task: str, persona: str, response: SystemResponse
) -> list[dict[str, str]]:
    kind = "personalized research reports" if axis == "P" else "the quality of research reports"
    role = (
        f"You are a strict, meticulous and objective expert in evaluating {kind}. You judge a report against "
        "given criteria and give precise scores with clear justifications."
    )
    sections = [Section("The research task", task, untrusted=True)]
    if axis == "P":
        sections.append(Section("The user persona", persona, untrusted=True))
    sections += [
        response_section(response, "The report to evaluate"),
        Section("Evaluation criteria", criteria_text(criteria)),
    ]
    combine = "the report, the task and the persona" if axis == "P" else "the report and the criterion's explanation"
    task_text = (
        f"Evaluate the report's {AXIS_NAMES[axis].lower()} against every criterion above. For each criterion, "
        f"analyse how the report meets it, combining {combine} and naming strengths and weaknesses; then score "
        "it with an integer from 0 to 10: 0-2 very poor (almost completely fails), 2-4 poor (partly meets it, "
        "with significant shortcomings), 4-6 average, 6-8 good (mostly meets it, with notable strengths), "
        "8-10 excellent (fully or exceptionally meets it). Give every criterion, under its dimension and id, "
        "and nothing else."
    )
    return build_messages(role, sections, task_text)


def judged_dimensions(
    criteria: dict[str, Any], scored: BaseModel
) -> tuple[dict[str, DimensionJudgement], dict[str, Any]]:
    """The scorer's output joined with the criteria: metric inputs, and the full record for details."""
    judgements: dict[str, DimensionJudgement] = {}
    record: dict[str, Any] = {}
    for code, dimension in criteria["dimensions"].items():
        block = getattr(scored, _field_name(code))
        rows = []
        for c in dimension["criteria"]:
            verdict = getattr(block, c["id"].replace("-", "_"))
            rows.append({**c, "score": verdict.score, "analysis": verdict.analysis})
        try:
            judgements[code] = DimensionJudgement(
                weight=criteria["weights"][code],
                criteria=[{"criterion": r["criterion"], "weight": r["weight"], "score": r["score"]} for r in rows],
            )
        except ValidationError as exc:
            raise JudgeFailed(f"{code}: {exc.errors()[0]['msg']}") from None
        record[code] = {"weight": criteria["weights"][code], "score": judgements[code].score, "criteria": rows}
    return judgements, record


# --------------------------------------------------------------------------- the judge


@register_judge
class PQRJudge(Judge):
    name = "pqr"
    config_model = PQRJudgeConfig
    roles = (ROLE_SCORER, ROLE_CRITERIA, ROLE_FACTS)
    scale = "0-10"
    preparation = "criteria generation"
    config: PQRJudgeConfig

    @property
    def uses_web(self) -> bool:
        return "R" in self.config.axes  # the support check reads each cited source

    def requirements(self) -> list[Requirement]:
        needs = [has("a task (query text)", lambda case: case.query.text.strip())]
        if "P" in self.config.axes:
            needs.append(
                has(
                    "a structured persona (case.persona), needed by axis P",
                    lambda case: case.persona and case.persona.attributes,
                )
            )
        if "Q" in self.config.axes and self.config.quality_criteria == "shipped":
            needs.append(
                has(
                    "shipped criteria (gold.criteria), needed by quality_criteria='shipped'",
                    lambda case: case.gold.criteria,
                )
            )
        return needs

    async def criteria(self, case: Case, axis: str, env: JudgeEnv) -> tuple[dict[str, Any], str | None]:
        """The criteria of one axis for this case, generated once per (task, persona, model) and reused."""
        if axis == "Q" and self.config.quality_criteria != "generated" and case.gold.criteria:
            return shipped_quality_criteria(case), None
        task, persona = case.query.text, persona_text(case) if axis == "P" else ""

        async def create() -> dict[str, Any]:
            return await generate_criteria(env, axis, task, persona, self.config.max_criteria)

        identity = {
            "version": PROMPT_VERSION,
            "axis": axis,
            "task": task,
            "language": case.query.language,
            "persona": case.persona.attributes if axis == "P" and case.persona else None,
            "max_criteria": self.config.max_criteria,
            "model": env.model_identity(ROLE_CRITERIA),
        }
        return await env.generated_once(f"pqr_criteria_{axis}", identity, create, self.config.reuse_criteria)

    async def prepare(self, case: Case, env: JudgeEnv) -> dict[str, tuple[dict[str, Any], str | None]]:
        """The criteria of the judged axes: fixed for the pair, shared by every repeat and system."""
        axes = [a for a in self.config.axes if a in ("P", "Q")]
        return dict(zip(axes, await asyncio.gather(*(self.criteria(case, axis, env) for axis in axes))))

    async def judge_once(
        self,
        case: Case,
        response: SystemResponse,
        env: JudgeEnv,
        prepared: dict[str, tuple[dict[str, Any], str | None]] | None = None,
    ) -> JudgeResult:
        return await self.score(
            case, response, prepared if prepared is not None else await self.prepare(case, env), env
        )

    async def score_axis(
        self, axis: str, criteria: dict[str, Any], case: Case, response: SystemResponse, env: JudgeEnv
    ) -> tuple[BaseModel, list[Degradation]]:
        """The scorer's output for one axis, past the gate: asked again once when it left a criterion
        blank or an analysis degenerate."""
        gated: Gated[BaseModel] = await ask_again_once(
            env.gateway,
            ROLE_SCORER,
            scoring_messages(axis, criteria, case.query.text, persona_text(case), response),
            scores_model(criteria),
            lambda output: scoring_problems(criteria, output),
            self.step,
        )
        blank_left = blank_analyses(criteria, gated.output)
        if blank_left:
            raise gated.failure(f"{axis} scores", blank_left)
        degraded = list(gated.degraded)
        unscored = unscored_criteria(criteria, gated.output)
        total = sum(len(d["criteria"]) for d in criteria["dimensions"].values())
        if len(unscored) == total:
            raise JudgeFailed(f"{gated.source}: no criterion of {axis} was scored, even when asked again")
        if unscored:
            degraded.append(
                degradation(
                    "criterion_unscored",
                    self.step,
                    f"{axis}: {', '.join(unscored)} left without "
                    "a score when asked again; left out of their dimension's weighted mean",
                    count=len(unscored),
                )
            )
        return gated.output, degraded

    async def score(
        self,
        case: Case,
        response: SystemResponse,
        criteria: dict[str, tuple[dict[str, Any], str | None]],
        env: JudgeEnv,
    ) -> JudgeResult:
        calls = {axis: self.score_axis(axis, found, case, response, env) for axis, (found, _) in criteria.items()}
        reliability_call = (
            judge_reliability(
                response,
                env,
                ReliabilitySettings(
                    role=ROLE_FACTS,
                    no_citation=self.config.no_citation,
                    dedupe=self.config.dedupe,
                    max_source_chars=self.config.max_source_chars,
                    unreadable=self.config.unreadable,
                    step=self.step,
                ),
            )
            if "R" in self.config.axes
            else None
        )
        axis_calls = asyncio.gather(*calls.values())
        if reliability_call is None:
            axis_outputs, reliability_output = await axis_calls, None
        else:
            axis_outputs, reliability_output = await asyncio.gather(axis_calls, reliability_call)
        scored = dict(zip(calls, axis_outputs))
        details: dict[str, Any] = {}
        flat: dict[str, float | None] = {}
        flags: list[str] = []
        degraded: list[Degradation] = []
        axis_scores: dict[str, float | None] = {}
        for axis, (output, axis_degraded) in scored.items():
            degraded += axis_degraded
            found, key = criteria[axis]
            judgements, record = judged_dimensions(found, output)
            axis_result: AxisScore = (
                personalization_score(judgements)
                if axis == "P"
                else quality_score(judgements, shipped=found["source"] == "shipped")
            )
            axis_scores[axis] = axis_result.score
            flat[axis] = axis_result.score
            flat.update(axis_result.dimensions)
            if axis_result.skipped_criteria:
                flags.append("skipped_criteria")
            details[axis] = {
                "score": axis_result.score,
                "coverage": axis_result.coverage,
                "skipped_criteria": axis_result.skipped_criteria,
                "unscored_dimensions": axis_result.unscored_dimensions,
                "criteria_source": found["source"],
                "criteria_key": key,
                "weights": found["weights"],
                "weights_given": found["weights_given"],
                "weights_analysis": found["analysis"],
                "dimensions": record,
            }
        if reliability_output is not None:
            reliability, record, reliability_degraded = reliability_output
            degraded += reliability_degraded
            axis_scores["R"] = reliability.score
            flat.update(
                {"R": reliability.score, "FA": reliability.factual_accuracy, "CC": reliability.citation_coverage}
            )
            details["R"] = {**reliability.model_dump(), **record}
            if reliability.no_cited_claims:
                flags.append("no_cited_claims")
            if record.get("source_text_mismatches"):
                flags.append("source_text_mismatch")
            if record.get("unreadable_sources"):
                flags.append("unreadable_sources")
        if set(self.config.axes) == {"P", "Q", "R"}:
            headline = overall_score(axis_scores["P"], axis_scores["Q"], axis_scores["R"])
            details["score_is"] = "overall = (P + Q + R) / 3"
        else:
            judged = [axis_scores[a] for a in self.config.axes]
            known = [s for s in judged if s is not None]
            headline = None if len(known) < len(judged) else sum(known) / len(known)
            details["score_is"] = f"mean of {', '.join(self.config.axes)} (not the overall PQR score)"
        flat["overall"] = headline if set(self.config.axes) == {"P", "Q", "R"} else None
        return self.result(headline, criteria=flat, details=details, flags=flags, degraded=degraded)

    def aggregate(self, results: list[JudgeResult]) -> dict[str, Any]:
        """Criterion means (the paper's table columns), plus FACT's pooled FA and CC over every triplet of
        every report, and how many reports cited no claim."""
        figures = super().aggregate(results)
        # a field added since (n_unreadable, fa_denominator) takes its default in older results
        reliability = [
            FactualReliability.model_validate({k: d["R"][k] for k in FactualReliability.model_fields if k in d["R"]})
            for d in each_details(results)
            if "R" in d
        ]
        if reliability:
            figures["reliability"] = pooled_reliability(reliability).model_dump()
        return figures
