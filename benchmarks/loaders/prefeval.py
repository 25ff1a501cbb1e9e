"""PrefEval: does the system follow a preference the user revealed earlier, when a later question
puts it at risk? 1,000 items in each of three preference forms over 20 topics.

The setting selects the form, i.e. what the user's history is:
- `explicit`: the preference stated outright (one `PreferenceStatement`);
- `implicit_choice`: a conversation in which the user picks one of several options, revealing the
  preference only through the choice (one `ChatSession`);
- `implicit_persona`: a multi-turn persona-driven conversation that mentions the preference in
  passing (one `ChatSession`).
The question is the query; the preference and upstream's `explanation` (why the question puts it
at risk) are gold, and the preference-bearing event is the relevant history.

Each item is its own user. Upstream's long-context protocol additionally inserts unrelated LMSYS
conversations (`filtered_inter_turns.json`) between preference and question; that file is not in
../shared/data, so histories here are the preference-bearing part only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from atelier.benchmarks.case import Case, ChatMessage, ChatSession, Gold, Persona, PreferenceStatement, Query
from atelier.benchmarks.download import resolve
from atelier.benchmarks.loaders._records import RawRecord, deterministic_subset, read_json_array
from atelier.benchmarks.registry import BenchmarkSpec, LoadRequest, register_benchmark

NAME = "prefeval"
TOPICS = (
    "education_learning_styles",
    "education_resources",
    "entertain_games",
    "entertain_music_book",
    "entertain_shows",
    "entertain_sports",
    "lifestyle_beauty",
    "lifestyle_dietary",
    "lifestyle_fit",
    "lifestyle_health",
    "pet_ownership",
    "professional_work_location_style",
    "shop_fashion",
    "shop_home",
    "shop_motors",
    "shop_technology",
    "travel_activities",
    "travel_hotel",
    "travel_restaurant",
    "travel_transportation",
)
FORM_DIRS = {
    "explicit": "explicit_preference",
    "implicit_choice": "implicit_choice_based",
    "implicit_persona": "implicit_persona_driven",
}
# Where upstream (amazon-science/PrefEval) keeps each form.
UPSTREAM_FORM_DIRS = {
    "explicit": "benchmark_dataset/explicit_preference",
    "implicit_choice": "benchmark_dataset/implicit_preference/choice-based",
    "implicit_persona": "benchmark_dataset/implicit_preference/persona-driven",
}
PREFERENCE_EVENT_ID = "preference"


def relpath(form: str, topic: str) -> str:
    return f"prefeval/{FORM_DIRS[form]}/{topic}.json"


# --------------------------------------------------------------------------- raw records


class _Item(RawRecord):
    preference: str = Field(min_length=1)
    question: str = Field(min_length=1)
    explanation: str | None = None


class ExplicitItem(_Item):
    pass


class ChoiceConversation(RawRecord):
    query: str = Field(min_length=1)
    assistant_options: str
    user_selection: str
    assistant_acknowledgment: str


class ChoiceItem(_Item):
    implicit_query: str
    options: list[str] = Field(min_length=1)
    conversation: ChoiceConversation
    aligned_op: str


class PersonaTurn(RawRecord):
    user: str
    assistant: str


class PersonaItem(_Item):
    persona: str = Field(min_length=1)
    conversation: dict[str, PersonaTurn] = Field(min_length=1)

    @field_validator("conversation")
    @classmethod
    def _numbered_turns(cls, value: dict[str, PersonaTurn]) -> dict[str, PersonaTurn]:
        if not all(key.isdigit() for key in value):
            raise ValueError("conversation turns must be keyed '0', '1', ...")
        return value

    def turns(self) -> list[PersonaTurn]:
        return [self.conversation[k] for k in sorted(self.conversation, key=int)]


ITEM_MODELS: dict[str, type[_Item]] = {
    "explicit": ExplicitItem,
    "implicit_choice": ChoiceItem,
    "implicit_persona": PersonaItem,
}


def read_items(form: str, path: Path) -> list[_Item]:
    return read_json_array(path, ITEM_MODELS[form])


def counter(form: str):
    def count(path: Path) -> dict[str, int]:
        return {f"{form} items": len(read_items(form, path))}

    return count


# --------------------------------------------------------------------------- cases


def preference_event(item: _Item) -> PreferenceStatement | ChatSession:
    if isinstance(item, ChoiceItem):
        c = item.conversation
        return ChatSession(
            id=PREFERENCE_EVENT_ID,
            messages=[
                ChatMessage(role="user", content=c.query),
                ChatMessage(role="assistant", content=c.assistant_options),
                ChatMessage(role="user", content=c.user_selection),
                ChatMessage(role="assistant", content=c.assistant_acknowledgment),
            ],
        )
    if isinstance(item, PersonaItem):
        messages = []
        for turn in item.turns():
            messages += [
                ChatMessage(role="user", content=turn.user),
                ChatMessage(role="assistant", content=turn.assistant),
            ]
        return ChatSession(id=PREFERENCE_EVENT_ID, messages=messages)
    return PreferenceStatement(id=PREFERENCE_EVENT_ID, text=item.preference)


def item_case(item: _Item, form: str, topic: str, index: int) -> Case:
    user_id = f"{NAME}:{form}:{topic}:{index}"
    persona = Persona(user_id=user_id, attributes={"persona": item.persona}) if isinstance(item, PersonaItem) else None
    return Case(
        id=user_id,
        benchmark=NAME,
        user_id=user_id,
        persona=persona,
        query=Query(text=item.question),
        setting=form,
        domain=topic,
        history=[preference_event(item)],
        meta={"topic": topic, "form": form, "index": index},
        gold=Gold(
            preference=item.preference,
            preference_explanation=item.explanation,
            relevant_history_ids=[PREFERENCE_EVENT_ID],
        ),
    )


class PrefevalOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    topics: list[Literal[TOPICS]] | None = Field(  # type: ignore[valid-type]
        default=None, description="Topics to load (default: the split's)."
    )


def load(request: LoadRequest) -> list[Case]:
    options = request.options
    assert isinstance(options, PrefevalOptions)
    form = request.setting
    topics: tuple[str, ...] = (request.split,) if request.split in TOPICS else TOPICS
    if options.topics is not None:
        topics = tuple(t for t in topics if t in options.topics)
    cases = [
        item_case(item, form, topic, index)
        for topic in topics
        for index, item in enumerate(read_items(form, resolve(relpath(form, topic))))
    ]
    return deterministic_subset(cases, request.limit, seed=request.seed, salt=f"{NAME}:{form}:{request.split}")


SPEC = register_benchmark(
    BenchmarkSpec(
        name=NAME,
        description="PrefEval: follow an explicit or implicitly revealed preference (3 x 1,000 items, 20 topics).",
        splits=("all",) + TOPICS,
        settings=tuple(FORM_DIRS),
        load=load,
        options=PrefevalOptions,
        data_files=tuple(relpath(form, topic) for form in FORM_DIRS for topic in TOPICS),
    )
)
