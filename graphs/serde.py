"""The checkpoint serializer of every graph, with each type that graph state holds registered.

LangGraph deserializes only the types it is told about without complaint ("Deserializing
unregistered type ... This will be blocked in a future version"); a blocked type would come back
from a checkpoint as a plain dict and break a resumed run. So every checkpointer uses `serializer()`:

    async with run_checkpointer(folder) as saver: ...   # the runner (graphs.persistence)
    InMemorySaver(serde=serializer())                   # anything else, tests included

**Putting a new type into graph state** (a pydantic model, a dataclass, an enum)? Add it to
`STATE_TYPES` — a one-line edit. Types nested inside a registered pydantic model travel as plain
data and need no entry. Plain data (dict, list, str, numbers) needs none either. The test suite
fails on LangGraph's warning for an unregistered or blocked type (tests/conftest.py), so a
missing entry shows up as soon as a test resumes a graph that holds it.

A pipeline of a researcher's own (a plugin, docs/bring-your-own.md) declares its types instead:
`build.state_types = (MyType,)` on its graph factory; `serializer()` adds the types of every
pipeline registered.

LangGraph Studio (`langgraph dev`) brings its own checkpointer and serializer, which this module
cannot reach: there LangGraph may log the warning, and nothing breaks.
"""

from __future__ import annotations

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from atelier.agents.citations import SourceRef
from atelier.agents.clarify import ClarifyAnswers, ClarifyRequest
from atelier.agents.judges.base import JudgeResult
from atelier.agents.models.grounding import GroundedAnswer
from atelier.agents.planner import ReportForm, ResearchBrief
from atelier.agents.response import Citation, SystemResponse
from atelier.benchmarks.case import Case, CaseView, ConversationTurn, Query
from atelier.benchmarks.common.degradation import Degradation
from atelier.graphs.deep_research.state import Clarification, Findings, Note
from atelier.graphs.inputs import GoldContext
from atelier.graphs.sources import WebHit
from atelier.memory.base import UserContext

STATE_TYPES: tuple[type, ...] = (
    Case,
    CaseView,
    UserContext,
    SystemResponse,
    Citation,
    JudgeResult,
    Degradation,  # what degraded, held in the pipelines' state until the response carries it
    # the pipelines' inputs and what they read
    GoldContext,
    SourceRef,
    WebHit,
    # deep_research, its clarify interrupt and resume value included
    Clarification,
    Note,
    Findings,
    ResearchBrief,
    ReportForm,
    ClarifyRequest,
    ClarifyAnswers,
    ConversationTurn,  # graphs/simulate.py: the conversation so far,
    Query,  # and a later turn's query
    GroundedAnswer,  # research_api: the provider's answer with its citations
)


def serializer() -> JsonPlusSerializer:
    """LangGraph's serializer, deserializing exactly the safe built-in types, `STATE_TYPES` and the
    types the registered pipelines declare (a plugin graph's `state_types`)."""
    from atelier.graphs.pipelines import declared_state_types

    return JsonPlusSerializer(allowed_msgpack_modules=STATE_TYPES + declared_state_types())
