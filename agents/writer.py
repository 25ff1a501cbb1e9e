"""The writer: the final text a user reads, citing numbered sources.

It is shown the sources it may cite as `[1]..[N]`; what it writes is then checked in code
(`agents.citations.check_citations`), which keeps only citations of sources actually read and
appends the source list itself.
"""

from __future__ import annotations

from collections.abc import Sequence

from atelier.agents.citations import CitationReport, SourceRef, check_citations, source_line
from atelier.agents.models.gateway import Gateway
from atelier.agents.planner import ResearchBrief, clarification_section
from atelier.agents.prompts import Section, build_messages, user_sections
from atelier.benchmarks.case import Query

ROLE = (
    "You are the writer of a personal research assistant. You write for one specific user: what they need, "
    "in the form, tone and depth that suit them. Every fact you state comes from the numbered sources you are "
    "given, and you cite it."
)
CITE_RULES = (
    "Cite every fact with the number of its source in square brackets, e.g. [2] or [1, 3]. Cite only the "
    "numbered sources given here; if they do not support something, leave it out or say it is not known. "
    "Do not write a list of sources or references at the end: it is added automatically."
)


def _words(tokens: int | None) -> str:
    return f" Stay under about {int(tokens * 0.7)} words." if tokens else ""


def sources_section(sources: Sequence[SourceRef], texts: Sequence[str] | None = None) -> Section:
    """The numbered sources; with `texts`, each followed by what it says."""
    entries = []
    for number, source in enumerate(sources, start=1):
        entry = source_line(number, source)
        if texts is not None:
            entry += "\n" + texts[number - 1].strip()
        entries.append(entry)
    return Section("Sources", "\n\n".join(entries) if texts is not None else "\n".join(entries), untrusted=True)


def notes_section(notes: Sequence[tuple[int, str]]) -> Section:
    """Research notes, each led by the number of the source it came from."""
    return Section("Research notes", "\n".join(f"[{n}] {text}" for n, text in notes), untrusted=True)


async def write_report(
    gateway: Gateway,
    query: Query,
    context_text: str,
    brief: ResearchBrief,
    sources: Sequence[SourceRef],
    notes: Sequence[tuple[int, str]],
    clarifications: Sequence[tuple[str, str]] = (),
    max_tokens: int | None = None,
    role: str = "writer",
) -> CitationReport:
    sections = user_sections(query, context_text)
    if clarifications:
        sections.append(clarification_section(clarifications))
    sections += [
        Section("Research brief", brief.render()),
        Section("How the report should read for this user", brief.render_form()),
        sources_section(sources),
        notes_section(notes),
    ]
    task = (
        "Write the research report that answers the brief for this user, from the research notes. Lead with "
        "what matters most to them, apply what you know about them (their constraints decide what you recommend), "
        "and follow the form above. " + CITE_RULES + _words(max_tokens)
    )
    text = await gateway.text(role, build_messages(ROLE, sections, task))
    return check_citations(text, sources)


async def write_answer(
    gateway: Gateway,
    query: Query,
    context_text: str,
    sources: Sequence[SourceRef],
    texts: Sequence[str],
    max_tokens: int | None = None,
    role: str = "writer",
) -> CitationReport:
    """rag: answer from the sources' texts in one call."""
    sections = user_sections(query, context_text) + [sources_section(sources, texts)]
    task = (
        "Answer the user's current question from the sources, in a personalized way: let what you know about "
        "the user shape the content, depth, tone and format of the answer. " + CITE_RULES + _words(max_tokens)
    )
    text = await gateway.text(role, build_messages(ROLE, sections, task))
    return check_citations(text, sources)
