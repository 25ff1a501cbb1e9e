"""The gold boundary on the simulated user's side: nothing of `Case.gold` leaves it verbatim.

The simulator is grounded on the hidden gold need (like a real user, it knows what it wants), so
its words reach the system under test. What it may pass on is what a user would say in their own
words; what it must not pass on is gold *text*. `GoldGuard.scrub` enforces that in code, whatever
the model wrote:

- a run of `SPAN` or more consecutive words copied from a gold text is cut, unless the same run
  also appears in what the user legitimately shares with the system (the query, the persona, the
  history, the assistant's own questions) — rubric evidence often quotes the history;
- a word of a gold text that contains a digit (a figure, an id, a code) and appears nowhere in
  that legitimate material is cut as well: such tokens are the judge-checkable facts a verbatim
  leak carries, and a model copying one word at a time would slip past the run rule.

Cut spans become `…`. Every gold string is covered, whatever field of `Gold` holds it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from atelier.benchmarks.case import Case

SPAN = 6
ELLIPSIS = "…"
# A word (letters/digits joined by -'.:/), or one CJK character: Chinese text has no spaces.
_CJK = "\u3400-\u9fff\uf900-\ufaff"
_TOKEN = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+(?:[-'’.:/_][^\W_{_CJK}]+)*", re.UNICODE)


def word_tokens(text: str) -> list[str]:
    return [m.group(0).casefold() for m in _TOKEN.finditer(text)]


def ngrams(tokens: list[str], n: int) -> Iterator[tuple[str, ...]]:
    return (tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def gold_strings(value: Any) -> list[str]:
    """Every string anywhere in a gold annotation (dict keys included: claim maps key on claims)."""
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in gold_strings(k) + gold_strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in gold_strings(v)]
    return []


@dataclass(frozen=True)
class Scrubbed:
    text: str
    redacted: int  # spans cut


class GoldGuard:
    """Built once per case; `scrub` any text the simulator is about to send to the system."""

    def __init__(self, case: Case) -> None:
        gold = [word_tokens(s) for s in gold_strings(case.gold)]
        self._gold_grams = {g for tokens in gold for g in ngrams(tokens, SPAN)}
        self._gold_words = {t for tokens in gold for t in tokens if any(c.isdigit() for c in t)}
        shared = [case.query.text, *(e.render() for e in case.history)]
        if case.persona is not None:
            shared += [f"{path} {value}" for path, value in case.persona.facets()]
        self._shared_tokens: set[str] = set()
        self._shared_grams: set[tuple[str, ...]] = set()
        self._share(shared)

    def _share(self, texts: Iterable[str]) -> None:
        for text in texts:
            tokens = word_tokens(text)
            self._shared_tokens.update(tokens)
            self._shared_grams.update(ngrams(tokens, SPAN))

    def scrub(self, text: str, also_shared: Iterable[str] = ()) -> Scrubbed:
        """`text` with gold copies cut. `also_shared`: more legitimate material (e.g. the questions asked)."""
        extra_tokens: set[str] = set()
        extra_grams: set[tuple[str, ...]] = set()
        for item in also_shared:
            tokens = word_tokens(item)
            extra_tokens.update(tokens)
            extra_grams.update(ngrams(tokens, SPAN))
        matches = list(_TOKEN.finditer(text))
        words = [m.group(0).casefold() for m in matches]
        cut = [False] * len(words)
        for i, gram in enumerate(ngrams(words, SPAN)):
            if gram in self._gold_grams and gram not in self._shared_grams and gram not in extra_grams:
                cut[i : i + SPAN] = [True] * SPAN
        for i, word in enumerate(words):
            if word in self._gold_words and word not in self._shared_tokens and word not in extra_tokens:
                cut[i] = True
        if not any(cut):
            return Scrubbed(text, 0)
        out, last, spans, i = [], 0, 0, 0
        while i < len(words):
            if not cut[i]:
                i += 1
                continue
            j = i
            while j + 1 < len(words) and cut[j + 1]:
                j += 1
            out.append(text[last : matches[i].start()])
            out.append(ELLIPSIS)
            last, spans, i = matches[j].end(), spans + 1, j + 1
        out.append(text[last:])
        return Scrubbed(re.sub(r"[ \t]{2,}", " ", "".join(out)).strip(), spans)
