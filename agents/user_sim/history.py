"""History synthesis: a persona's implicit history, written the way PDR-Bench's annotators wrote it.

PDR-Bench never released its dynamic contexts, so its `context` settings cannot run without them.
This module rebuilds them from a persona following the paper's annotation protocol (appendix H):

- **every item points to one persona trait** (the "reversibility" standard) and records it;
- **at least five items per preference tag**; every other facet gets `items_per_trait` items, so
  the history reflects the whole persona (profession, family, health, ...) as the paper's does;
- **20–50% conversational** (dialogues with the phone assistant);
- **type and source diversity** (notes, saved articles, screenshots of posts and chats, purchase
  records, ...), and **plausible noise** — incidental details that never contradict the persona.

BESPOKE-style histories (§3.2: web-search sessions and information-seeking chat sessions over a
simulated period) come from the same plan with `style = "bespoke"`; `mixed` draws both kinds.

What the protocol fixes — how many items of which format reflect which trait, on which date, from
which kind of source — is planned in code from the seed, so it holds whatever the model writes;
the model (role `history_writer`) only writes the items' text, one call per trait. The result is a
`ContextRecord`, the per-user record the `pdr` loader reads from its `contexts_file`.
"""

from __future__ import annotations

import datetime as dt
import math
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from agents.gateway import Gateway
from agents.prompts import Section, build_messages
from agents.tasks import gather_or_cancel
from agents.user_sim.persona import Trait, persona_traits, render_persona
from benchmarks.errors import ConfigError
from benchmarks.loaders.pdr import (
    ContextClick,
    ContextDialogue,
    ContextMemory,
    ContextMessage,
    ContextQuery,
    ContextRecord,
    ContextSearch,
)

ItemFormat = Literal["memory", "dialogue", "search", "chat"]
CONVERSATIONAL: frozenset[str] = frozenset({"dialogue", "chat"})
MIN_ITEMS_PER_TAG = 5
CONVERSATIONAL_RANGE = (0.2, 0.5)

# style -> (formats of non-conversational items, formats of conversational items)
STYLE_FORMATS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "pdr": (("memory",), ("dialogue",)),
    "bespoke": (("search",), ("chat",)),
    "mixed": (("memory", "search"), ("dialogue", "chat")),
}
# PDR's "diversity of sources and types": what each item stands for, drawn per item from the seed.
SOURCES: dict[str, tuple[str, ...]] = {
    "memory": (
        "a quick note to self",
        "a saved article: its title and a one-line takeaway",
        "a screenshot of a social media post, described in a sentence",
        "a screenshot of a chat with a friend or family member, summarised",
        "a purchase record or a product review they wrote",
        "a saved short video: its title and why they kept it",
        "a forum or Reddit thread they bookmarked, with their comment",
        "a calendar entry or reminder",
    ),
    "dialogue": (
        "asking the phone assistant for help with something everyday",
        "asking the phone assistant for a recommendation",
        "planning something with the phone assistant",
        "asking the phone assistant to explain something they came across",
    ),
    "search": (
        "looking up a practical question",
        "comparing options before a decision",
        "following up on something they read or heard",
        "checking prices, times or availability",
    ),
    "chat": (
        "an information-seeking conversation with an AI assistant",
        "asking an AI assistant for advice on a decision",
        "asking an AI assistant to explain a topic in depth",
    ),
}
LANGUAGE_NAMES = {"en": "English", "zh": "Simplified Chinese"}
ID_PREFIX = {"memory": "m", "dialogue": "d", "chat": "c", "search": "s"}


class HistoryOptions(BaseModel):
    """The protocol's knobs; the defaults follow PDR-Bench appendix H."""

    model_config = ConfigDict(extra="forbid")

    style: Literal["pdr", "bespoke", "mixed"] = "pdr"
    items_per_tag: int = Field(default=MIN_ITEMS_PER_TAG, ge=MIN_ITEMS_PER_TAG, le=20,
                               description="Items per preference tag (PDR: at least five).")
    items_per_trait: int = Field(default=1, ge=0, le=10, description="Items per other persona facet.")
    conversational_share: float = Field(default=0.35, ge=CONVERSATIONAL_RANGE[0], le=CONVERSATIONAL_RANGE[1],
                                        description="Target share of conversational items (PDR: 20-50%).")
    period_days: int = Field(default=90, ge=1, description="The simulated period the items are dated over.")
    end_date: dt.date = Field(default=dt.date(2025, 6, 30), description="The period's last day.")
    language: str = Field(default="en", description="The language items are written in (the persona's).")
    seed: int = 0


