"""The PDR annotation protocol (appendix H), checked in code on a user's context record.

Pure code, no model: it reads any contexts record — synthesized here, hand-written, or upstream's
when it records traits — against the user's persona and reports the protocol figures: items per
preference tag (at least five), the conversational share (20–50%), items linked to a trait of this
persona, and items that copy a persona value word for word (allowed, but they make reversibility
trivial, so they are counted).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from pydantic import BaseModel, Field, computed_field

from agents.user_sim.disclosure import SPAN, ngrams, word_tokens
from agents.user_sim.history import CONVERSATIONAL_RANGE, MIN_ITEMS_PER_TAG
from agents.user_sim.persona import persona_traits, preference_tags
from benchmarks.loaders.pdr import ContextRecord


class ProtocolFigures(BaseModel):
    items: int
    memories: int
    dialogues: int
    searches: int
    conversational_share: float = Field(description="Dialogues (and chat sessions) over all items.")
    preference_tags: int
    items_per_tag: dict[str, int] = Field(description="Items linked to each preference tag.")
    tags_below_minimum: list[str] = Field(description=f"Preference tags with fewer than {MIN_ITEMS_PER_TAG} items.")
    unlinked_items: list[str] = Field(description="Items with no trait, or one that is not a facet of this persona.")
    traits_covered: int = Field(description="Persona facets at least one item reflects.")
    traits_total: int
    verbatim_items: list[str] = Field(description=f"Items repeating {SPAN}+ consecutive words of a persona value.")
    problems: list[str]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ok(self) -> bool:
        return not self.problems


def _item_text(item: Any) -> str:
    if hasattr(item, "content"):
        return f"{item.title} {item.content}"
    if hasattr(item, "messages"):
        return " ".join(m.content for m in item.messages if m.role == "user")
    return " ".join(f"{q.query} " + " ".join(c.title for c in q.clicked) for q in item.queries)


def check_protocol(attributes: dict[str, Any], record: ContextRecord,
                   min_items_per_tag: int = MIN_ITEMS_PER_TAG) -> ProtocolFigures:
    traits = persona_traits(attributes)
    paths = {t.path for t in traits}
    items = [*record.memories, *record.dialogues, *record.searches]
    ids = [item.id or f"{kind}-{i}"  # as the pdr loader names items without an id
           for kind, group in (("memory", record.memories), ("dialogue", record.dialogues), ("search", record.searches))
           for i, item in enumerate(group)]
    linked = Counter(item.trait for item in items if item.trait in paths)
    unlinked = [i for i, item in zip(ids, items) if item.trait not in paths]
    tags = {t.path: linked.get(t.path, 0) for t in preference_tags(traits)}
    below = [path for path, n in tags.items() if n < min_items_per_tag]
    share = len(record.dialogues) / len(items) if items else 0.0
    value_grams = {g for t in traits for g in ngrams(word_tokens(t.value), SPAN)}
    verbatim = [i for i, item in zip(ids, items)
                if any(g in value_grams for g in ngrams(word_tokens(_item_text(item)), SPAN))]

    problems = []
    if not items:
        problems.append("no items")
    if below:
        problems.append(f"{len(below)} preference tag(s) with fewer than {min_items_per_tag} items: {', '.join(below)}")
    low, high = CONVERSATIONAL_RANGE
    if items and not low <= share <= high:
        problems.append(f"conversational share {share:.0%} is outside {low:.0%}-{high:.0%}")
    if unlinked:
        problems.append(f"{len(unlinked)} item(s) not linked to a trait of this persona: {', '.join(unlinked[:5])}"
                        + (" ..." if len(unlinked) > 5 else ""))
    return ProtocolFigures(
        items=len(items),
        memories=len(record.memories),
        dialogues=len(record.dialogues),
        searches=len(record.searches),
        conversational_share=round(share, 4),
        preference_tags=len(tags),
        items_per_tag=tags,
        tags_below_minimum=below,
        unlinked_items=unlinked,
        traits_covered=len(linked),
        traits_total=len(traits),
        verbatim_items=verbatim,
        problems=problems,
    )
