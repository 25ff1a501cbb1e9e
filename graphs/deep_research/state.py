"""deep_research's state: small values and references only (page texts live in the source store).

The top graph's state is `DeepResearchState`; each parallel researcher is a subgraph that takes a
`ResearchTask` (its own input schema, sent with `Send`) and returns its `Findings` (its output
schema), which the top graph collects round by round.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from atelier.agents.citations import SourceRef
from atelier.agents.planner import ResearchBrief
from atelier.benchmarks.common.degradation import Degradation
from atelier.graphs.inputs import PipelineInput, PipelineOutput
from atelier.graphs.sources import WebHit


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
    reused: int = Field(default=0, description="Sources another researcher of the episode fetched and noted.")
    recalls: list[dict[str, Any]] = Field(default_factory=list, description="Its recall_memory calls (agentic).")
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
    episode: str  # the episode's id: its researchers share what they read (graphs/deep_research/reads.py)


class ResearcherOutput(TypedDict):
    findings: Annotated[list[Findings], operator.add]


class ResearcherState(ResearchTask, ResearcherOutput, total=False):
    pending_queries: list[str]
    hits: list[WebHit]
    new_sources: list[SourceRef]
    new_claims: list[str]  # the URL each of `new_sources` was claimed under
    reused_urls: list[str]  # URLs another researcher claimed: their notes are reused
    reused: int
    sources: list[SourceRef]
    notes: list[Note]
    searches: int
    fetches: int
    steps: int
    chain_calls: int  # dependent LLM calls so far in this researcher
    searched: list[str]  # queries searched so far (a repeat is not searched again)
    degraded: list[Degradation]


class AgentTask(TypedDict):
    """An agentic researcher's input (design = "agentic"): the topic the supervisor handed it."""

    index: int
    research_round: int
    topic: str
    skip_urls: list[str]  # pages read in earlier rounds
    gold_sources: list[SourceRef]
    episode: str
    memory: dict[str, Any]  # the case by reference, for recall_memory (memory_access = tool | both)
    recall_allowance: int  # recall_memory calls it may make: its share of what the episode's max_recalls left


class AgentResearcherState(AgentTask, ResearcherOutput, total=False):
    messages: list[dict[str, Any]]  # its conversation: OpenAI-style messages, tool calls and results
    calls: list[dict[str, Any]]  # the tool calls of its last turn, to run
    hits: list[WebHit]  # every search result so far: what `read` may read
    sources: list[SourceRef]
    notes: list[Note]
    searches: int
    fetches: int
    reused: int
    tool_calls: int  # tool calls made (the budget: `max_tool_calls`)
    steps: int  # turns taken
    chain_calls: int
    searched: list[str]
    recalls: list[dict[str, Any]]  # recall_memory calls: query, event ids, text
    degraded: list[Degradation]


class DeepResearchState(PipelineInput, PipelineOutput, total=False):
    episode: str  # an id of this episode: its researchers fetch and note each URL once
    clarification: Clarification
    brief: ResearchBrief
    round: int
    findings: Annotated[list[Findings], operator.add]
    depth: int  # dependent LLM calls so far on the critical path (rounds finished)
    degraded: list[Degradation]  # steps of the top graph that fell back (the researchers' are in their findings)
    plan: list[dict[str, Any]]  # the sub-topics about to be researched (shown at plan review), as plain data
    # design = "agentic": the supervisor's conversation, its turns, the research calls awaiting results
    supervisor_messages: list[dict[str, Any]]
    supervisor_turns: int
    pending_research: list[dict[str, Any]]
    plan_review: dict[str, Any]  # what the plan review did (meta["plan_review"])
    recalls: list[dict[str, Any]]  # the brief step's recall_memory calls (memory_access = tool | both)