# --------------------------------------------------------------------------- the plan (code)


@dataclass(frozen=True)
class PlannedItem:
    trait: Trait
    format: str
    date: dt.date
    source: str


def plan_history(user_id: str, attributes: dict[str, Any], options: HistoryOptions) -> list[PlannedItem]:
    """Which items to write: per trait, how many of which format, when, standing for what source."""
    traits = persona_traits(attributes)
    if not traits:
        raise ConfigError(f"persona {user_id!r} has no facets to build a history from")
    slots = [t for t in traits for _ in range(options.items_per_tag if t.is_preference else options.items_per_trait)]
    if not slots:
        raise ConfigError(f"persona {user_id!r}: items_per_trait = 0 and no preference tags leaves nothing to write")
    rng = random.Random(f"history:{options.seed}:{user_id}")
    total = len(slots)
    low, high = math.ceil(CONVERSATIONAL_RANGE[0] * total), math.floor(CONVERSATIONAL_RANGE[1] * total)
    conversational = set(rng.sample(range(total), min(max(round(options.conversational_share * total), low), high)))
    plain_formats, talk_formats = STYLE_FORMATS[options.style]
    start = options.end_date - dt.timedelta(days=options.period_days - 1)
    items = []
    for i, trait in enumerate(slots):
        fmt = rng.choice(talk_formats if i in conversational else plain_formats)
        date = start + dt.timedelta(days=rng.randrange(options.period_days))
        items.append(PlannedItem(trait=trait, format=fmt, date=date, source=rng.choice(SOURCES[fmt])))
    return items


# --------------------------------------------------------------------------- what the model writes


class MemoryDraft(BaseModel):
    title: str = Field(min_length=1, description="A clear, short title.")
    content: str = Field(min_length=1, description="The note itself, first person, 1-3 sentences.")


class TurnDraft(BaseModel):
    user: str = Field(min_length=1, description="What the user says.")
    assistant: str = Field(min_length=1, description="The assistant's reply.")


class DialogueDraft(BaseModel):
    title: str = Field(min_length=1, description="A clear, short title.")
    turns: list[TurnDraft] = Field(min_length=1, max_length=4)


class ClickDraft(BaseModel):
    title: str = Field(min_length=1, description="The title of a result the user opened.")
    snippet: str = Field(default="", description="One line of what the page said.")


class QueryDraft(BaseModel):
    query: str = Field(min_length=1, description="The query as the user typed it.")
    clicked: list[ClickDraft] = Field(default_factory=list, max_length=3)


class SearchDraft(BaseModel):
    queries: list[QueryDraft] = Field(min_length=1, max_length=4)


DRAFT_TYPES: dict[str, type[BaseModel]] = {
    "memory": MemoryDraft, "dialogue": DialogueDraft, "chat": DialogueDraft, "search": SearchDraft,
}
FIELD_NAMES = {"memory": "memories", "dialogue": "dialogues", "chat": "chats", "search": "searches"}
FORMAT_GUIDE = {
    "memory": "memory snippets — short first-person records with a clear title, each standing for the source named",
    "dialogue": "short everyday exchanges with the phone assistant (1-4 turns), the user speaking in their own "
                "voice and habits",
    "chat": "titled information-seeking conversations with an AI assistant (1-4 turns)",
    "search": "web-search sessions — 1-4 queries typed the way this person types, with the titles (and a one-line "
              "snippet) of the results they opened",
}

ROLE = (
    "You are an annotator building a realistic personal memory database for one user, following the "
    "PDR-Bench annotation protocol: you simulate what this person records, reads, searches for and says in "
    "daily life, so that their traits can later be inferred from that data alone."
)
TASK = (
    "Write the items listed above, all reflecting the trait above, in the order listed, in {language}.\n"
    "- Reversibility: each item must clearly point to this trait; someone reading only the item should be able "
    "to infer it. Avoid generic content that could belong to anyone.\n"
    "- Show the trait through concrete behaviour, choices, questions and details; never copy the persona's "
    "wording.\n"
    "- Add realistic noise: incidental details (places, products, people, prices, small events) that make the "
    "item look like a real person's data. Noise must never contradict anything in the persona (spending "
    "habits, personality, profession, family, health, location, ...).\n"
    "- Make the items differ from one another: different situations, sources and moments of the period."
)


