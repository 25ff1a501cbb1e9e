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

The share recovered is reported per user (and pooled over users by the caller).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, computed_field, create_model

from agents.gateway import Gateway
from agents.prompts import Section, build_messages
from agents.tasks import gather_or_cancel
from agents.user_sim.persona import Trait, persona_traits
from benchmarks.case import HistoryEvent

Verdict = Literal["recovered", "partial", "missed", "contradicted"]
VERDICTS: tuple[str, ...] = ("recovered", "partial", "missed", "contradicted")

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


class ReversibilityReport(BaseModel):
    traits: int
    counts: dict[str, int] = Field(description="Facets per verdict.")
    per_trait: dict[str, Verdict]
    preference_tags: int
    preference_recovered: int

    @computed_field  # type: ignore[prop-decorator]
    @property
    def recovered_share(self) -> float:
        """Facets recovered over all facets (partial ones do not count)."""
        return round(self.counts.get("recovered", 0) / self.traits, 4) if self.traits else 0.0


def render_items(events: list[HistoryEvent]) -> str:
    return "\n".join(f"[{e.id}]{f' ({e.timestamp})' if e.timestamp else ''} {e.kind.replace('_', ' ')}: {e.render()}"
                     for e in events)


async def infer_traits(
    gateway: Gateway, role: str, traits: list[Trait], events: list[HistoryEvent], chunk_items: int = 40,
) -> dict[str, list[str]]:
    """Per facet path, what the inverse pass read off the history (one entry per chunk that said something)."""
    paths = tuple(t.path for t in traits)
    inferred_model = create_model(
        "InferredFacet",
        facet=(Literal[paths], Field(description="The facet's name, as listed.")),  # type: ignore[valid-type]
        inferred=(str, Field(description="What the items reveal for this facet.")),
        evidence=(list[str], Field(default_factory=list, description="Ids of the items it rests on.")),
    )
    schema = create_model("InferredProfile", facets=(list[inferred_model], ...))  # type: ignore[valid-type]
    chunks = [events[i : i + chunk_items] for i in range(0, len(events), chunk_items)]

    async def read(chunk: list[HistoryEvent]):
        sections = [Section("Profile facets", "\n".join(paths)),
                    Section("Personal data", render_items(chunk), untrusted=True)]
        return await gateway.structured(role, build_messages(INVERSE_ROLE, sections, INVERSE_TASK), schema)

    out: dict[str, list[str]] = {}
    for answer in await gather_or_cancel(read(c) for c in chunks):
        for facet in answer.facets:
            if facet.inferred.strip():
                out.setdefault(facet.facet, []).append(facet.inferred.strip())
    return out


async def compare_traits(
    gateway: Gateway, role: str, traits: list[Trait], inferred: dict[str, list[str]], batch_traits: int = 12,
) -> dict[str, Verdict]:
    verdicts: dict[str, Verdict] = {t.path: "missed" for t in traits if t.path not in inferred}
    judged = [t for t in traits if t.path in inferred]
    batches = [judged[i : i + batch_traits] for i in range(0, len(judged), batch_traits)]

    async def compare(batch: list[Trait]) -> dict[str, Verdict]:
        body = "\n\n".join(
            f"{n}. {t.path}\n   true value: {t.value}\n   inferred from the data: {' / '.join(inferred[t.path])}"
            for n, t in enumerate(batch, start=1)
        )
        answer = await gateway.structured(
            role, build_messages(COMPARE_ROLE, [Section("Facets", body, untrusted=True)], COMPARE_TASK), Verdicts
        )
        given = {v.facet: v.verdict for v in reversed(answer.verdicts)}  # the first verdict per facet wins
        return {t.path: given.get(n, "missed") for n, t in enumerate(batch, start=1)}

    for result in await gather_or_cancel(compare(b) for b in batches):
        verdicts.update(result)
    return {t.path: verdicts[t.path] for t in traits}


async def check_reversibility(
    gateway: Gateway, attributes: dict[str, Any], events: list[HistoryEvent], role: str = "history_checker",
    chunk_items: int = 40, batch_traits: int = 12,
) -> ReversibilityReport:
    traits = persona_traits(attributes)
    inferred = await infer_traits(gateway, role, traits, events, chunk_items) if events else {}
    per_trait = await compare_traits(gateway, role, traits, inferred, batch_traits)
    preferences = [t.path for t in traits if t.is_preference]
    return ReversibilityReport(
        traits=len(traits),
        counts={v: sum(1 for x in per_trait.values() if x == v) for v in VERDICTS},
        per_trait=per_trait,
        preference_tags=len(preferences),
        preference_recovered=sum(1 for p in preferences if per_trait[p] == "recovered"),
    )
