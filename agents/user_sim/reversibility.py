"""The reversibility check (PDR-Bench appendix H's "most critical quality standard"): can the
persona's traits be inferred back from the history alone?

Two passes, both role `history_checker` (so a different model from the writer can check it):

1. **Inverse pass** — the model sees only the history (no persona, no trait links) and the
   persona's facet *names*, and writes what the history says about each facet, citing items. Long
   histories are read in chunks of `chunk_items`, concurrently; a facet's inferences are pooled.
2. **Comparison** — for each facet, the true value against what was inferred: `recovered`,
   `partial`, `missed` or `contradicted` (the history implies something the persona rules out — the
   protocol's "noise must not contradict" check). A facet nothing was inferred for is `missed`
   without a call; batches of `batch_traits` facets per call.

The share recovered is reported per user (and pooled over users by the caller), with the items the
inverse pass cited per facet (`evidence`: the protocol figures count items per tag by it). A
history passes (`reversibility_problems`) when at least `min_recovered` of its facets are
recovered and none is contradicted. Answers are bounded in the schema (facets, evidence ids,
inferred text) and an answer cut at max_tokens is asked again with a bigger budget
(`history.ask_within_budget`), as the writer's are.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field, computed_field, create_model

from atelier.agents.models.budgeted import at_most
from atelier.agents.models.gateway import Gateway
from atelier.agents.prompts import Section, build_messages
from atelier.agents.user_sim.history import ask_within_budget
from atelier.agents.user_sim.persona import Trait, persona_traits
from atelier.benchmarks.case import HistoryEvent
from atelier.benchmarks.common.tasks import gather_or_cancel

Verdict = Literal["recovered", "partial", "missed", "contradicted"]
VERDICTS: tuple[str, ...] = ("recovered", "partial", "missed", "contradicted")
# The gate's default: most of the persona must come back from the history alone. Appendix H asks that
# the data reveal "key persona traits, such as their profession, interests, and personality"; a
# persona has ~50 facets, most reflected by a single item, and an inverse pass reading in chunks misses
# some, so all of them would be a bar no history meets — half is the least that still says "this
# history is about this person".
DEFAULT_MIN_RECOVERED = 0.5
INFERRED_CHARS = 300
MAX_EVIDENCE = 10

INVERSE_ROLE = (
    "You reconstruct a person's profile from their personal data: notes, conversations with assistants and "
    "web searches. You state only what the data supports."
)
INVERSE_TASK = (
    "For each facet of the profile listed above that these items give evidence about, write what the items "
    "reveal about this person for that facet (one or two concrete sentences) and the ids (the [id] before each "
    "item) of the items it rests on. Leave out facets the items say nothing about; do not guess."
)
COMPARE_ROLE = (
    "You check whether a person's profile can be recovered from their personal data. You compare each true "
    "profile facet with what was inferred from the data alone, strictly and fairly."
)
COMPARE_TASK = (
    "For each numbered facet, give a verdict:\n"
    "- recovered: the inferred text captures the facet's key content;\n"
    "- partial: it captures some of it, or only vaguely;\n"
    "- missed: nothing inferred captures it;\n"
    "- contradicted: the inferred text states something the true value rules out."
)


class TraitVerdict(BaseModel):
    facet: int = Field(description="The facet's number.")
    verdict: Verdict


class Verdicts(BaseModel):
    verdicts: list[TraitVerdict]


@functools.cache
def _verdicts_model(facets: int) -> type[Verdicts]:
    """Verdicts for a batch of `facets`, the bound in the schema (a grammar-held model stops there)."""
    return create_model("Verdicts", __base__=Verdicts, verdicts=at_most(TraitVerdict, facets))


class ReversibilityReport(BaseModel):
    traits: int
    counts: dict[str, int] = Field(description="Facets per verdict.")
    per_trait: dict[str, Verdict]
    preference_tags: int
    preference_recovered: int
    evidence: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Per facet, the ids of the history items the inverse pass cited for it "
        "(ids that are not in the history are left out).",
    )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def recovered_share(self) -> float:
        """Facets recovered over all facets (partial ones do not count)."""
        return round(self.counts.get("recovered", 0) / self.traits, 4) if self.traits else 0.0

    @property
    def contradicted(self) -> list[str]:
        return [path for path, verdict in self.per_trait.items() if verdict == "contradicted"]


def reversibility_problems(report: ReversibilityReport, min_recovered: float = DEFAULT_MIN_RECOVERED) -> list[str]:
    """Why a history fails the reversibility gate (nothing when it passes): fewer than
    `min_recovered` of the facets recovered; any facet contradicted (appendix H: noise must not
    contradict the persona)."""
    problems = []
    if report.recovered_share < min_recovered:
        problems.append(
            f"reversibility: {report.recovered_share:.1%} of {report.traits} facets recovered, below the "
            f"minimum {min_recovered:.0%}"
        )
    if report.contradicted:
        problems.append(
            f"reversibility: {len(report.contradicted)} contradicted facet(s): " + "; ".join(report.contradicted)
        )
    return problems


def render_items(events: Sequence[HistoryEvent]) -> str:
    return "\n".join(
        f"[{e.id}]{f' ({e.timestamp})' if e.timestamp else ''} {e.kind.replace('_', ' ')}: {e.render()}" for e in events
    )


class Inferred(BaseModel):
    """What the inverse pass read off a history: per facet path, its statements (one per chunk that
    said something) and the ids of the items it cited."""

    statements: dict[str, list[str]] = Field(default_factory=dict)
    evidence: dict[str, list[str]] = Field(default_factory=dict)


async def infer_traits(
    gateway: Gateway,
    role: str,
    traits: list[Trait],
    events: Sequence[HistoryEvent],
    chunk_items: int = 40,
    max_tokens_ceiling: int | None = None,
) -> Inferred:
    paths = tuple(t.path for t in traits)
    path: Any = Literal[paths]  # built at runtime: no static type
    inferred_model = create_model(
        "InferredFacet",
        facet=(path, Field(description="The facet's name, as listed.")),
        inferred=(
            str,
            Field(description="What the items reveal for this facet.", json_schema_extra={"maxLength": INFERRED_CHARS}),
        ),
        evidence=at_most(str, MAX_EVIDENCE, description="Ids of the items it rests on."),
    )
    schema = create_model("InferredProfile", facets=at_most(inferred_model, len(paths)))
    chunks = [events[i : i + chunk_items] for i in range(0, len(events), chunk_items)]
    known = {e.id for e in events}

    async def read(chunk: Sequence[HistoryEvent]):
        sections = [
            Section("Profile facets", "\n".join(paths)),
            Section("Personal data", render_items(chunk), untrusted=True),
        ]
        answer, _ = await ask_within_budget(
            gateway, role, build_messages(INVERSE_ROLE, sections, INVERSE_TASK), schema, ceiling=max_tokens_ceiling
        )
        return answer

    out = Inferred()
    for answer in await gather_or_cancel(read(c) for c in chunks):
        for facet in answer.facets:
            if facet.inferred.strip():
                out.statements.setdefault(facet.facet, []).append(facet.inferred.strip())
            cited = [i.strip().strip("[]") for i in facet.evidence]
            if any(i in known for i in cited):
                found = out.evidence.setdefault(facet.facet, [])
                found += [i for i in cited if i in known and i not in found]
    return out


async def compare_traits(
    gateway: Gateway,
    role: str,
    traits: list[Trait],
    inferred: dict[str, list[str]],
    batch_traits: int = 12,
    max_tokens_ceiling: int | None = None,
) -> dict[str, Verdict]:
    verdicts: dict[str, Verdict] = {t.path: "missed" for t in traits if t.path not in inferred}
    judged = [t for t in traits if t.path in inferred]
    batches = [judged[i : i + batch_traits] for i in range(0, len(judged), batch_traits)]

    async def compare(batch: list[Trait]) -> dict[str, Verdict]:
        body = "\n\n".join(
            f"{n}. {t.path}\n   true value: {t.value}\n   inferred from the data: {' / '.join(inferred[t.path])}"
            for n, t in enumerate(batch, start=1)
        )
        answer, _ = await ask_within_budget(
            gateway,
            role,
            build_messages(COMPARE_ROLE, [Section("Facets", body, untrusted=True)], COMPARE_TASK),
            _verdicts_model(len(batch)),
            ceiling=max_tokens_ceiling,
        )
        given = {v.facet: v.verdict for v in reversed(answer.verdicts)}  # the first verdict per facet wins
        return {t.path: given.get(n, "missed") for n, t in enumerate(batch, start=1)}

    for result in await gather_or_cancel(compare(b) for b in batches):
        verdicts.update(result)
    return {t.path: verdicts[t.path] for t in traits}


async def check_reversibility(
    gateway: Gateway,
    attributes: dict[str, Any],
    events: Sequence[HistoryEvent],
    role: str = "history_checker",
    chunk_items: int = 40,
    batch_traits: int = 12,
    max_tokens_ceiling: int | None = None,
) -> ReversibilityReport:
    traits = persona_traits(attributes)
    inferred = (
        await infer_traits(gateway, role, traits, events, chunk_items, max_tokens_ceiling) if events else Inferred()
    )
    per_trait = await compare_traits(gateway, role, traits, inferred.statements, batch_traits, max_tokens_ceiling)
    preferences = [t.path for t in traits if t.is_preference]
    return ReversibilityReport(
        traits=len(traits),
        counts={v: sum(1 for x in per_trait.values() if x == v) for v in VERDICTS},
        per_trait=per_trait,
        preference_tags=len(preferences),
        preference_recovered=sum(1 for p in preferences if per_trait[p] == "recovered"),
        evidence=inferred.evidence,
    )
