"""deep_research's state: small values and references only (page texts live in the source store).

The top graph's state is `DeepResearchState`; each parallel researcher is a subgraph that takes a
`ResearchTask` (its own input schema, sent with `Send`) and returns its `Findings` (its output
schema), which the top graph collects round by round.
"""

from __future__ import annotations

import operator
from typing import Annotated, Literal

from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from agents.citations import SourceRef
from agents.planner import ResearchBrief
from benchmarks.common.degradation import Degradation
from graphs.inputs import PipelineInput, PipelineOutput
from graphs.sources import WebHit


class Clarification(BaseModel):
    """What happened at the clarify step (recorded in `response.meta["clarify"]`)."""

    status: Literal["answered", "not_needed", "skipped", "off", "failed"]
    reason: str = ""
    questions: list[str] = Field(default_factory=list)
    answers: list[str] = Field(default_factory=list)

    def pairs(self) -> list[tuple[str, str]]:
        return list(zip(self.questions, self.answers))


class Note(BaseModel):
    source_id: str
    text: str


class Findings(BaseModel):
    """What one researcher found for one sub-topic in one round."""

    index: int
    round: int
    topic: str
    sources: list[SourceRef] = Field(default_factory=list, description="Every source it read.")
    notes: list[Note] = Field(default_factory=list, description="Each tied to the source it was taken from.")
    searches: int = 0
    fetches: int = 0
    steps: int = 0
    covered: bool = False
    critical_path_calls: int = Field(default=0, description="Its longest chain of dependent LLM calls.")
    degraded: list[Degradation] = Field(default_factory=list)


class ResearchTask(TypedDict):
    """A researcher's input: one sub-topic, its queries and what not to read again. (Its keys
    differ from the top graph's but for `findings`, the one value a researcher hands back.)"""

    index: int
    research_round: int
    topic: str
    focus: str  # why the sub-topic matters to this user
    queries: list[str]
    skip_urls: list[str]  # pages read in earlier rounds
    gold_sources: list[SourceRef]  # gold_context: read these instead of searching the web


class ResearcherOutput(TypedDict):
    findings: Annotated[list[Findings], operator.add]


class ResearcherState(ResearchTask, ResearcherOutput, total=False):
    pending_queries: list[str]
    hits: list[WebHit]
    new_sources: list[SourceRef]
    sources: list[SourceRef]
    notes: list[Note]
    searches: int
    fetches: int
    steps: int
    chain_calls: int  # dependent LLM calls so far in this researcher
    searched: list[str]  # queries searched so far (a repeat is not searched again)
    degraded: list[Degradation]


class DeepResearchState(PipelineInput, PipelineOutput, total=False):
    clarification: Clarification
    brief: ResearchBrief
    round: int
    findings: Annotated[list[Findings], operator.add]
    depth: int  # dependent LLM calls so far on the critical path (rounds finished)
    degraded: list[Degradation]  # steps of the top graph that fell back (the researchers' are in their findings)
