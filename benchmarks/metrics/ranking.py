"""Ranking metrics — nDCG@k, P@k, R@k and (mean) reciprocal rank — computed by trec_eval itself
(ir-measures over pytrec_eval, trec_eval 9.x), so the figures are trec_eval's by construction.

Conventions (those of trec_eval's `ndcg_cut`, `P`, `recall` and `recip_rank`):
- nDCG@k uses linear gains (the relevance grade itself) and the log2(rank + 1) discount:
  DCG@k = sum_{i=1..k} grade_i / log2(i + 1). The ideal DCG sorts every judged grade of the query,
  retrieved or not. Grades <= 0 and unjudged documents give no gain. nDCG is 0 when no document of
  the query has a positive grade.
- A document is relevant for P@k, R@k and RR when its grade >= `relevance_level` (trec_eval `-l`, 1).
  P@k divides by k even when fewer than k documents were retrieved; R@k is 0 without relevant
  documents; RR is 1 / rank of the first relevant document, 0 if none is retrieved.
- A run given as scores is ranked as trec_eval ranks it: by score descending, ties broken by
  document id in *descending* string order. An explicit ranking is scored in its given order.
- A query that retrieved nothing, or has no judgments, scores 0 on every measure.
Means over queries ("all" in trec_eval) average the per-query values of the queries given.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import ir_measures
from pydantic import Field, FiniteFloat, model_validator

from atelier.benchmarks.metrics.models import MetricInput, MetricResult

DEFAULT_CUTOFFS: tuple[int, ...] = (1, 3, 5, 10)


def as_run(ranking: Sequence[str]) -> dict[str, float]:
    """An explicit ranking as trec_eval scores: strictly descending, so its order is kept."""
    return {doc: float(len(ranking) - rank) for rank, doc in enumerate(ranking)}


def _repeated(items: Iterable[str]) -> list[str]:
    return sorted(item for item, count in Counter(items).items() if count > 1)


def _check_cutoffs(cutoffs: Sequence[int]) -> None:
    bad = [k for k in cutoffs if k < 1]
    if bad:
        raise ValueError(f"cutoffs must be >= 1, got {bad}")


class RankedQuery(MetricInput):
    """One query: graded judgments and the system's ranking, as an ordered list or as scores."""

    query_id: str = Field(min_length=1, description="Query identifier, unique within the input.")
    qrels: dict[str, int] = Field(description="Relevance grade per document id (0 = judged not relevant).")
    ranking: list[str] | None = Field(default=None, description="Retrieved document ids, best first.")
    scores: dict[str, FiniteFloat] | None = Field(
        default=None, description="Retrieval score per document id; ranked as trec_eval ranks a run."
    )

    @model_validator(mode="after")
    def _one_ranking(self) -> RankedQuery:
        if (self.ranking is None) == (self.scores is None):
            raise ValueError("give exactly one of 'ranking' (ordered ids) or 'scores' (id -> score)")
        if self.ranking is not None:
            duplicates = _repeated(self.ranking)
            if duplicates:
                raise ValueError(f"ranking lists document(s) more than once: {', '.join(duplicates)}")
        return self

    def run(self) -> dict[str, float]:
        """The query's run as trec_eval reads it: a score per document."""
        return as_run(self.ranking) if self.ranking is not None else dict(self.scores or {})


class RankingInput(MetricInput):
    queries: list[RankedQuery] = Field(min_length=1, description="The queries to evaluate.")
    cutoffs: list[int] = Field(
        default_factory=lambda: list(DEFAULT_CUTOFFS), min_length=1, description="Cutoffs k for nDCG@k, P@k and R@k."
    )
    relevance_level: int = Field(default=1, description="Minimum grade counted as relevant for P, R and RR.")

    @model_validator(mode="after")
    def _valid_cutoffs_and_ids(self) -> RankingInput:
        _check_cutoffs(self.cutoffs)
        duplicates = _repeated(q.query_id for q in self.queries)
        if duplicates:
            raise ValueError(f"query_id(s) listed more than once: {', '.join(duplicates)}")
        return self


class QueryRankingScores(MetricResult):
    ndcg: dict[int, float] = Field(description="nDCG@k per cutoff k.")
    precision: dict[int, float] = Field(description="P@k per cutoff k.")
    recall: dict[int, float] = Field(description="R@k per cutoff k.")
    reciprocal_rank: float


class RankingResult(MetricResult):
    n_queries: int
    mean: QueryRankingScores = Field(description="Means over queries; mean reciprocal rank is MRR.")
    per_query: dict[str, QueryRankingScores]


def evaluate_runs(
    queries: Mapping[str, tuple[Mapping[str, float], Mapping[str, int]]],
    cutoffs: Sequence[int],
    relevance_level: int = 1,
) -> dict[str, QueryRankingScores]:
    """Scores per query id, from its run (score per document) and qrels (grade per document);
    trec_eval evaluates them all in one call."""
    _check_cutoffs(cutoffs)
    measures: dict[ir_measures.Measure, tuple[str, int | None]] = {ir_measures.nDCG @ k: ("ndcg", k) for k in cutoffs}
    measures |= {ir_measures.P(rel=relevance_level) @ k: ("precision", k) for k in cutoffs}
    measures |= {ir_measures.R(rel=relevance_level) @ k: ("recall", k) for k in cutoffs}
    measures[ir_measures.RR(rel=relevance_level)] = ("reciprocal_rank", None)
    values: dict[str, dict[str, dict[int, float]]] = {
        query: {
            "ndcg": {k: 0.0 for k in cutoffs},
            "precision": {k: 0.0 for k in cutoffs},
            "recall": {k: 0.0 for k in cutoffs},
            "reciprocal_rank": {0: 0.0},
        }
        for query in queries
    }  # trec_eval leaves out a query that retrieved nothing or has no judgments: it scores 0
    qrels = {
        query: {doc: int(grade) for doc, grade in judged.items()} for query, (_, judged) in queries.items() if judged
    }
    run = {
        query: {doc: float(score) for doc, score in scores.items()} for query, (scores, _) in queries.items() if scores
    }
    for metric in ir_measures.pytrec_eval.iter_calc(list(measures), qrels, run):
        field, k = measures[metric.measure]
        values[metric.query_id][field][k if k is not None else 0] = float(metric.value)
    return {
        query: QueryRankingScores(
            ndcg=v["ndcg"], precision=v["precision"], recall=v["recall"], reciprocal_rank=v["reciprocal_rank"][0]
        )
        for query, v in values.items()
    }


def query_ranking_scores(
    ranking: Sequence[str], qrels: Mapping[str, int], cutoffs: Sequence[int], relevance_level: int = 1
) -> QueryRankingScores:
    """One query's scores for an explicit ranking (best first)."""
    return evaluate_runs({"q": (as_run(ranking), qrels)}, cutoffs, relevance_level)["q"]


def ranking_scores(evaluated: RankingInput) -> RankingResult:
    per_query = evaluate_runs(
        {q.query_id: (q.run(), q.qrels) for q in evaluated.queries}, evaluated.cutoffs, evaluated.relevance_level
    )
    rows = list(per_query.values())

    def mean_at(field: str) -> dict[int, float]:
        return {k: math.fsum(getattr(row, field)[k] for row in rows) / len(rows) for k in evaluated.cutoffs}

    mean = QueryRankingScores(
        ndcg=mean_at("ndcg"),
        precision=mean_at("precision"),
        recall=mean_at("recall"),
        reciprocal_rank=math.fsum(row.reciprocal_rank for row in rows) / len(rows),
    )
    return RankingResult(n_queries=len(rows), mean=mean, per_query=per_query)
