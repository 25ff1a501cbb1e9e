"""The researcher: reads one source for one sub-topic and takes notes, then judges coverage.

Notes are taken per source, so each note is tied to the source it came from by construction (in
code), not by asking the model to keep track of where it read something.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from pydantic import BaseModel, Field, create_model

from atelier.agents.models.budgeted import ShortItem, at_most, distinct_items
from atelier.agents.models.gateway import Gateway
from atelier.agents.prompts import Section, build_messages

ROLE = (
    "You are a careful researcher working for one specific user. You extract facts from a source, exactly as "
    "the source states them, and only those that help answer the sub-topic for this user."
)


class SourceNotes(BaseModel):
    notes: list[str] = Field(
        default_factory=list,
        description="Self-contained facts from this source (with its numbers, names and conditions) that help "
        "answer the sub-topic for this user. Empty if the source is not useful.",
    )


class Coverage(BaseModel):
    covered: bool = Field(description="True when the notes answer the sub-topic well enough for this user.")
    follow_up_queries: list[str] = Field(default_factory=list, description="Searches that would fill what is missing.")


# The answers' models with their budgets in the schema (`agents.models.budgeted`), one class per budget.


@functools.cache
def _source_notes_model(max_notes: int) -> type[SourceNotes]:
    return create_model(
        "SourceNotes",
        __base__=SourceNotes,
        notes=at_most(str, max_notes, description=SourceNotes.model_fields["notes"].description),
    )


@functools.cache
def _coverage_model(max_queries: int) -> type[Coverage]:
    return create_model(
        "Coverage",
        __base__=Coverage,
        follow_up_queries=at_most(
            ShortItem, max_queries, description=Coverage.model_fields["follow_up_queries"].description
        ),
    )


def _focus_section(topic: str, focus: str) -> Section:
    return Section("Sub-topic", f"{topic}\nWhy it matters to this user: {focus}" if focus else topic)


async def take_notes(
    gateway: Gateway,
    topic: str,
    focus: str,
    source_title: str,
    source_text: str,
    max_notes: int,
    role: str = "researcher",
) -> list[str]:
    sections = [
        _focus_section(topic, focus),
        Section(f"Source: {source_title}", source_text, untrusted=True),
    ]
    task = (
        f"Write at most {max_notes} notes: facts this source states that help answer the sub-topic for this user. "
        "Keep numbers, prices, dates and conditions exactly as the source gives them; one fact per note; "
        "nothing the source does not say. If the source does not help, return no notes."
    )
    result = await gateway.structured(role, build_messages(ROLE, sections, task), _source_notes_model(max_notes))
    return distinct_items(result.notes)


async def assess_coverage(
    gateway: Gateway,
    topic: str,
    focus: str,
    notes: Sequence[str],
    max_queries: int,
    role: str = "researcher",
) -> Coverage:
    sections = [
        _focus_section(topic, focus),
        Section("Notes so far", "\n".join(f"- {n}" for n in notes) or "(no notes yet)", untrusted=True),
    ]
    task = (
        "Do these notes answer the sub-topic well enough for this user? If not, give up to "
        f"{max_queries} new web search queries for what is missing."
    )
    coverage = await gateway.structured(role, build_messages(ROLE, sections, task), _coverage_model(max_queries))
    return Coverage(covered=coverage.covered, follow_up_queries=distinct_items(coverage.follow_up_queries))
