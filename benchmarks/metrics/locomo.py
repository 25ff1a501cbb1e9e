"""LoCoMo QA scores as LoCoMo's own evaluation computes them (snap-research/locomo,
`task_eval/evaluation.py`, `eval_question_answering`).

Answers are normalised (lower case, commas and punctuation removed, the words a/an/the/and dropped,
whitespace collapsed), stemmed with the Porter stemmer, and compared by token F1:
- category 1 (multi-hop): the prediction and the answer are split on commas; each gold part takes its
  best F1 over the predicted parts, and the score is the mean over the gold parts;
- categories 2, 3, 4: token F1, with a category 3 answer cut at its first ';';
- category 5 (adversarial): 1 when the prediction says the thing is not mentioned
  ('not mentioned' or 'no information available' in it), else 0.
The Porter stemmer is PyStemmer's `porter` (the original algorithm); LoCoMo used NLTK's, whose
default mode adds a few extensions, so rare words can stem differently.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from typing import Literal

from pydantic import Field

from atelier.benchmarks.metrics.models import MetricInput, MetricResult

Category = Literal[1, 2, 3, 4, 5]
REFUSAL_MARKERS = ("no information available", "not mentioned")
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


@lru_cache(maxsize=1)
def _stemmer():
    import Stemmer

    return Stemmer.Stemmer("porter")


def normalize_answer(text: str) -> str:
    text = text.replace(",", "").lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _tokens(text: str) -> list[str]:
    return _stemmer().stemWords(normalize_answer(text).split())


def token_f1(prediction: str, answer: str) -> float:
    predicted, gold = _tokens(prediction), _tokens(answer)
    same = sum((Counter(predicted) & Counter(gold)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def multi_answer_f1(prediction: str, answer: str) -> float:
    """Category 1: mean over the comma-separated gold parts of the best F1 over the predicted parts."""
    predictions = [p.strip() for p in prediction.split(",")]
    golds = [g.strip() for g in answer.split(",")]
    return math.fsum(max(token_f1(p, g) for p in predictions) for g in golds) / len(golds)


def refuses(prediction: str) -> bool:
    lowered = prediction.lower()
    return any(marker in lowered for marker in REFUSAL_MARKERS)


def locomo_f1(prediction: str, answer: str, category: int) -> float:
    """The LoCoMo score of one prediction (see the module docstring for the per-category rules)."""
    if category == 5:
        return 1.0 if refuses(prediction) else 0.0
    if category == 1:
        return multi_answer_f1(prediction, answer)
    if category == 3:
        answer = answer.split(";")[0].strip()
    if category in (2, 3, 4):
        return token_f1(prediction, answer)
    raise ValueError(f"LoCoMo categories are 1 to 5, got {category}")


class LocomoItem(MetricInput):
    prediction: str = Field(description="The system's answer.")
    answer: str = Field(default="", description="The reference answer (ignored for category 5).")
    category: Category = Field(description="1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial.")


class LocomoInput(MetricInput):
    items: list[LocomoItem] = Field(min_length=1, description="One entry per QA item answered.")


class LocomoResult(MetricResult):
    n: int
    f1: float = Field(description="Mean score over all items.")
    per_category: dict[str, float] = Field(description="Mean score per category number.")
    scores: list[float] = Field(description="Each item's score, in input order.")


def locomo_scores(judged: LocomoInput) -> LocomoResult:
    scores = [locomo_f1(i.prediction, i.answer, i.category) for i in judged.items]
    categories = sorted({i.category for i in judged.items})
    return LocomoResult(
        n=len(scores),
        f1=math.fsum(scores) / len(scores),
        per_category={str(c): _mean([s for s, i in zip(scores, judged.items) if i.category == c]) for c in categories},
        scores=scores,
    )


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)
