"""Own-user facts in a control's answer: the leak check that counterfactual controls make possible.

A control episode (`benchmarks.controls`) answers a case with another user's context, or none. Its
answer should then know nothing of the case's own user beyond what the query says; one that
mentions a fact of that user — a persona facet value, something from their history — which the
context it was given did not hold got it from somewhere outside the memory (a cache keyed too
loosely, a store shared across users, a prompt built from the wrong case).

Facts are matched as phrases, not words. Each own fact (a persona facet's value; a history event's
user-side text: a note, the user's turns of a chat, their searches) is cut into segments at
sentence punctuation, and each segment into word n-grams (2 to 5 words, casefolded, NFKC) that
neither start nor end with a function word. A phrase counts only when it is specific:

- it holds at least two content words (not function words; three letters or more, or a number),
  and either one of them is distinctive (holds a digit, or was capitalised inside its sentence:
  a name, a place) or it holds four content words;
- it belongs to this user alone: no other user of the benchmark says it anywhere among their facts
  (a phrase two users share says nothing about which of them the answer knows).

A phrase leaks when the answer holds it and none of what the system was legitimately given does:
the context it saw (the control's history and persona, and what its memory recalled), the query
(with the conversation so far), what the simulated user said in the episode, and the sources it
cites. The check reports each leaked fact once with the phrase that gave it away.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from atelier.benchmarks.case import Case, ChatSession, HistoryEvent, SearchSession

MIN_WORDS, MAX_WORDS = 2, 5
MIN_CONTENT_CHARS = 3
PLAIN_CONTENT_WORDS = 4  # a phrase with no name and no number needs this many content words

# English function words and the commonest filler: a phrase made of them is no fact
FUNCTION_WORDS = frozenset(
    """a an the and or but nor so yet if then than as at by for from in into of off on onto out over to up
    with within without about above after again against all am any are aren't be because been before being
    below between both can can't cannot could couldn't did didn't do does doesn't doing don't down during each
    few further had hadn't has hasn't have haven't having he he'd he'll he's her here here's hers herself him
    himself his how how's i i'd i'll i'm i've is isn't it it's its itself let's me more most mustn't my myself
    no not now once only other ought our ours ourselves own same shan't she she'd she'll she's should
    shouldn't some such that that's their theirs them themselves there there's these they they'd they'll
    they're they've this those through too under until very was wasn't we we'd we'll we're we've were
    weren't what what's when when's where where's which while who who's whom why why's will would wouldn't
    you you'd you'll you're you've your yours yourself yourselves also just like get got really much many
    one two three four five six seven eight nine ten first new good well way make made want wants need
    needs use used using per via etc e.g i.e""".split()
)
# words, numbers with their separators (9.5, 1,200, 190–210k) and apostrophes kept inside a token
_TOKEN = re.compile(r"[^\W_]+(?:['’.,\-–][^\W_]+)*")
_SEGMENT = re.compile(r"[.!?;:\n|()\[\]{}\"“”]+")


@dataclass(frozen=True)
class Fact:
    """Something known about one user: where it is from, and its text."""

    source: str  # "persona: Basic Attributes > ... > Hometown" or "history: u1:m01"
    text: str


@dataclass(frozen=True)
class Leak:
    source: str
    phrase: str


def normalized(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold().replace("’", "'")


def _is_content(word: str) -> bool:
    return word not in FUNCTION_WORDS and (len(word) >= MIN_CONTENT_CHARS or any(c.isdigit() for c in word))


def _segments(text: str) -> list[list[tuple[str, bool]]]:
    """Each sentence-like segment as (casefolded word, distinctive) pairs: a word is distinctive when
    it holds a digit, or is capitalised and not the segment's first word."""
    out = []
    for segment in _SEGMENT.split(unicodedata.normalize("NFKC", text)):
        words = _TOKEN.findall(segment)
        out.append(
            [
                (normalized(w), any(c.isdigit() for c in w) or (i > 0 and w[:1].isupper() and w.lower() != "i"))
                for i, w in enumerate(words)
            ]
        )
    return out


