"""The planner: turns a question and what is known about the user into what to look for.

- `write_brief` (deep_research): the research question restated for this user, the facts about
  them that must shape the research, what the report must answer, and the form it should take;
- `plan_research` / `reflect` (deep_research): sub-topics with search queries, then the gaps left
  after a round of research;
- `search_queries` (rag): web queries for one round of search;
- `plan_aspects` (planpers): the aspects this user expects in the answer (LaMP-QA Figure 15).

Personalization enters here as data, not as a prompt suffix: the brief's user facts and form are
fields that the later steps (queries, note-taking, the report) receive explicitly.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, create_model

from atelier.agents.models.budgeted import ITEM_CHARS, ShortItem, at_most, distinct_items
from atelier.agents.models.gateway import Gateway
from atelier.agents.prompts import Section, build_messages, user_sections
from atelier.benchmarks.case import Query
from atelier.benchmarks.common.degradation import Degradation, degradation

if TYPE_CHECKING:  # what `at_most` builds, as the type checker can read it
    UserFacts = list[str]
    MustCover = list[str]
else:
    UserFacts = at_most(
        str,
        10,
        description="Facts about the user that must shape the research (place, budget, health, "
        "constraints, goals). Empty if none are known.",
    )
    MustCover = at_most(str, 8, description="What the report must answer for this user.")

ROLE = (
    "You are the research lead of a personal research assistant. You plan research for one specific user: "
    "their situation, constraints, preferences and expertise decide what is worth finding out."
)


class ReportForm(BaseModel):
    length: Literal["short", "medium", "long"] = Field(description="How much this user wants to read.")
    structure: str = Field(
        description="How to lay it out for this user, e.g. 'numbers-first bullet list', "
        "'step-by-step prose', 'executive summary then table'."
    )
    tone: str = Field(description="e.g. casual, warm, formal, professional.")
    expertise: str = Field(description="What the reader already knows: what to explain, what to skip.")


class ResearchBrief(BaseModel):
    question: str = Field(description="The research question, restated for this user in one or two sentences.")
    user_facts: UserFacts
    must_cover: MustCover
    form: ReportForm

    @classmethod
    def plain(cls, query: Query) -> ResearchBrief:
        """The brief when none could be written: the question as asked, nothing known of the user."""
        form = ReportForm(length="medium", structure="clear sections", tone="neutral", expertise="unknown")
        return cls(question=query.text, user_facts=[], must_cover=[], form=form)

    def render(self) -> str:
        lines = [f"Research question: {self.question}"]
        if self.user_facts:
            lines += ["What matters about this user:"] + [f"- {fact}" for fact in self.user_facts]
        if self.must_cover:
            lines += ["The report must answer:"] + [f"- {item}" for item in self.must_cover]
        return "\n".join(lines)

    def render_form(self) -> str:
        form = self.form
        return (
            f"Length: {form.length}\nStructure: {form.structure}\nTone: {form.tone}\n"
            f"Reader's expertise: {form.expertise}"
        )


class Subtopic(BaseModel):
    title: str = Field(description="One sub-topic to research.")
    why_for_user: str = Field(description="Why this sub-topic matters to this user in particular.")
    queries: list[str] = Field(description="Web search queries for it, using the user's specifics.")


def whole_question(brief: ResearchBrief) -> list[Subtopic]:
    """The plan when none could be made: research the question as one sub-topic."""
    return [Subtopic(title=brief.question, why_for_user="", queries=[brief.question[:ITEM_CHARS]])]


# A URL, a bare domain or path ("example.com/x"), or a search-engine address is not a query: a weak
# model asked for queries sometimes writes the links it expects to find.
_URL_LIKE = re.compile(
    r"^(?:[a-z][a-z0-9+.-]*://|www\.)\S*$"  # a scheme, or www.
    r"|^[\w-]+(?:\.[\w-]+)+/\S*$"  # a domain with a path
    r"|^[\w-]+(?:\.[\w-]+)*\.(?:com|org|net|edu|gov|info|io|uk|de|fr|eu)$",  # a bare domain
    re.IGNORECASE,
)


def checked_queries(
    queries: Sequence[str], stand_in: str, step: str, seen: Sequence[str] = ()
) -> tuple[list[str], list[Degradation]]:
    """The queries a search can use — not empty, not a URL, not a repeat (of another or of `seen`) —
    and what was wrong with the rest. When none is left, `stand_in` (the question, the sub-topic)
    is searched instead, and that is recorded too: a search never silently runs on something the
    model did not write."""
    kept: list[str] = []
    problems: list[Degradation] = []
    done = {q.casefold() for q in seen}
    for query in queries:
        text = " ".join(query.split())
        why = (
            "empty"
            if not text
            else "a URL, not a query"
            if _URL_LIKE.match(text)
            else "a repeat"
            if text.casefold() in done
            else None
        )
        if why:
            problems.append(degradation("invalid_query", step, f"{query!r} is {why}"))
            continue
        done.add(text.casefold())
        kept.append(text)
    if not kept:
        stand_in = stand_in.strip()[:ITEM_CHARS]
        problems.append(degradation("empty_answer", step, f"no usable search query; searched {stand_in!r} instead"))
        kept = [stand_in]
    return kept, problems


# What callers read of the answers' models below (which set each field's budget).


class ResearchPlan(BaseModel):
    subtopics: list[Subtopic]


class Reflection(BaseModel):
    enough: bool
    gaps: list[Subtopic]


class SearchQueries(BaseModel):
    queries: list[str]


class Aspects(BaseModel):
    aspects: list[str]


# The answers' models, each with its budgets in its schema (`agents.models.budgeted`); one class per budget,
# as the gateway builds each class's JSON schema once.


def _queries(max_queries: int, description: str | None = None) -> Any:
    return at_most(ShortItem, max_queries, min_items=1, description=description)


@functools.cache
def _subtopic_model(max_queries: int) -> type[Subtopic]:
    return create_model(
        "Subtopic", __base__=Subtopic, queries=_queries(max_queries, Subtopic.model_fields["queries"].description)
    )


@functools.cache
def _research_plan_model(max_subtopics: int, max_queries: int) -> type[ResearchPlan]:
    return create_model(
        "ResearchPlan",
        __base__=ResearchPlan,
        subtopics=at_most(_subtopic_model(max_queries), max_subtopics, min_items=1),
    )


@functools.cache
def _reflection_model(max_subtopics: int, max_queries: int) -> type[Reflection]:
    return create_model(
        "Reflection",
        __base__=Reflection,
        enough=(bool, Field(description="True when the notes already answer everything the report must cover.")),
        gaps=at_most(
            _subtopic_model(max_queries), max_subtopics, description="What is still missing, as new sub-topics."
        ),
    )


@functools.cache
def _search_queries_model(max_queries: int) -> type[SearchQueries]:
    return create_model("SearchQueries", __base__=SearchQueries, queries=_queries(max_queries))


@functools.cache
def _aspects_model(max_aspects: int) -> type[Aspects]:
    return create_model(
        "Aspects",
        __base__=Aspects,
        aspects=at_most(
            ShortItem, max_aspects, min_items=1, description="Aspects the user expects to see in the response."
        ),
    )


def _subtopics(subtopics: Sequence[Subtopic]) -> list[Subtopic]:
    """As plain `Subtopic`s (the type graph state holds), their queries stripped of blanks and
    repeats (`checked_queries` decides, where they are searched, what else cannot be used)."""
    return [Subtopic(title=t.title, why_for_user=t.why_for_user, queries=distinct_items(t.queries)) for t in subtopics]


def clarification_section(clarifications: Sequence[tuple[str, str]]) -> Section:
    body = "\n".join(f"Q: {q}\nA: {a}" for q, a in clarifications)
    return Section("What the user answered to clarifying questions", body, untrusted=True)


async def write_brief(
    gateway: Gateway,
    query: Query,
    context_text: str,
    clarifications: Sequence[tuple[str, str]] = (),
    role: str = "planner",
) -> ResearchBrief:
    sections = user_sections(query, context_text)
    if clarifications:
        sections.append(clarification_section(clarifications))
    task = (
        "Write the research brief for this user's question. Restate the question as this user would need it "
        "researched; list the facts about the user that must change what is searched and what is recommended "
        "(quote concrete numbers, places and constraints); list what the report must answer for them; and say "
        "what form the report should take for this reader (length, structure, tone, expertise), judging from how "
        "they write and what they asked for before. Use only what you were told about the user; invent nothing."
    )
    brief = await gateway.structured(role, build_messages(ROLE, sections, task), ResearchBrief)
    return brief.model_copy(
        update={"user_facts": distinct_items(brief.user_facts), "must_cover": distinct_items(brief.must_cover)}
    )


async def plan_research(
    gateway: Gateway, brief: ResearchBrief, max_subtopics: int, max_queries: int, role: str = "planner"
) -> list[Subtopic]:
    task = (
        f"Split the research into at most {max_subtopics} sub-topics that together answer the brief for this user; "
        f"they will be researched in parallel, so they should not overlap. For each, say why it matters to this "
        f"user and write up to {max_queries} web search queries that use the user's specifics (place, budget, "
        "constraints) so the results fit them rather than an average reader."
    )
    plan = await gateway.structured(
        role,
        build_messages(ROLE, [Section("Research brief", brief.render())], task),
        _research_plan_model(max_subtopics, max_queries),
    )
    return _subtopics(plan.subtopics)


async def reflect(
    gateway: Gateway,
    brief: ResearchBrief,
    findings: str,
    max_subtopics: int,
    max_queries: int,
    role: str = "planner",
) -> list[Subtopic]:
    """The gaps to research next (empty when the notes are enough)."""
    sections = [Section("Research brief", brief.render()), Section("Notes so far", findings, untrusted=True)]
    task = (
        "Compare the notes with what the report must answer for this user. If something important is missing "
        f"or contradictory, describe up to {max_subtopics} new sub-topics with up to {max_queries} search queries "
        "each; otherwise set enough to true and give no gaps."
    )
    reflection = await gateway.structured(
        role, build_messages(ROLE, sections, task), _reflection_model(max_subtopics, max_queries)
    )
    # "enough" beside gaps it names contradicts itself: the gaps are researched while the budget
    # allows (the rounds left decide, not which half of the answer to believe)
    return _subtopics(reflection.gaps)


async def search_queries(
    gateway: Gateway, query: Query, context_text: str, max_queries: int, role: str = "planner"
) -> list[str]:
    task = (
        f"Write up to {max_queries} web search queries that would find what this user needs to answer their "
        "question. Put the user's specifics (place, budget, constraints, level) into the queries where they "
        "change what should be found."
    )
    result = await gateway.structured(
        role, build_messages(ROLE, user_sections(query, context_text), task), _search_queries_model(max_queries)
    )
    return distinct_items(result.queries)


PLAN_ROLE = (
    "You are a helpful assistant designed to generate the topics that a user might expect to see in a response "
    "to their question."
)


async def plan_aspects(
    gateway: Gateway, query: Query, context_text: str, max_aspects: int, role: str = "planner"
) -> list[str]:
    """LaMP-QA's planning step (Figure 15): the aspects this user expects, from their question and profile."""
    task = (
        "Extract the important aspects that the user expects to see in a response to their current question, "
        "considering what you know about the user: their past questions, situation and preferences. "
        f"Give at most {max_aspects} aspects, most important first."
    )
    result = await gateway.structured(
        role, build_messages(PLAN_ROLE, user_sections(query, context_text), task), _aspects_model(max_aspects)
    )
    return distinct_items(result.aspects)
