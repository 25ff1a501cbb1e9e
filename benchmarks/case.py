"""The benchmark data model: a `Case` is one query of one user, with that user's history.

A case carries gold annotations that only judges may see. Systems under test receive a
`CaseView`, a separate type with no gold fields at all, built by `Case.view(setting)`: the
boundary is enforced by the type, not by convention.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


# --------------------------------------------------------------------------- history events


class _Event(_Model):
    id: str = Field(min_length=1, description="Unique within the user's history.")
    timestamp: str | None = Field(default=None, description="ISO date or free-form time, if known.")

    def render(self) -> str:  # pragma: no cover - every subclass overrides
        raise NotImplementedError


class MemorySnippet(_Event):
    """A short note the user left (PDR-Bench memory fragment)."""

    kind: Literal["memory_snippet"] = "memory_snippet"
    text: str

    def render(self) -> str:
        return self.text


class ChatMessage(_Model):
    role: Literal["user", "assistant", "system"]
    content: str


class ChatSession(_Event):
    """A past conversation with an assistant (PDR dialogue, BESPOKE chat history)."""

    kind: Literal["chat_session"] = "chat_session"
    title: str | None = None
    messages: list[ChatMessage]

    def render(self) -> str:
        head = f"[{self.title}] " if self.title else ""
        return head + " | ".join(f"{m.role}: {m.content}" for m in self.messages)


class SearchResultClick(_Model):
    title: str
    url: str | None = None
    snippet: str | None = None


class SearchQueryRecord(_Model):
    query: str
    clicked: list[SearchResultClick] = Field(default_factory=list)


class SearchSession(_Event):
    """A past web-search session: queries and the results the user opened (BESPOKE)."""

    kind: Literal["search_session"] = "search_session"
    queries: list[SearchQueryRecord]

    def render(self) -> str:
        parts = []
        for q in self.queries:
            clicked = "; ".join(c.title for c in q.clicked)
            parts.append(f"searched '{q.query}'" + (f" and opened: {clicked}" if clicked else ""))
        return " | ".join(parts)


class PTKBStatement(_Event):
    """A personal text knowledge base statement (TREC iKAT)."""

    kind: Literal["ptkb"] = "ptkb"
    text: str

    def render(self) -> str:
        return self.text


class PastQuestion(_Event):
    """A question the user asked before, with the narrative they wrote for it (LaMP-QA)."""

    kind: Literal["past_question"] = "past_question"
    question: str
    narrative: str = ""

    def render(self) -> str:
        return f"{self.question} — {self.narrative}" if self.narrative else self.question


class DialogueTurn(_Event):
    """One turn of a long multi-session conversation (LoCoMo `dia_id`s such as `D1:3`)."""

    kind: Literal["dialogue_turn"] = "dialogue_turn"
    speaker: str
    text: str
    session: str | None = None

    def render(self) -> str:
        return f"{self.speaker}: {self.text}"


class PreferenceStatement(_Event):
    """A preference the user stated explicitly or revealed in conversation (PrefEval)."""

    kind: Literal["preference"] = "preference"
    text: str

    def render(self) -> str:
        return self.text


class ExplicitPersona(_Event):
    """The user's structured persona as one history item, present when the setting exposes it
    (PDR `persona`). Its `attributes` follow the PDR persona schema: nested sections of facets."""

    kind: Literal["persona"] = "persona"
    attributes: dict[str, Any]

    def render(self) -> str:
        return "\n".join(f"{path}: {value}" for path, value in persona_facets(self.attributes))


HistoryEvent = Annotated[
    MemorySnippet
    | ChatSession
    | SearchSession
    | PTKBStatement
    | PastQuestion
    | DialogueTurn
    | PreferenceStatement
    | ExplicitPersona,
    Field(discriminator="kind"),
]
EVENT_KINDS = (
    "memory_snippet",
    "chat_session",
    "search_session",
    "ptkb",
    "past_question",
    "dialogue_turn",
    "preference",
    "persona",
)


def persona_facets(attributes: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """Flatten a nested persona into (`Section > Subsection > Field`, value) pairs, in order."""
    out: list[tuple[str, str]] = []
    for key, value in attributes.items():
        path = f"{prefix} > {key}" if prefix else str(key)
        if isinstance(value, dict):
            out.extend(persona_facets(value, path))
        elif isinstance(value, list):
            out.append(
                (path, "; ".join(json.dumps(v, ensure_ascii=False) if isinstance(v, dict) else str(v) for v in value))
            )
        else:
            out.append((path, str(value)))
    return out


# --------------------------------------------------------------------------- persona, query


class Persona(_Model):
    """A structured persona (PDR schema: nested sections of facets). Optional on a case."""

    user_id: str
    attributes: dict[str, Any] = Field(default_factory=dict)

    def facets(self) -> list[tuple[str, str]]:
        return persona_facets(self.attributes)

    def as_event(self) -> ExplicitPersona:
        return ExplicitPersona(id=f"{self.user_id}:persona", attributes=self.attributes)


class ConversationTurn(_Model):
    """A previous turn of the current conversation (iKAT, multi-turn simulation)."""

    utterance: str
    response: str | None = None


class Query(_Model):
    text: str = Field(min_length=1, description="What the user asks, as the system receives it.")
    resolved: str | None = Field(
        default=None, description="A manually resolved rewrite of `text` (iKAT), when the data has one."
    )
    previous_turns: list[ConversationTurn] = Field(default_factory=list)
    language: str = "en"


# --------------------------------------------------------------------------- gold (judges only)


class RubricAspect(_Model):
    """An aspect the user expects in the answer (LaMP-QA rubric; BESPOKE rubric items)."""

    aspect: str
    reason: str = ""
    evidence: str = ""


class RJPair(_Model):
    """A response–judgment pair (BESPOKE evaluation shots): a response and how the user rated it."""

    response: str
    score: float | None = None
    feedback: str = ""
    criterion: str | None = None


class Criterion(_Model):
    """A weighted evaluation criterion (DeepResearch Bench criteria; PQR sub-criteria)."""

    dimension: str
    criterion: str
    explanation: str = ""
    weight: float


class Gold(_Model):
    information_need: str | None = Field(default=None, description="The hidden need behind the query.")
    narrative: str | None = Field(default=None, description="The user's own detailed description (LaMP-QA).")
    rubric_aspects: list[RubricAspect] = Field(default_factory=list)
    information_claims: list[str] = Field(default_factory=list, description="Gold information (BESPOKE).")
    claim_sources: dict[str, list[str]] = Field(
        default_factory=dict, description="For each gold claim, the ids of the documents that support it."
    )
    rj_pairs: list[RJPair] = Field(default_factory=list)
    relevant_history_ids: list[str] = Field(default_factory=list)
    relevance: dict[str, int] = Field(
        default_factory=dict, description="Graded relevance per history event id, when the data grades it."
    )
    answer: str | None = Field(default=None, description="A reference answer (LoCoMo, PrefEval).")
    adversarial_answer: str | None = Field(
        default=None, description="A tempting wrong answer the system must not give (LoCoMo category 5)."
    )
    preference: str | None = Field(default=None, description="The preference the answer must respect (PrefEval).")
    preference_explanation: str | None = Field(
        default=None, description="Why the question puts the preference at risk (PrefEval `explanation`)."
    )
    criteria: list[Criterion] = Field(default_factory=list)
    dimension_weights: dict[str, float] = Field(default_factory=dict)


# --------------------------------------------------------------------------- case


class _CaseBase(_Model):
    id: str = Field(min_length=1)
    benchmark: str
    user_id: str
    query: Query
    setting: str = "default"
    task_id: str | None = None
    domain: str | None = None
    history: list[HistoryEvent] = Field(default_factory=list)
    meta: dict[str, Any] = Field(default_factory=dict, description="Non-gold facts (category, split, ...).")


class CaseView(_CaseBase):
    """What a system under test may see. It has no gold fields: there is nothing to leak."""


class ViewAblation(_Model):
    """What to hide from a system on top of its setting (PersonaLens-style facet ablation).

    A facet pattern containing ` > ` hides that persona path and everything under it
    (`Preferences and Interests > Travel Preferences`); a pattern without it hides every path
    with a component of that name (`Diet`, or a whole section such as `Health Status`). Hiding a
    facet removes it from the explicit persona and removes the history items known to reflect it
    (`Case.history_traits`). `history_kinds` hides whole kinds of history events.
    """

    facets: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    history_kinds: list[Literal[EVENT_KINDS]] = Field(default_factory=list)  # type: ignore[valid-type]

    @property
    def active(self) -> bool:
        return bool(self.facets or self.history_kinds)

    def hides_facet(self, path: str) -> bool:
        return any(facet_matches(pattern, path) for pattern in self.facets)

    def unmatched_facets(self, cases: list[Case]) -> list[str]:
        """The facet patterns that match no persona facet and no history trait of any of `cases`
        (most likely typos: they would silently hide nothing)."""
        if not self.facets:  # nothing hidden: nothing to match (and no walk over every case's facets)
            return []
        paths = {
            p
            for c in cases
            for p in [*(f for f, _ in (c.persona.facets() if c.persona else [])), *c.history_traits.values()]
        }
        return [pattern for pattern in self.facets if not any(facet_matches(pattern, p) for p in paths)]


def facet_matches(pattern: str, path: str) -> bool:
    """Whether a `ViewAblation` facet pattern covers the facet `path` (case-insensitive)."""
    pattern, path = pattern.strip().casefold(), path.casefold()
    if ">" in pattern:
        parts = [p.strip() for p in pattern.split(">")]
        return [p.strip() for p in path.split(">")][: len(parts)] == parts
    return pattern in (p.strip() for p in path.split(">"))


def _without_facets(attributes: dict[str, Any], hidden: ViewAblation, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        path = f"{prefix} > {key}" if prefix else str(key)
        if hidden.hides_facet(path):
            continue
        if isinstance(value, dict):
            value = _without_facets(value, hidden, path)
            if not value:
                continue
        out[key] = value
    return out


class Case(_CaseBase):
    persona: Persona | None = None
    gold: Gold = Field(default_factory=Gold)
    history_traits: dict[str, str] = Field(
        default_factory=dict,
        description="For synthesized or annotated histories: the persona facet path each history event reflects "
        "(PDR's reversibility links). Not shown to systems; used by facet ablations and reversibility checks.",
    )
    clusters: dict[str, str] = Field(
        default_factory=dict,
        description="The groups this case shares with others, by dimension (PDR: persona and task; LoCoMo: "
        "conversation; iKAT: topic; sample: user). Scores within a group move together, so intervals and "
        "paired tests resample these groups (benchmarks.metrics.clusters); empty: cases are independent.",
    )

    def view(self, setting: str | None = None, hide: ViewAblation | None = None) -> CaseView:
        """The system's view under `setting` (default: the case's own), minus what `hide` hides.

        Settings follow PDR-Bench: `task_only` hides all history, `persona` exposes only the
        explicit persona (as one history event), `context` exposes the implicit history;
        `persona+context` exposes both. Any other setting exposes the history as loaded.
        """
        setting = setting or self.setting
        history: list = list(self.history)
        persona = self.persona
        if hide is not None and hide.active:
            history = [
                e
                for e in history
                if e.kind not in hide.history_kinds and not hide.hides_facet(self.history_traits.get(e.id, ""))
            ]
            if persona is not None and hide.facets:
                persona = persona.model_copy(update={"attributes": _without_facets(persona.attributes, hide)})
        persona_events = [persona.as_event()] if persona is not None else []
        if hide is not None and (
            "persona" in hide.history_kinds
            or (
                persona is not None
                and self.persona is not None  # always, when `persona` is (it is this one or a copy)
                and not persona.attributes
                and self.persona.attributes
            )
        ):
            persona_events = []  # hidden as a kind, or every facet of it hidden
        if setting == "task_only":
            history = []
        elif setting == "persona":
            history = persona_events
        elif setting == "persona+context":
            history = persona_events + history
        data = self.model_dump(exclude={"gold", "persona", "history", "setting", "history_traits", "clusters"})
        return CaseView.model_validate({**data, "history": history, "setting": setting})

    def event_ids(self) -> set[str]:
        return {e.id for e in self.history}
