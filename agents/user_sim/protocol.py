"""The PDR annotation protocol (appendix H), checked in code on a user's context record.

Pure code, no model. Two layers:

1. **Content checks**, item by item — what a weak writer gets wrong while the record still looks
   well-formed: an empty field; a *template echo* (a field holding the request instead of content:
   a field description or title of the schema the writer answered in, such as "The note itself";
   an unfilled placeholder, `<name>`; an identifier made of the schema's words, `DialogueSyntax`;
   a clause of the prompt; or text about the request rather than the person); a persona's or
   anyone's bare name, or a role label ("The Assistant"), standing in for a dialogue turn or a
   note; a duplicate (of an earlier item, exactly or nearly, or — given the local sentence
   embedder — the same thing in other words; the same user turn twice; an assistant echoing the
   user; a sentence said twice in a field: a model looping); text not in
   the expected language (script shares and function-word ratios, en and zh). History synthesis
   rejects and regenerates such items; this check fails a record that holds them.
2. **Protocol figures**: items per preference tag (at least five), the conversational share
   (20–50%), items linked to a trait of this persona, and items that copy a persona value word for
   word or lightly edited (allowed, but they make reversibility trivial, so they are counted). Items per tag and the
   share count only items that passed the content checks — what was written, not the labels the
   plan assigned — and, when the inverse pass of the reversibility check ran, only items it cited
   as evidence for the tag (`attribution`), whatever their label says.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from difflib import SequenceMatcher
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, computed_field

from atelier.agents.models.scripted import DRY_RUN_MARK
from atelier.agents.user_sim.contradiction import offline_contradictions
from atelier.agents.user_sim.disclosure import SPAN, ngrams, word_tokens
from atelier.agents.user_sim.persona import persona_traits, preference_tags, render_persona
from atelier.benchmarks.loaders.pdr import ContextDialogue, ContextMemory, ContextRecord, ContextSearch

MIN_ITEMS_PER_TAG = 5
CONVERSATIONAL_RANGE = (0.2, 0.5)

CONTENT_CHECKS: tuple[str, ...] = (
    "empty",
    "template echo",
    "name or role as content",
    "duplicate",
    "language",
    "contradiction",
)
# items repeating SPAN+ words of a persona value: a few is a person using their own words; more is a
# history copied from the persona, which makes reversibility trivial and the history no history
MAX_VERBATIM_SHARE = 0.25

ContextItem = ContextMemory | ContextDialogue | ContextSearch
Embed = Callable[[list[str]], Any]  # texts -> their sentence vectors, one row each

# --------------------------------------------------------------------------- language

_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_LATIN_WORD = re.compile(r"[A-Za-z\u00c0-\u024f]+(?:['’][A-Za-z]+)?")
_OTHER_LETTER = re.compile(r"[^\W\d_A-Za-z\u00c0-\u024f\u3400-\u9fff\uf900-\ufaff]")
# Function words, by language: a third or more of the words of prose in their language, rare in the
# others. A text is taken for English unless another language's function words outnumber
# English's — keyword lists and terse notes have few of either and are not judged on them. Words
# two of these languages share (a, no, in, de, ...) are left out.
EN_STOPWORDS = frozenset(
    "the and to of is it that for with my i you this was on at be are have has had me we your our they their them "
    "he she his her what how when where why which who not but so can could would should will just about from "
    "into than then there these those some any all more very also been being were did does do if or an as by "
    "up out get got like need want must it's i'm don't can't".split()
)
OTHER_STOPWORDS: dict[str, frozenset[str]] = {
    "Spanish": frozenset(
        "el la los las y que del por para con una es su al lo como más pero sus le ya muy "
        "también hay ese esta este mi tengo".split()
    ),
    "French": frozenset(
        "le la les et des du que est pour pas une sur avec ce qui dans au sont mais ou je "
        "nous vous il elle très aussi mon ma mes".split()
    ),
    "German": frozenset(
        "der die das und ist nicht ein eine zu mit sich auf für von dem den des auch es ich "
        "wir sie sehr noch nach wie aber mein".split()
    ),
    "Italian": frozenset(
        "il lo gli della che è per una con non sono ho anche come più ma questo mio mia sul nel alla".split()
    ),
    "Portuguese": frozenset(
        "o os que do da em um uma para com não mais ao dos das como mas foi ele ela muito também meu minha".split()
    ),
    "Dutch": frozenset("de het een en van dat niet zijn op te met voor ook maar ik je wij zij heel mijn".split()),
}
# Characters of Chinese function words (的, 了, 是, ...): a tenth or more of the characters of Chinese
# prose, next to none in a list of terms or a string of copied headings.
ZH_FUNCTION_CHARS = frozenset("的了是我在你有和不这就也都吗吧呢个一要会说他她们到去很好想看把被着过给让还没能")
MIN_WORDS_FOR_STOPWORDS = 8  # below this, function words say little (titles, queries)
MIN_OTHER_STOPWORD_RATIO = 0.15
MIN_ZH_FUNCTION_RATIO = 0.03
MIN_CHARS_FOR_FUNCTION_RATIO = 20


def language_problem(text: str, language: str, *, prose: bool = True) -> str | None:
    """Why `text` is not in `language` (en | zh), or None. A cheap heuristic: the share of the
    expected script, then — for prose long enough to tell — function words: English's must not be
    outnumbered by another language's; Chinese function characters must not be nearly absent.
    `prose=False` (search queries) skips the function words."""
    cjk = len(_CJK.findall(text))
    latin = _LATIN_WORD.findall(text)
    other = len(_OTHER_LETTER.findall(text))
    units = cjk + len(latin) + other  # a CJK character, a Latin word, a letter of another script
    if not units:
        return None
    if language == "zh":
        if cjk / units < 0.5:
            script = "Latin" if len(latin) >= other else "another"
            return f"expected Chinese, mostly {script} script ({cjk / units:.0%} CJK)"
        if prose and cjk >= MIN_CHARS_FOR_FUNCTION_RATIO:
            ratio = sum(1 for c in _CJK.findall(text) if c in ZH_FUNCTION_CHARS) / cjk
            if ratio < MIN_ZH_FUNCTION_RATIO:
                return f"expected Chinese, few Chinese function words ({ratio:.0%} of characters)"
        return None
    if language == "en":
        if len(latin) / units < 0.8:
            return f"expected English, {len(latin) / units:.0%} Latin-script words"
        if prose and len(latin) >= MIN_WORDS_FOR_STOPWORDS:
            words = [w.casefold() for w in latin]
            english = sum(1 for w in words if w in EN_STOPWORDS) / len(words)
            rival, ratio = max(
                ((name, sum(1 for w in words if w in stop) / len(words)) for name, stop in OTHER_STOPWORDS.items()),
                key=lambda x: x[1],
            )
            if ratio >= MIN_OTHER_STOPWORD_RATIO and ratio > english:
                return (
                    f"expected English, reads as {rival} ({ratio:.0%} of words are {rival} function words, "
                    f"{english:.0%} English ones)"
                )
        return None
    return None  # a language the heuristic does not know: not checked


# --------------------------------------------------------------------------- template echo

_CLAUSE_SPLIT = re.compile(r"[.;:!?,()\n\[\]{}\"—–]+|\s-\s")
_SUFFIXES = ("ing", "ed", "es", "s")
ROLE_LABELS = frozenset(
    {
        "user",
        "the user",
        "assistant",
        "the assistant",
        "ai",
        "ai assistant",
        "the ai assistant",
        "phone assistant",
        "the phone assistant",
        "bot",
        "system",
        "me",
        "you",
        "human",
        "用户",
        "助手",
        "助理",
        "手机助手",
        "系统",
        "我",
    }
)
# Capitalised words that make a turn on their own (not a name standing in for one).
_INTERJECTIONS = frozenset(
    "hi hello hey thanks thank you yes no yeah yep nope okay ok sure great bye goodbye cool perfect please sorry "
    "nice good morning night awesome right done got it wow oh ah hmm lol alright fine indeed exactly".split()
)
_BARE_NAME = re.compile(r"^(?:[A-Z][a-z'’.-]+)(?:\s+[A-Z][a-z'’.-]+){0,2}[.!,]?$")
_SENTENCE = re.compile(r"[^.!?。！？\n]+")
MIN_REPEATED_SENTENCE = 4  # tokens: "Thank you." twice is speech; a longer sentence twice is a loop
# A template's slot left unfilled: `<name>`, `{user}`, `[title]`, `{{...}}`, `your name here`, lorem ipsum.
_PLACEHOLDER = re.compile(
    r"<\s*[A-Za-z_][\w.-]*(?:\s[\w.-]+)?\s*>|<[A-Za-z_]\w*[\w.@-]*$|"
    r"\{\{?\s*[A-Za-z_][\w .-]*\}?\}|"
    r"\[\s*(?:name|title|content|text|user|assistant|date|item|placeholder|insert[^\]]*)\s*\]|"
    r"\b(?:lorem ipsum|your (?:name|text|title) here)\b",
    re.IGNORECASE,
)
_IDENTIFIER = re.compile(r"^[A-Z][a-z]+(?:[A-Z][a-z]+)+$")  # CamelCase, no spaces: a class name, not a title
ECHO_SHARE = 0.6  # of a field's content words, those only the request uses
MIN_ECHO_CLAUSE = 3  # tokens: a shorter clause of the request ("first person") may well occur in content


def _stem(word: str) -> str:
    """A crude stem, so that "items" and "item", "reflecting" and "reflect" meet."""
    for suffix in _SUFFIXES:
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


_STOPWORD_STEMS = frozenset(_stem(w) for w in EN_STOPWORDS)


def _norm(text: str) -> str:
    return " ".join(word_tokens(text))


_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")


def _words_of(text: str) -> list[str]:
    """Latin-script words, casefolded, CamelCase split (a schema's `MemoryDraft` is memory + draft)."""
    return [w.casefold() for w in _LATIN_WORD.findall(_CAMEL.sub(" ", text))]


class ContentRules(BaseModel):
    """What items are checked against: the expected language, the request the writer answered —
    the schema's texts (field names, titles, descriptions: placeholders a weak model copies into
    the fields) and the prompt's prose — and the persona (its name; its values, whose words are the
    person's, never counted as the request's)."""

    model_config = ConfigDict(frozen=True)

    language: str | None = Field(default=None, description="en | zh; None: not checked.")
    schema_texts: tuple[str, ...] = Field(default=(), description="Names, titles and descriptions of the schema.")
    prompt_texts: tuple[str, ...] = Field(default=(), description="The prompt's instructions and section titles.")
    names: tuple[str, ...] = Field(default=(), description="The persona's name(s): never a dialogue turn.")
    persona_text: str = Field(default="", description="The persona's values: their words are the person's.")

    _labels: frozenset[str] = PrivateAttr()
    _clauses: tuple[str, ...] = PrivateAttr()
    _grams: frozenset[tuple[str, ...]] = PrivateAttr()
    _request_words: frozenset[str] = PrivateAttr()
    _schema_words: frozenset[str] = PrivateAttr()
    _names: frozenset[str] = PrivateAttr()

    def model_post_init(self, __context: Any) -> None:
        clauses = {_norm(c) for t in self.schema_texts for c in [t, *_CLAUSE_SPLIT.split(t)]}
        clauses.discard("")
        self._labels = frozenset(clauses)
        self._clauses = tuple(
            sorted((c for c in clauses if len(c.split()) >= MIN_ECHO_CLAUSE), key=lambda c: (-len(c), c))
        )  # the longest a field repeats is named
        request = (*self.schema_texts, *self.prompt_texts)
        self._grams = frozenset(g for t in request for g in ngrams(word_tokens(t), SPAN))
        persona_words = {_stem(w) for w in word_tokens(self.persona_text)}
        request_words = {_stem(w) for t in request for w in _words_of(t) if len(w) > 2}
        self._request_words = frozenset(request_words - persona_words - _STOPWORD_STEMS)
        self._schema_words = frozenset(_stem(w) for t in self.schema_texts for w in _words_of(t) if len(w) > 2)
        names = {_norm(n) for n in self.names if _norm(n)}
        self._names = frozenset(names | {part for n in names for part in n.split() if len(part) > 1})

    def echo(self, value: str) -> str | None:
        """Why this field's text is the request rather than content, or None."""
        norm = _norm(value)
        if not norm:
            return None
        if norm in self._labels:
            return f"{_quote(value)} is the schema's own text"
        placeholder = _PLACEHOLDER.search(value)
        if placeholder:
            return f"{_quote(value)} holds a placeholder ({_quote(placeholder.group(0), 30)})"
        if _IDENTIFIER.match(value.strip()) and any(_stem(w) in self._schema_words for w in _words_of(value)):
            return f"{_quote(value)} is an identifier made of the schema's words"
        padded = f" {norm} "
        for clause in self._clauses:
            if f" {clause} " in padded:
                return f"{_quote(value)} repeats the schema's {_quote(clause)}"
        if any(g in self._grams for g in ngrams(norm.split(), SPAN)):
            return f"{_quote(value)} copies the prompt"
        content = [w for w in _words_of(value) if len(w) > 2 and _stem(w) not in _STOPWORD_STEMS]
        if len(content) >= 3:
            about_request = [w for w in content if _stem(w) in self._request_words]
            if len(about_request) / len(content) >= ECHO_SHARE:
                return (
                    f"{_quote(value)} is about the request, not the person ({', '.join(dict.fromkeys(about_request))})"
                )
        return None

    def stand_in_turn(self, value: str) -> str | None:
        """Why a dialogue turn (or a note) is a name or a role label rather than something said, or None."""
        norm = _norm(value)
        if norm in ROLE_LABELS:
            return f"{_quote(value)} is a role label"
        if norm in self._names:
            return f"{_quote(value)} is the persona's name"
        stripped = value.strip()
        if _BARE_NAME.match(stripped) and not all(w in _INTERJECTIONS for w in norm.split()):
            return f"{_quote(value)} is a bare name"
        return None


def _repeated_sentence(text: str) -> str | None:
    """A sentence of some length a field says twice (a model looping), or None."""
    seen: set[str] = set()
    for sentence in _SENTENCE.findall(text):
        norm = _norm(sentence)
        if len(norm.split()) >= MIN_REPEATED_SENTENCE or (len(norm) >= 8 and _CJK.search(norm)):
            if norm in seen:
                return sentence.strip()
            seen.add(norm)
    return None


def _quote(text: str, width: int = 60) -> str:
    line = " ".join(text.split())
    return repr(line if len(line) <= width else line[: width - 1] + "…")


# --------------------------------------------------------------------------- items


def item_fields(item: ContextItem) -> list[tuple[str, str]]:
    """An item's text fields as (name, text), in reading order."""
    if isinstance(item, ContextMemory):
        return [("title", item.title), ("content", item.content)]
    if isinstance(item, ContextDialogue):
        return [("title", item.title)] + [(f"turn {i + 1} ({m.role})", m.content) for i, m in enumerate(item.messages)]
    return [(f"query {i + 1}", q.query) for i, q in enumerate(item.queries)] + [
        (f"query {i + 1} result", f"{c.title} {c.snippet or ''}".strip())
        for i, q in enumerate(item.queries)
        for c in q.clicked
    ]


def item_text(item: ContextItem) -> str:
    return "\n".join(text for _, text in item_fields(item) if text)


def item_problems(item: ContextItem, rules: ContentRules) -> list[str]:
    """The content checks of one item on its own (duplicates across items: `content_problems`)."""
    problems: list[str] = []
    for name, text in item_fields(item):
        if not _norm(text):
            if name != "title":  # a title may be left out
                problems.append(f"empty: {name}")
            continue
        echo = rules.echo(text)
        if echo:
            problems.append(f"template echo: {name} {echo}")
        repeated = _repeated_sentence(text)
        if repeated:
            problems.append(f"duplicate: {name} says {_quote(repeated)} twice")
    if isinstance(item, ContextMemory) and _norm(item.content):
        stand_in = rules.stand_in_turn(item.content)
        if stand_in:
            problems.append(f"name or role as content: content {stand_in}")
    if isinstance(item, ContextDialogue):
        for i, message in enumerate(item.messages):
            stand_in = rules.stand_in_turn(message.content) if _norm(message.content) else None
            if stand_in:
                problems.append(f"name or role as content: turn {i + 1} ({message.role}) {stand_in}")
        said = [_norm(m.content) for m in item.messages if m.role == "user"]
        if not said:
            problems.append("empty: no user turn")
        elif len(said) != len(set(said)):
            problems.append("duplicate: the same user turn twice in one dialogue")
        for before, reply in zip(item.messages, item.messages[1:]):
            if (
                before.role == "user"
                and reply.role == "assistant"
                and _norm(reply.content)
                and _norm(reply.content) == _norm(before.content)
            ):
                problems.append("duplicate: the assistant repeats the user's turn")
                break
    if rules.language:
        wrong = language_problem(item_text(item), rules.language, prose=not isinstance(item, ContextSearch))
        if wrong:
            problems.append(f"language: {wrong}")
    return problems


# two items whose MiniLM sentence vectors are at least this similar (cosine) say the same thing in
# other words: on agents/user_sim/history_checks.jsonl the reworded repeats score 0.72-0.94 and the
# closest distinct items (two basketball games, two notes on the same ward) at most 0.55
NEAR_DUPLICATE_COSINE = 0.65
PASSAGE = 10  # words in a row two items share when one repeats a passage of the other
PASSAGE_CJK = 20  # characters, for Chinese text (a word is one to three of them)
SHINGLE = 3  # words per shingle (characters, for Chinese) of the near-duplicate check
NEAR_DUPLICATE = 0.6  # Jaccard similarity of two items' shingles at which one is the other, varied
MIN_SHINGLES = 4  # items shorter than this are left to the exact check
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


class Duplicates:
    """The items seen so far, to tell whether another repeats one of them: the same text once
    normalised (case, spacing, punctuation, and every number read as a number: "5 km" and "7 km"
    are one text), a passage of it (`PASSAGE` words in a row; a weak model writes variations on
    one opening, a person rarely repeats ten words), nearly all of it: the Jaccard similarity of
    their `SHINGLE`-word shingles at least `NEAR_DUPLICATE` (the same sentences reordered, or with
    a word or a number changed), or — given each item's sentence vector (`vectors`, unit length,
    by item id) — the same thing in other words: cosine at least `NEAR_DUPLICATE_COSINE`."""

    def __init__(self, vectors: Mapping[str, np.ndarray] | None = None) -> None:
        self._exact: dict[str, str] = {}
        self._passages: dict[tuple[str, ...], str] = {}
        self._shingles: list[tuple[str, frozenset[tuple[str, ...]]]] = []
        self._vectors = vectors or {}
        self._kept: list[str] = []  # ids of the items added that have a vector

    @staticmethod
    def _key(item: ContextItem) -> tuple[str, set[tuple[str, ...]], frozenset[tuple[str, ...]]]:
        tokens = ["0" if _NUMBER.fullmatch(t) else t for t in word_tokens(item_text(item))]
        cjk = sum(1 for t in tokens if _CJK.match(t))
        chinese = cjk * 2 > len(tokens)
        passages = set(ngrams(tokens, PASSAGE_CJK if chinese else PASSAGE))
        shingles = frozenset(ngrams(tokens, SHINGLE * 2 if chinese else SHINGLE))
        return " ".join(tokens), passages, shingles

    def of(self, item: ContextItem, item_id: str | None = None) -> str | None:
        """The id of the earlier item this one (`item_id`, for its vector) repeats, or None."""
        text, passages, shingles = self._key(item)
        if text in self._exact:
            return self._exact[text]
        passage = next((self._passages[p] for p in passages if p in self._passages), None)
        if passage is not None:
            return passage
        if len(shingles) >= MIN_SHINGLES:
            for earlier_id, earlier in self._shingles:
                if len(shingles & earlier) >= NEAR_DUPLICATE * len(shingles | earlier):
                    return earlier_id
        vector = self._vectors.get(item_id) if item_id is not None else None
        if vector is not None and self._kept:
            similar = np.stack([self._vectors[k] for k in self._kept]) @ vector
            best = int(np.argmax(similar))
            if similar[best] >= NEAR_DUPLICATE_COSINE:
                return self._kept[best]
        return None

    def add(self, item_id: str, item: ContextItem) -> None:
        if item_id in self._vectors:
            self._kept.append(item_id)
        text, passages, shingles = self._key(item)
        if text:
            self._exact.setdefault(text, item_id)
        for passage in passages:
            self._passages.setdefault(passage, item_id)
        if len(shingles) >= MIN_SHINGLES:
            self._shingles.append((item_id, shingles))


def person_text(item: ContextItem) -> str:
    """What the person says in an item: a note's title and text, their own turns, their searches."""
    if isinstance(item, ContextMemory):
        return f"{item.title}. {item.content}"
    if isinstance(item, ContextDialogue):
        return "\n".join(m.content for m in item.messages if m.role == "user")
    return "\n".join(q.query for q in item.queries)


def sentence_vectors(items: Sequence[tuple[str, ContextItem]], embed: Embed | None) -> dict[str, np.ndarray]:
    """Per item id, the unit sentence vector of what the person says in it ({} without an embedder).
    Items the offline scripted model wrote (they carry its dry-run mark: lists of the persona's
    words, alike by construction) get none: they are compared word by word only (`meaning_checked`)."""
    written = [(item_id, item) for item_id, item in items if DRY_RUN_MARK not in person_text(item)]
    if embed is None or not written:
        return {}
    vectors = np.asarray(embed([person_text(item) for _, item in written]), dtype=float)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return {item_id: vector for (item_id, _), vector in zip(written, vectors)}


def content_problems(
    items: Sequence[tuple[str, ContextItem]],
    rules: ContentRules,
    embed: Embed | None = None,
    *,
    vectors: Mapping[str, np.ndarray] | None = None,
) -> dict[str, list[str]]:
    """Per item id, what fails its content checks (items that pass are left out). An item that
    repeats an earlier one is a duplicate of the first (in other words too, given `embed` or the
    items' `vectors`)."""
    seen = Duplicates(vectors if vectors is not None else sentence_vectors(items, embed))
    out: dict[str, list[str]] = {}
    for item_id, item in items:
        problems = item_problems(item, rules)
        earlier = seen.of(item, item_id)
        if earlier is not None:
            problems.append(f"duplicate: of {earlier}")
        else:
            seen.add(item_id, item)
        if problems:
            out[item_id] = problems
    return out


def problem_kind(problem: str) -> str:
    return problem.split(":", 1)[0]


# --------------------------------------------------------------------------- the record


class ProtocolFigures(BaseModel):
    items: int
    memories: int
    dialogues: int
    searches: int
    counted_items: int = Field(description="Items that passed the content checks (and, with attribution, were cited).")
    counted_by: Literal["labels", "attribution"] = Field(
        description="labels: an item counts for the trait it records; attribution: for each facet the reversibility "
        "check's inverse pass cited it for."
    )
    conversational_share: float = Field(description="Dialogues (and chat sessions) over the counted items.")
    preference_tags: int
    items_per_tag: dict[str, int] = Field(description="Counted items per preference tag.")
    tags_below_minimum: list[str] = Field(description=f"Preference tags with fewer than {MIN_ITEMS_PER_TAG} items.")
    unlinked_items: list[str] = Field(description="Items with no trait, or one that is not a facet of this persona.")
    content_failures: dict[str, list[str]] = Field(
        default_factory=dict, description="Per item id, the content checks it fails."
    )
    content_failure_counts: dict[str, int] = Field(default_factory=dict, description="Items failing each check.")
    traits_covered: int = Field(description="Persona facets at least one counted item reflects.")
    traits_total: int
    meaning_checked: int = Field(
        default=0,
        description="Items compared by meaning (sentence vectors) for near-duplicates; the others (no embedder, or "
        "the scripted model's dry-run word lists) by their words only.",
    )
    verbatim_items: list[str] = Field(
        description=f"Items repeating {SPAN}+ consecutive words of a persona value, or a copy of one lightly edited."
    )
    problems: list[str]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ok(self) -> bool:
        return not self.problems


# a persona value copied with light edits (a word put in here and there): runs of at least
# COPIED_RUN of its words, in order, that add up to COPIED_WORDS
COPIED_RUN = 3
COPIED_WORDS = 9


def copied_words(text: list[str], value: list[str]) -> int:
    """How many words of `value` `text` repeats in order, in runs of COPIED_RUN words or more."""
    blocks = SequenceMatcher(None, value, text, autojunk=False).get_matching_blocks()
    return sum(block.size for block in blocks if block.size >= COPIED_RUN)


def copied_items(items: Sequence[tuple[str, ContextItem]], values: Sequence[str]) -> list[str]:
    """Ids of the items that repeat a persona value: SPAN consecutive words of it, or COPIED_WORDS
    of its words in order with a few put in between (a copy lightly edited)."""
    tokenized = [(tokens, set(tokens)) for tokens in (word_tokens(v) for v in values) if tokens]
    grams = {g for tokens, _ in tokenized for g in ngrams(tokens, SPAN)}
    out = []
    for item_id, item in items:
        tokens = word_tokens(item_text(item))
        words = set(tokens)
        if any(g in grams for g in ngrams(tokens, SPAN)) or any(
            len(value) >= COPIED_WORDS
            and len(words & vocabulary) >= COPIED_RUN  # cheap first: enough words in common at all
            and copied_words(tokens, value) >= COPIED_WORDS
            for value, vocabulary in tokenized
        ):
            out.append(item_id)
    return out


def persona_names(attributes: dict[str, Any]) -> list[str]:
    """The persona's name facet(s) (`... > Name`, `... > 姓名`)."""
    return [
        t.value
        for t in persona_traits(attributes)
        if t.path.rsplit(">", 1)[-1].strip().casefold() in ("name", "姓名", "名字")
    ]


def content_rules(
    attributes: dict[str, Any],
    language: str | None,
    *,
    schema_texts: Iterable[str] = (),
    prompt_texts: Iterable[str] = (),
) -> ContentRules:
    """The content rules of one persona's items, given the request its writer answered."""
    return ContentRules(
        language=language,
        schema_texts=tuple(schema_texts),
        prompt_texts=tuple(prompt_texts),
        names=tuple(persona_names(attributes)),
        persona_text=render_persona(attributes),
    )


def record_items(record: ContextRecord) -> list[tuple[str, ContextItem]]:
    """(id, item) of every item, ids as the pdr loader names items without one."""
    groups: tuple[tuple[str, Sequence[ContextItem]], ...] = (
        ("memory", record.memories),
        ("dialogue", record.dialogues),
        ("search", record.searches),
    )
    return [(item.id or f"{kind}-{i}", item) for kind, group in groups for i, item in enumerate(group)]


def _listed(ids: list[str], limit: int = 5) -> str:
    return ", ".join(ids[:limit]) + (" ..." if len(ids) > limit else "")


def check_protocol(
    attributes: dict[str, Any],
    record: ContextRecord,
    *,
    rules: ContentRules | None = None,
    attribution: dict[str, list[str]] | None = None,
    min_items_per_tag: int = MIN_ITEMS_PER_TAG,
    contradicted: dict[str, str] | None = None,
    embed: Embed | None = None,
) -> ProtocolFigures:
    """The record's content checks (`rules`; without them only empty and duplicate items are
    found, and contradictions of facts the persona fixes) and protocol figures. `attribution`: per
    facet path, the ids of the items the reversibility check's inverse pass cited for it; items then
    count for those facets. `contradicted`: per item id, why a checker model found it contradicts
    the persona (`agents.user_sim.contradiction.judge_contradictions`). `embed`: sentence vectors
    for texts (the local MiniLM, `agents.models.embeddings`), so a repeat in other words is a
    duplicate too."""
    rules = rules or ContentRules()
    traits = persona_traits(attributes)
    paths = {t.path for t in traits}
    items = record_items(record)
    vectors = sentence_vectors(items, embed)
    failures = content_problems(items, rules, vectors=vectors)
    said = [(i, person_text(item)) for i, item in items]
    against = {**offline_contradictions(attributes, said), **(contradicted or {})}
    for item_id, why in against.items():
        failures.setdefault(item_id, []).append(f"contradiction: {why}")
    passing = [(i, item) for i, item in items if i not in failures]
    if attribution is None:
        counted = passing
        facets_of = {i: [item.trait] for i, item in passing if item.trait in paths}
    else:
        cited: dict[str, list[str]] = {}
        for facet, ids in attribution.items():
            for i in ids:
                if facet in paths:
                    cited.setdefault(i, []).append(facet)
        counted = [(i, item) for i, item in passing if i in cited]
        facets_of = {i: list(dict.fromkeys(cited[i])) for i, _ in counted}
    linked = Counter(f for facets in facets_of.values() for f in facets)
    unlinked = (
        [i for i, item in items if item.trait not in paths]
        if attribution is None
        else [i for i, _ in passing if i not in cited]
    )
    tags = {t.path: linked.get(t.path, 0) for t in preference_tags(traits)}
    below = [path for path, n in tags.items() if n < min_items_per_tag]
    talk = sum(1 for _, item in counted if isinstance(item, ContextDialogue))
    share = talk / len(counted) if counted else 0.0
    verbatim = copied_items(items, [t.value for t in traits])
    kinds: dict[str, list[str]] = {}
    for item_id, found in failures.items():
        for kind in dict.fromkeys(problem_kind(p) for p in found):
            kinds.setdefault(kind, []).append(item_id)

    problems = []
    if not items:
        problems.append("no items")
    for kind in CONTENT_CHECKS:
        if kind in kinds:
            first = kinds[kind][0]
            example = next(p for p in failures[first] if problem_kind(p) == kind).split(":", 1)[1].strip()
            problems.append(f"{kind} in {len(kinds[kind])} item(s): {_listed(kinds[kind])} (e.g. {first}: {example})")
    if items and len(verbatim) > MAX_VERBATIM_SHARE * len(items):
        problems.append(
            f"verbatim copy: {len(verbatim)} of {len(items)} items ({len(verbatim) / len(items):.0%}) repeat "
            f"{SPAN}+ consecutive words of the persona's own values (at most {MAX_VERBATIM_SHARE:.0%}): "
            f"{_listed(verbatim)}"
        )
    if below:
        problems.append(
            f"{len(below)} preference tag(s) with fewer than {min_items_per_tag} "
            f"{'cited ' if attribution is not None else ''}items that pass the content checks: "
            f"{', '.join(below)}"
        )
    low, high = CONVERSATIONAL_RANGE
    if counted and not low <= share <= high:
        problems.append(f"conversational share {share:.0%} of the counted items is outside {low:.0%}-{high:.0%}")
    if items and not counted:
        problems.append(
            "no item passes the content checks"
            + (" and was cited by the inverse pass" if attribution is not None else "")
        )
    if unlinked:
        what = (
            "cited by the inverse pass for no facet"
            if attribution is not None
            else "not linked to a trait of this persona"
        )
        problems.append(f"{len(unlinked)} item(s) {what}: {_listed(unlinked)}")
    return ProtocolFigures(
        items=len(items),
        memories=len(record.memories),
        dialogues=len(record.dialogues),
        searches=len(record.searches),
        counted_items=len(counted),
        counted_by="labels" if attribution is None else "attribution",
        conversational_share=round(share, 4),
        preference_tags=len(tags),
        items_per_tag=tags,
        tags_below_minimum=below,
        unlinked_items=unlinked,
        content_failures=failures,
        content_failure_counts={k: len(v) for k, v in kinds.items()},
        traits_covered=len(linked),
        traits_total=len(traits),
        verbatim_items=verbatim,
        meaning_checked=len(vectors),
        problems=problems,
    )