def specific_phrases(text: str) -> set[str]:
    """The phrases of `text` specific enough to stand for a fact (see the module docstring)."""
    found: set[str] = set()
    for words in _segments(text):
        for size in range(MIN_WORDS, MAX_WORDS + 1):
            for start in range(len(words) - size + 1):
                gram = words[start : start + size]
                if gram[0][0] in FUNCTION_WORDS or gram[-1][0] in FUNCTION_WORDS:
                    continue
                content = [(w, d) for w, d in gram if _is_content(w)]
                distinct = any(d for w, d in content)
                if len(content) >= 2 and (distinct or len(content) >= PLAIN_CONTENT_WORDS):
                    found.add(" ".join(w for w, _ in gram))
    return found


def all_phrases(texts: Iterable[str]) -> set[str]:
    """Every word n-gram (2 to 5 words) of `texts`, as `specific_phrases` spells them: what a text holds."""
    found: set[str] = set()
    for text in texts:
        for words in _segments(text):
            plain = [w for w, _ in words]
            for size in range(MIN_WORDS, MAX_WORDS + 1):
                found.update(" ".join(plain[i : i + size]) for i in range(len(plain) - size + 1))
    return found


def _user_side(event: HistoryEvent) -> str:
    """What an event says about its user: a chat's user turns, a search session's queries, else its text."""
    if isinstance(event, ChatSession):
        return "\n".join(m.content for m in event.messages if m.role == "user")
    if isinstance(event, SearchSession):
        return "\n".join(q.query for q in event.queries)
    return event.render()


def user_facts(case: Case) -> list[Fact]:
    """The facts of the case's user: each persona facet's value, each history event's user-side text."""
    facts = [Fact(f"persona: {path}", value) for path, value in (case.persona.facets() if case.persona else [])]
    facts += [Fact(f"history: {event.id}", _user_side(event)) for event in case.history if event.kind != "persona"]
    return facts


class FactIndex:
    """Every user's specific phrases, each with the users who have it, over a benchmark's cases."""

    def __init__(self, cases: Iterable[Case]) -> None:
        self.facts: dict[str, list[tuple[Fact, set[str]]]] = {}
        owners: dict[str, set[str]] = {}
        for case in sorted(cases, key=lambda c: c.id):
            if case.user_id in self.facts:
                continue  # a user's facts come from their first case (cases of one user share them)
            facts = user_facts(case)
            self.facts[case.user_id] = [(fact, specific_phrases(fact.text)) for fact in facts]
            # whoever says a phrase at all shares it (`European cities` opening one user's sentence is
            # the same words as in another's, specific or not)
            for phrase in all_phrases(fact.text for fact in facts):
                owners.setdefault(phrase, set()).add(case.user_id)
        self.owners = owners

    def own_phrases(self, user: str) -> list[tuple[Fact, set[str]]]:
        """The user's facts, each with its phrases no other user has."""
        return [
            (fact, {p for p in phrases if self.owners.get(p) == {user}}) for fact, phrases in self.facts.get(user, [])
        ]


def leaks(index: FactIndex, user: str, answer: str, given: Sequence[str]) -> list[Leak]:
    """The facts of `user` that `answer` mentions and nothing in `given` holds, each with one phrase
    (the longest) that gave it away; facts in the order the user's facts come."""
    said = all_phrases([answer])
    known = all_phrases(given)
    out = []
    for fact, phrases in index.own_phrases(user):
        # a phrase whose specific part was given (`pharmacy in leicester` in `small pharmacy in leicester`) is no leak
        leaked = sorted(
            (p for p in phrases & said if not any(part in known for part in _parts(p) if part in phrases)),
            key=lambda p: (-len(p), p),
        )
        if leaked:
            out.append(Leak(fact.source, leaked[0]))
    return out


def _parts(phrase: str) -> list[str]:
    """The phrase and every run of two or more of its words."""
    words = phrase.split(" ")
    return [" ".join(words[i:j]) for i in range(len(words)) for j in range(i + 2, len(words) + 1)]