def _drafts_schema(counts: Counter[str]) -> type[BaseModel]:
    fields = {
        FIELD_NAMES[fmt]: (list[DRAFT_TYPES[fmt]], Field(min_length=n, max_length=n))  # type: ignore[valid-type]
        for fmt, n in counts.items()
    }
    return create_model("TraitItems", **fields)


def trait_messages(attributes: dict[str, Any], trait: Trait, planned: list[PlannedItem], language: str) -> list[dict]:
    lines: list[str] = []
    for fmt in FIELD_NAMES:
        mine = [p for p in planned if p.format == fmt]
        if mine:
            lines.append(f"{FIELD_NAMES[fmt]} ({len(mine)}): {FORMAT_GUIDE[fmt]}")
            lines += [f"  {i}. dated {p.date.isoformat()}: {p.source}" for i, p in enumerate(mine, start=1)]
    sections = [
        Section("The persona", render_persona(attributes)),
        Section("The trait these items must reflect", trait.render()),
        Section("Items to write", "\n".join(lines)),
    ]
    return build_messages(ROLE, sections, TASK.format(language=LANGUAGE_NAMES.get(language, language)))


async def write_trait_items(
    gateway: Gateway, attributes: dict[str, Any], trait: Trait, planned: list[PlannedItem], language: str,
    role: str = "history_writer",
) -> dict[str, list[BaseModel]]:
    """The model's drafts for one trait, by format, exactly as many as planned."""
    counts = Counter(p.format for p in planned)
    schema = _drafts_schema(counts)
    answer = await gateway.structured(role, trait_messages(attributes, trait, planned, language), schema)
    return {fmt: list(getattr(answer, FIELD_NAMES[fmt])) for fmt in counts}


# --------------------------------------------------------------------------- assembling the record


def _to_context_item(fmt: str, draft: Any, item_id: str, planned: PlannedItem):
    common = {"id": item_id, "time": planned.date.isoformat(), "trait": planned.trait.path}
    if fmt == "memory":
        return ContextMemory(title=draft.title.strip(), content=draft.content.strip(), **common)
    if fmt in ("dialogue", "chat"):
        messages = [ContextMessage(role=role, content=text.strip())
                    for turn in draft.turns for role, text in (("user", turn.user), ("assistant", turn.assistant))]
        return ContextDialogue(title=draft.title.strip(), messages=messages, **common)
    return ContextSearch(
        queries=[ContextQuery(query=q.query.strip(),
                              clicked=[ContextClick(title=c.title.strip(), snippet=c.snippet.strip() or None)
                                       for c in q.clicked])
                 for q in draft.queries],
        **common,
    )


@dataclass(frozen=True)
class SynthesizedHistory:
    record: ContextRecord
    plan: list[PlannedItem]


async def synthesize_history(
    gateway: Gateway, user_id: str, attributes: dict[str, Any], options: HistoryOptions,
    role: str = "history_writer",
) -> SynthesizedHistory:
    """One user's history: the plan, one writing call per trait (concurrently), items dated and
    numbered in date order, each linked to its trait."""
    plan = plan_history(user_id, attributes, options)
    by_trait: dict[str, list[PlannedItem]] = {}
    for item in plan:
        by_trait.setdefault(item.trait.path, []).append(item)
    drafts = await gather_or_cancel(
        write_trait_items(gateway, attributes, items[0].trait, items, options.language, role)
        for items in by_trait.values()
    )
    written: list[tuple[PlannedItem, str, Any]] = []
    for items, by_format in zip(by_trait.values(), drafts):
        queues = {fmt: iter(found) for fmt, found in by_format.items()}
        written += [(p, p.format, next(queues[p.format])) for p in items]
    written.sort(key=lambda w: (w[0].date, w[0].trait.path))
    numbers: Counter[str] = Counter()
    buckets: dict[str, list] = {"memories": [], "dialogues": [], "searches": []}
    for planned, fmt, draft in written:
        numbers[ID_PREFIX[fmt]] += 1
        item = _to_context_item(fmt, draft, f"{user_id}:{ID_PREFIX[fmt]}{numbers[ID_PREFIX[fmt]]:03d}", planned)
        buckets["memories" if fmt == "memory" else "searches" if fmt == "search" else "dialogues"].append(item)
    return SynthesizedHistory(record=ContextRecord(userid=user_id, **buckets), plan=plan)
