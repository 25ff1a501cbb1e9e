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
the model (role `history_writer`) only writes the items' text, one call per trait. Each planned
item is a *slot* (`<trait path>#<n>`) with a fixed id, so a history can be written in pieces.

Writing survives a model that is not up to it, and never throws good work away:

- an answer cut at `max_tokens` (the gateway failed it even after its repair, and the last answer
  ended with finish_reason "length") is asked again with twice the budget, up to a ceiling
  (`WritingEffort.max_tokens_ceiling`, by default four times the role's `max_tokens`);
- every item the model writes goes through the content checks (`protocol.item_problems`:
  empty fields, template echo, a name or role label as a dialogue turn, duplicates, the wrong
  language); an item that fails them is rejected and written again (a new sample: the new request
  names why the last draft was rejected), up to `regenerations` times in a session;
- a trait whose items never came as one valid answer is asked item by item;
- a failed item or trait never costs the others: each accepted item is an `accepted` event the
  caller can store at once (`on_event`); given those events back (`prior`), synthesis writes only
  the slots still missing, continuing their attempt count, so a second session goes on where the
  first stopped (an earlier item that fails today's content checks is rejected then and rewritten).
Every step is an event: accepted, rejected (with the failed checks), budget_raised, invalid (no
valid answer, with the gateway's error), failed (the call failed: timeouts after retries, a refusal).
"""

from __future__ import annotations

import datetime as dt
import math
import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, create_model

from atelier.agents.models.gateway import Gateway, ModelCallError, StructuredOutputError, answers_whole
from atelier.agents.models.ledger import capture_calls
from atelier.agents.prompts import Section, build_messages, json_instructions
from atelier.agents.user_sim.persona import Trait, persona_traits, render_persona
from atelier.agents.user_sim.protocol import (
    CONVERSATIONAL_RANGE,
    MIN_ITEMS_PER_TAG,
    ContentRules,
    ContextItem,
    Duplicates,
    content_rules,
    item_problems,
    problem_kind,
)
from atelier.benchmarks.common.errors import ConfigError
from atelier.benchmarks.common.tasks import gather_or_cancel
from atelier.benchmarks.loaders.pdr import (
    ContextClick,
    ContextDialogue,
    ContextMemory,
    ContextMessage,
    ContextQuery,
    ContextRecord,
    ContextSearch,
)

T = TypeVar("T", bound=BaseModel)

ItemFormat = Literal["memory", "dialogue", "search", "chat"]
CONVERSATIONAL: frozenset[str] = frozenset({"dialogue", "chat"})

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
    """The protocol's knobs; the defaults follow PDR-Bench appendix H. They decide the plan: a
    history is continued only under the same options."""

    model_config = ConfigDict(extra="forbid")

    style: Literal["pdr", "bespoke", "mixed"] = "pdr"
    items_per_tag: int = Field(
        default=MIN_ITEMS_PER_TAG,
        ge=MIN_ITEMS_PER_TAG,
        le=20,
        description="Items per preference tag (PDR: at least five).",
    )
    items_per_trait: int = Field(default=1, ge=0, le=10, description="Items per other persona facet.")
    conversational_share: float = Field(
        default=0.35,
        ge=CONVERSATIONAL_RANGE[0],
        le=CONVERSATIONAL_RANGE[1],
        description="Target share of conversational items (PDR: 20-50%).",
    )
    period_days: int = Field(default=90, ge=1, description="The simulated period the items are dated over.")
    end_date: dt.date = Field(default=dt.date(2025, 6, 30), description="The period's last day.")
    language: str = Field(default="en", description="The language items are written in (the persona's).")
    seed: int = 0


class WritingEffort(BaseModel):
    """How hard the writer is pushed before an item is given up for this session. Not part of the
    plan: a later session may push harder (a bigger ceiling, more regenerations)."""

    model_config = ConfigDict(extra="forbid")

    max_tokens_ceiling: int | None = Field(
        default=None,
        gt=0,
        description="The largest max_tokens an answer cut at the role's max_tokens is asked again with (doubling); "
        "default four times the role's max_tokens. A role without max_tokens is never raised.",
    )
    regenerations: int = Field(
        default=1, ge=0, le=10, description="New drafts per item in a session after its first was rejected or failed."
    )


# --------------------------------------------------------------------------- the plan (code)


@dataclass(frozen=True)
class PlannedItem:
    trait: Trait
    format: str
    date: dt.date
    source: str
    index: int = 0  # its place among its trait's items

    @property
    def slot(self) -> str:
        """The item's key in a user's history: stable for a plan, whatever was written."""
        return f"{self.trait.path}#{self.index}"


def plan_history(user_id: str, attributes: dict[str, Any], options: HistoryOptions) -> list[PlannedItem]:
    """Which items to write: per trait, how many of which format, when, standing for what source."""
    traits = persona_traits(attributes)
    if not traits:
        raise ConfigError(f"persona {user_id!r} has no facets to build a history from")
    slots = [
        (t, n) for t in traits for n in range(options.items_per_tag if t.is_preference else options.items_per_trait)
    ]
    if not slots:
        raise ConfigError(f"persona {user_id!r}: items_per_trait = 0 and no preference tags leaves nothing to write")
    rng = random.Random(f"history:{options.seed}:{user_id}")
    total = len(slots)
    low, high = math.ceil(CONVERSATIONAL_RANGE[0] * total), math.floor(CONVERSATIONAL_RANGE[1] * total)
    conversational = set(rng.sample(range(total), min(max(round(options.conversational_share * total), low), high)))
    plain_formats, talk_formats = STYLE_FORMATS[options.style]
    start = options.end_date - dt.timedelta(days=options.period_days - 1)
    items = []
    for i, (trait, n) in enumerate(slots):
        fmt = rng.choice(talk_formats if i in conversational else plain_formats)
        date = start + dt.timedelta(days=rng.randrange(options.period_days))
        items.append(PlannedItem(trait=trait, format=fmt, date=date, source=rng.choice(SOURCES[fmt]), index=n))
    return items


def item_ids(user_id: str, plan: list[PlannedItem]) -> dict[str, str]:
    """Slot -> item id (`User1:m003`): numbered per format in date order over the whole plan, so an
    item's id does not depend on which other items were written."""
    numbers: Counter[str] = Counter()
    out = {}
    for planned in sorted(plan, key=lambda p: (p.date, p.trait.path)):  # stable: plan order breaks ties
        prefix = ID_PREFIX[planned.format]
        numbers[prefix] += 1
        out[planned.slot] = f"{user_id}:{prefix}{numbers[prefix]:03d}"
    return out


# --------------------------------------------------------------------------- what the model writes

# `maxLength` is in the schema, not validated: a server that holds output to the schema (llama.cpp's
# grammars) then cannot run on inside one string — SmolLM2-135M otherwise writes until max_tokens
# cuts it — while a model that writes a longer note is not sent back for it.
TITLE_CHARS, NOTE_CHARS, TURN_CHARS = 100, 500, 400


def _text(description: str, max_chars: int) -> Any:
    return Field(min_length=1, description=description, json_schema_extra={"maxLength": max_chars})


class MemoryDraft(BaseModel):
    title: str = _text("A clear, short title.", TITLE_CHARS)
    content: str = _text("The note itself, first person, 1-3 sentences.", NOTE_CHARS)


class TurnDraft(BaseModel):
    user: str = _text("What the user says.", TURN_CHARS)
    assistant: str = _text("The assistant's reply.", TURN_CHARS)


class DialogueDraft(BaseModel):
    title: str = _text("A clear, short title.", TITLE_CHARS)
    turns: list[TurnDraft] = Field(min_length=1, max_length=4)


class ClickDraft(BaseModel):
    title: str = _text("The title of a result the user opened.", TITLE_CHARS)
    snippet: str = Field(
        default="", description="One line of what the page said.", json_schema_extra={"maxLength": TURN_CHARS}
    )


class QueryDraft(BaseModel):
    query: str = _text("The query as the user typed it.", TITLE_CHARS)
    clicked: list[ClickDraft] = Field(default_factory=list, max_length=3)


class SearchDraft(BaseModel):
    queries: list[QueryDraft] = Field(min_length=1, max_length=4)


DRAFT_TYPES: dict[str, type[BaseModel]] = {
    "memory": MemoryDraft,
    "dialogue": DialogueDraft,
    "chat": DialogueDraft,
    "search": SearchDraft,
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
TRAIT_TITLE = "The trait these items must reflect"
ITEMS_TITLE = "Items to write"
WRITTEN_TITLE = "Already written for this trait (write different ones)"
REJECTED_TITLE = "Earlier drafts of these items, rejected"
REDO = (
    "This is draft {attempt} of some of these items: the earlier drafts were rejected for the reasons listed. Fill "
    "every field with real content about this person's life, in {language} — never the instructions, the schema's "
    "descriptions or placeholder text, and never a name or a role label in place of what someone says. Keep each "
    "item short."
)


def _drafts_schema(counts: Counter[str]) -> type[BaseModel]:
    fields: dict[str, Any] = {
        FIELD_NAMES[fmt]: (list[DRAFT_TYPES[fmt]], Field(min_length=n, max_length=n))  # type: ignore[valid-type]
        for fmt, n in counts.items()
    }
    return create_model("TraitItems", **fields)


def trait_messages(
    attributes: dict[str, Any],
    trait: Trait,
    planned: list[PlannedItem],
    language: str,
    *,
    rejected: dict[str, str] | None = None,
    written: Sequence[str] = (),
    attempt: int = 1,
) -> list[dict]:
    """The writer's request for `planned` (items of one trait). A later draft also lists why the
    earlier drafts were rejected (`rejected`: slot -> reason) and what this trait already has."""
    lines: list[str] = []
    rejected_lines: list[str] = []
    for fmt in FIELD_NAMES:
        mine = [p for p in planned if p.format == fmt]
        if mine:
            lines.append(f"{FIELD_NAMES[fmt]} ({len(mine)}): {FORMAT_GUIDE[fmt]}")
            lines += [f"  {i}. dated {p.date.isoformat()}: {p.source}" for i, p in enumerate(mine, start=1)]
            rejected_lines += [
                f"{FIELD_NAMES[fmt]} {i}: {rejected[p.slot]}"
                for i, p in enumerate(mine, start=1)
                if rejected and p.slot in rejected
            ]
    sections = [
        Section("The persona", render_persona(attributes)),
        Section(TRAIT_TITLE, trait.render()),
        Section(ITEMS_TITLE, "\n".join(lines)),
    ]
    if written:
        sections.append(Section(WRITTEN_TITLE, "\n".join(f"- {w}" for w in written), untrusted=True))
    name = LANGUAGE_NAMES.get(language, language)
    task = TASK.format(language=name)
    if rejected_lines:
        sections.append(Section(REJECTED_TITLE, "\n".join(rejected_lines), untrusted=True))
        task += "\n" + REDO.format(attempt=attempt, language=name)
    return build_messages(ROLE, sections, task)


def _schema_texts(schema: Any) -> Iterable[str]:
    """Every title, description and property name anywhere in a JSON schema."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key in ("title", "description") and isinstance(value, str):
                yield value
            elif key in ("properties", "$defs") and isinstance(value, dict):
                yield from value  # property and definition names
                for sub in value.values():
                    yield from _schema_texts(sub)
            else:
                yield from _schema_texts(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _schema_texts(value)


def writer_request_texts() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(schema texts, prompt texts) of every request the writer is sent: what no item may echo."""
    schema = _drafts_schema(Counter({fmt: 1 for fmt in FIELD_NAMES})).model_json_schema()
    schema_texts = tuple(dict.fromkeys([*_schema_texts(schema), *FIELD_NAMES.values()]))
    prompt_texts = (
        ROLE,
        TASK,
        REDO,
        TRAIT_TITLE,
        ITEMS_TITLE,
        WRITTEN_TITLE,
        REJECTED_TITLE,
        "The persona",
        *FORMAT_GUIDE.values(),
        *(s for group in SOURCES.values() for s in group),
        json_instructions({}),
    )
    return schema_texts, prompt_texts


def history_rules(attributes: dict[str, Any], language: str | None) -> ContentRules:
    """The content rules a synthesized history's items are held to (here and in `simulate check`)."""
    schema_texts, prompt_texts = writer_request_texts()
    return content_rules(attributes, language, schema_texts=schema_texts, prompt_texts=prompt_texts)


# --------------------------------------------------------------------------- the budget ladder


def _with_max_tokens(gateway: Gateway, role: str, max_tokens: int) -> Gateway:
    """A gateway like `gateway` (same cache, ledger, learned output modes, local servers shared)
    whose `role` answers with `max_tokens`."""
    settings = gateway.settings(role).model_copy(update={"max_tokens": max_tokens})
    return Gateway({**gateway.roles, role: settings}, cache=gateway.cache, ledger=gateway.ledger, modes=gateway.modes)


def _was_cut(calls: list[Any]) -> bool:
    """Whether the last answer of a failed structured request ended at max_tokens."""
    answered = [c for c in calls if c.status == "ok"]
    return bool(answered) and answered[-1].finish_reason == "length"


async def ask_within_budget(
    gateway: Gateway,
    role: str,
    messages: list[dict[str, Any]],
    schema: type[T],
    *,
    ceiling: int | None = None,
    on_raise: Callable[[int, int], None] | None = None,
) -> tuple[T, bool]:
    """`gateway.structured`, asked again with twice the budget while its answer is cut at
    max_tokens — one that fails to parse, or one that parses but was cut all the same — up to
    `ceiling` (default four times the role's max_tokens); `on_raise(old, new)` hears of each raise.
    An answer still cut at the ceiling (or filtered, or left inside its reasoning) is not used: a
    ModelCallError naming the provider contract's clause (`gateway.answers_whole`). Returns the
    answer and whether the offline `scripted` model gave it."""
    budget = gateway.settings(role).max_tokens
    ceiling = ceiling if ceiling is not None else (4 * budget if budget else None)
    current, made = gateway, []
    try:
        while True:
            with capture_calls() as calls:
                at_ceiling = budget is None or ceiling is None or budget >= ceiling
                try:
                    with answers_whole(current, role) as broken:
                        answer = await current.structured(role, messages, schema)
                        cut = bool(broken) and all(d.kind == "answer_cut" for d in broken)
                        if cut and not at_ceiling:
                            broken.clear()  # cut, yet it parsed: asked again with a larger budget below
                    if not cut or at_ceiling:
                        return answer, any(c.dry_run for c in calls)
                except StructuredOutputError:
                    if not _was_cut(list(calls)) or at_ceiling:
                        raise
            assert budget is not None and ceiling is not None  # (else at the ceiling: returned or raised above)
            raised = min(2 * budget, ceiling)
            if on_raise is not None:
                on_raise(budget, raised)
            budget = raised
            current = _with_max_tokens(gateway, role, budget)
            made.append(current)
    finally:
        for sibling in made:
            await sibling.aclose()


# --------------------------------------------------------------------------- synthesis


EventKind = Literal["accepted", "rejected", "budget_raised", "invalid", "failed"]


class SynthesisEvent(BaseModel):
    """One recorded step of a user's synthesis."""

    model_config = ConfigDict(extra="forbid")

    user: str
    trait: str
    slots: list[str] = Field(description="The items concerned (`<trait path>#<n>`).")
    kind: EventKind
    attempt: int = Field(default=0, description="The draft of these items this was (all kinds but budget_raised).")
    detail: str = Field(default="", description="Why: the failed checks, the error, the budgets.")
    item: dict[str, Any] | None = Field(default=None, description="The accepted item, as the contexts file holds it.")
    dry_run: bool = Field(default=False, description="The offline scripted model wrote it.")


class TraitReport(BaseModel):
    """What became of one trait's items, over every session."""

    planned: int
    written: int
    status: Literal["complete", "partial", "missing"]
    reasons: list[str] = Field(default_factory=list, description="Per item not written, the last reason recorded.")
    missing_by_reason: dict[str, int] = Field(
        default_factory=dict,
        description="Items not written per kind of reason: `rejected: <check>`, `invalid: "
        "<error>`, `failed: <error>`, or why none was attempted.",
    )
    rejected: int = Field(default=0, description="Drafts rejected by the content checks.")
    invalid_answers: int = Field(default=0, description="Answers never valid for the schema (cut at the ceiling, ...).")
    failed_calls: int = Field(default=0, description="Calls that failed (timeouts after retries, refusals, ...).")
    budget_raises: int = 0


@dataclass(frozen=True)
class SynthesizedHistory:
    record: ContextRecord
    plan: list[PlannedItem]
    events: list[SynthesisEvent] = field(default_factory=list)  # this session's
    traits: dict[str, TraitReport] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return all(t.status == "complete" for t in self.traits.values())


def _to_context_item(fmt: str, draft: Any, item_id: str, planned: PlannedItem) -> ContextItem:
    common = {"id": item_id, "time": planned.date.isoformat(), "trait": planned.trait.path}
    if fmt == "memory":
        return ContextMemory(title=draft.title.strip(), content=draft.content.strip() or draft.content, **common)
    if fmt in ("dialogue", "chat"):
        messages = [
            ContextMessage(role=role, content=text.strip())
            for turn in draft.turns
            for role, text in (("user", turn.user), ("assistant", turn.assistant))
        ]
        return ContextDialogue(title=draft.title.strip(), messages=messages, **common)
    return ContextSearch(
        queries=[
            ContextQuery(
                query=q.query.strip() or q.query,
                clicked=[
                    ContextClick(title=c.title.strip() or c.title, snippet=c.snippet.strip() or None) for c in q.clicked
                ],
            )
            for q in draft.queries
        ],
        **common,
    )


def _context_item(fmt: str, data: dict[str, Any]) -> ContextItem:
    kind = ContextMemory if fmt == "memory" else ContextSearch if fmt == "search" else ContextDialogue
    return kind.model_validate(data)


def _summary(item: ContextItem) -> str:
    """One line naming an accepted item, for the writer's list of what a trait already has."""
    if isinstance(item, ContextMemory):
        text = f"{item.title}: {item.content}" if item.title else item.content
    elif isinstance(item, ContextDialogue):
        text = f"{item.title}: {item.messages[0].content}" if item.title else item.messages[0].content
    else:
        text = "; ".join(q.query for q in item.queries)
    line = " ".join(text.split())
    return line if len(line) <= 120 else line[:119] + "…"


def assemble_record(user_id: str, plan: list[PlannedItem], events: Iterable[SynthesisEvent]) -> ContextRecord:
    """The contexts record of the accepted items among `events`, in date (id) order."""
    formats = {p.slot: p.format for p in plan}
    ids = item_ids(user_id, plan)
    accepted = {
        slot: _context_item(formats[slot], data)
        for slot, data in accepted_items([e for e in events if e.user == user_id]).items()
        if slot in formats
    }
    buckets: dict[str, list] = {"memories": [], "dialogues": [], "searches": []}
    for slot in sorted(accepted, key=lambda s: ids[s]):
        fmt = formats[slot]
        buckets["memories" if fmt == "memory" else "searches" if fmt == "search" else "dialogues"].append(
            accepted[slot]
        )
    for group in buckets.values():
        group.sort(key=lambda item: (item.time or "", item.id or ""))
    return ContextRecord(userid=user_id, **buckets)


def accepted_items(events: Iterable[SynthesisEvent]) -> dict[str, dict[str, Any]]:
    """Slot -> the item accepted for it, as the events (in order) leave it: a later rejection (a
    later session's checks) takes an accepted item back."""
    accepted: dict[str, dict[str, Any]] = {}
    for event in events:
        if event.kind == "accepted" and event.item is not None and event.slots:
            accepted[event.slots[0]] = event.item
        elif event.kind == "rejected":
            for slot in event.slots:
                accepted.pop(slot, None)
    return accepted


def trait_reports(
    plan: list[PlannedItem], events: Iterable[SynthesisEvent], unattempted: str = "not attempted"
) -> dict[str, TraitReport]:
    """Per trait (plan order): planned, written, status and, per missing item, the last reason
    recorded for it (`unattempted` for an item no event names)."""
    events = list(events)
    accepted = set(accepted_items(events))
    last_reason: dict[str, str] = {}
    last_kind: dict[str, str] = {}
    for event in events:
        if event.kind in ("rejected", "invalid", "failed"):
            for slot in event.slots:
                last_reason[slot] = f"{event.kind} (draft {event.attempt}): {event.detail}"
                last_kind[slot] = f"{event.kind}: " + (
                    problem_kind(event.detail) if event.kind == "rejected" else _first_line(event.detail)
                )
    by_trait: dict[str, list[PlannedItem]] = {}
    for planned in plan:
        by_trait.setdefault(planned.trait.path, []).append(planned)
    out = {}
    for path, items in by_trait.items():
        written = sum(p.slot in accepted for p in items)
        mine = [e for e in events if e.trait == path]
        out[path] = TraitReport(
            planned=len(items),
            written=written,
            status="complete" if written == len(items) else "partial" if written else "missing",
            reasons=[
                f"{FIELD_NAMES[p.format]} #{p.index}: {last_reason.get(p.slot, unattempted)}"
                for p in items
                if p.slot not in accepted
            ],
            missing_by_reason=dict(
                Counter(last_kind.get(p.slot, unattempted) for p in items if p.slot not in accepted)
            ),
            rejected=sum(e.kind == "rejected" for e in mine),
            invalid_answers=sum(e.kind == "invalid" for e in mine),
            failed_calls=sum(e.kind == "failed" for e in mine),
            budget_raises=sum(e.kind == "budget_raised" for e in mine),
        )
    return out


class _UserSynthesis:
    """One user's synthesis in progress: what is accepted, each slot's draft count, the notes a
    redraft carries, and the events (reported through `on_event` as they happen)."""

    def __init__(
        self,
        gateway: Gateway,
        user_id: str,
        attributes: dict[str, Any],
        options: HistoryOptions,
        effort: WritingEffort,
        role: str,
        plan: list[PlannedItem],
        prior: Sequence[SynthesisEvent],
        on_event: Callable[[SynthesisEvent], None] | None,
    ) -> None:
        self.gateway, self.user_id, self.attributes, self.options = gateway, user_id, attributes, options
        self.effort, self.role, self.plan = effort, role, plan
        self.on_event = on_event
        self.rules = history_rules(attributes, options.language)
        self.ids = item_ids(user_id, plan)
        self.formats = {p.slot: p.format for p in plan}
        self.events: list[SynthesisEvent] = []
        self.accepted: dict[str, ContextItem] = {}
        self.drafts: Counter[str] = Counter()  # drafts made of each slot, every session
        self.notes: dict[str, str] = {}  # slot -> why its last draft was not kept
        for event in prior:
            if event.user != user_id or not event.slots or event.slots[0] not in self.formats:
                continue
            if event.kind == "accepted" and event.item is not None:
                self.accepted[event.slots[0]] = _context_item(self.formats[event.slots[0]], event.item)
                self.drafts[event.slots[0]] = max(self.drafts[event.slots[0]], event.attempt)
            elif event.kind in ("rejected", "invalid", "failed"):
                for slot in event.slots:
                    self.drafts[slot] = max(self.drafts[slot], event.attempt)
                    if event.kind != "failed":  # a failed call says nothing about the draft
                        self.notes[slot] = _note(event)
                    if event.kind == "rejected":  # an accepted item a later session's checks rejected
                        self.accepted.pop(slot, None)
        self.duplicates = Duplicates()

    def recheck_prior(self) -> None:
        """Hold the items earlier sessions accepted to today's content checks: one that fails them
        (the checks have grown since) is rejected now, recorded, and written again."""
        planned = {p.slot: p for p in self.plan}
        for slot in sorted(self.accepted, key=lambda s: self.ids[s]):
            item = self.accepted[slot]
            problems = item_problems(item, self.rules)
            earlier = self.duplicates.of(item)
            if earlier is not None:
                problems.append(f"duplicate: of {earlier}")
            if not problems:
                self.duplicates.add(self.ids[slot], item)
                continue
            del self.accepted[slot]
            self.notes[slot] = "; ".join(problems)
            self.emit(
                planned[slot].trait,
                [planned[slot]],
                "rejected",
                attempt=self.drafts[slot] or 1,
                detail=f"{self.notes[slot]} (found by a later session's checks)",
            )

    def drafts_so_far(self, items: list[PlannedItem]) -> int:
        """The fewest drafts any of these items still missing has had (0: one was never attempted)."""
        return min((self.drafts[p.slot] for p in items if p.slot not in self.accepted), default=0)

    def emit(self, trait: Trait, slots: list[PlannedItem], kind: EventKind, **fields: Any) -> SynthesisEvent:
        event = SynthesisEvent(user=self.user_id, trait=trait.path, slots=[p.slot for p in slots], kind=kind, **fields)
        self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)
        return event

    async def write_trait(self, items: list[PlannedItem]) -> None:
        """The trait's missing items: as one request, then (each on its own, once a joint answer
        failed) redrafts of those rejected or failed, while this session's drafts last."""
        trait = items[0].trait
        session: Counter[str] = Counter()
        stopped: set[str] = set()
        one_by_one = False
        while True:
            pending = [
                p
                for p in items
                if p.slot not in self.accepted
                and p.slot not in stopped
                and session[p.slot] <= self.effort.regenerations
            ]
            if not pending:
                return
            for group in [[p] for p in pending] if one_by_one else [pending]:
                for p in group:
                    session[p.slot] += 1
                    self.drafts[p.slot] += 1
                outcome = await self.write_group(trait, group)
                if outcome == "stop":
                    stopped.update(p.slot for p in group)
                elif outcome == "invalid" and len(group) > 1:
                    one_by_one = True

    async def write_group(self, trait: Trait, group: list[PlannedItem]) -> str:
        """One request for `group`; each item it brings is checked and accepted or rejected.
        Returns "ok", "invalid" (no valid answer: ask again) or "stop" (an error no redraft fixes)."""
        attempt = max(self.drafts[p.slot] for p in group)
        written = [
            _summary(self.accepted[p.slot]) for p in self.plan if p.trait.path == trait.path and p.slot in self.accepted
        ]
        rejected = {p.slot: self.notes[p.slot] for p in group if p.slot in self.notes}
        messages = trait_messages(
            self.attributes, trait, group, self.options.language, rejected=rejected, written=written, attempt=attempt
        )
        counts = Counter(p.format for p in group)

        def raised(old: int, new: int) -> None:
            self.emit(trait, group, "budget_raised", detail=f"answer cut at max_tokens = {old}: asked again with {new}")

        try:
            answer, dry_run = await ask_within_budget(
                self.gateway,
                self.role,
                messages,
                _drafts_schema(counts),
                ceiling=self.effort.max_tokens_ceiling,
                on_raise=raised,
            )
        except StructuredOutputError as exc:
            event = self.emit(trait, group, "invalid", attempt=attempt, detail=str(exc))
            for p in group:
                self.notes[p.slot] = _note(event)
            return "invalid"
        except ModelCallError as exc:
            self.emit(trait, group, "failed", attempt=attempt, detail=str(exc))
            return "stop"
        queues = {fmt: iter(getattr(answer, FIELD_NAMES[fmt])) for fmt in counts}
        for planned in group:
            item = _to_context_item(planned.format, next(queues[planned.format]), self.ids[planned.slot], planned)
            problems = item_problems(item, self.rules)
            earlier = self.duplicates.of(item)
            if earlier is not None:
                problems.append(f"duplicate: of {earlier}")
            if problems:
                detail = "; ".join(problems)
                self.notes[planned.slot] = detail
                self.emit(trait, [planned], "rejected", attempt=attempt, detail=detail)
                continue
            self.accepted[planned.slot] = item
            self.duplicates.add(self.ids[planned.slot], item)
            self.notes.pop(planned.slot, None)
            self.emit(
                trait, [planned], "accepted", attempt=attempt, item=item.model_dump(exclude_none=True), dry_run=dry_run
            )
        return "ok"


def _first_line(text: str, width: int = 120) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "unknown error"
    return line if len(line) <= width else line[: width - 1] + "…"


def _note(event: SynthesisEvent) -> str:
    """What a redraft is told about the draft `event` did not keep."""
    if event.kind == "rejected":
        return event.detail
    return "the answer was not valid JSON for the schema" + (
        " (cut at max_tokens: keep it shorter)" if "cut at max_tokens" in event.detail else ""
    )


async def synthesize_history(
    gateway: Gateway,
    user_id: str,
    attributes: dict[str, Any],
    options: HistoryOptions,
    role: str = "history_writer",
    *,
    effort: WritingEffort | None = None,
    prior: Sequence[SynthesisEvent] = (),
    on_event: Callable[[SynthesisEvent], None] | None = None,
) -> SynthesizedHistory:
    """One user's history: the plan, then the traits' missing items written concurrently (one
    request per trait first), each item checked, numbered by the plan and linked to its trait.
    `prior`: the events of earlier sessions (their accepted items are kept, their slots' drafts
    counted on). Model errors do not escape: they are `failed` events, and the record holds what
    was accepted."""
    plan = plan_history(user_id, attributes, options)
    synthesis = _UserSynthesis(
        gateway, user_id, attributes, options, effort or WritingEffort(), role, plan, prior, on_event
    )
    synthesis.recheck_prior()
    by_trait: dict[str, list[PlannedItem]] = {}
    for item in plan:
        by_trait.setdefault(item.trait.path, []).append(item)
    # the traits whose missing items have had the fewest drafts ask first: a model serving one request
    # at a time (a local one) then writes what was never attempted before it redrafts what was
    order = sorted(by_trait.values(), key=synthesis.drafts_so_far)
    await gather_or_cancel(synthesis.write_trait(items) for items in order)
    everything = [*prior, *synthesis.events]
    return SynthesizedHistory(
        record=assemble_record(user_id, plan, everything),
        plan=plan,
        events=synthesis.events,
        traits=trait_reports(plan, everything),
    )
