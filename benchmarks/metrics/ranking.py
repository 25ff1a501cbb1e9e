"""Ranking metrics with trec_eval's conventions: nDCG@k, P@k, R@k and (mean) reciprocal rank.

Conventions (those of trec_eval 9.x `ndcg_cut`, `P`, `recall` and `recip_rank`):
- nDCG@k uses linear gains (the relevance grade itself) and the log2(rank + 1) discount:
  DCG@k = sum_{i=1..k} grade_i / log2(i + 1). The ideal DCG sorts every judged grade of the query,
  retrieved or not. Grades <= 0 and unjudged documents give no gain. nDCG is 0 when no document of
  the query has a positive grade.
- A document is relevant for P@k, R@k and RR when its grade >= `relevance_level` (trec_eval `-l`, 1).
  P@k divides by k even when fewer than k documents were retrieved; R@k is 0 without relevant
  documents; RR is 1 / rank of the first relevant document, 0 if none is retrieved.
- A run given as scores is ranked like trec_eval does it: by score descending (scores compared as
  float32, trec_eval's storage type), ties broken by document id in *descending* string order
  (trec_eval's `comp_sim_docno`). An explicit ranking is used in its given order.
Means over queries ("all" in trec_eval) average the per-query values of the queries given.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from pydantic import Field, FiniteFloat, model_validator

from benchmarks.metrics.models import MetricInput, MetricResult

DEFAULT_CUTOFFS: tuple[int, ...] = (1, 3, 5, 10)


def rank_by_score(scores: Mapping[str, float]) -> list[str]:
    """Document ids in trec_eval order: score descending (as float32), then document id descending."""
    by_id_descending = sorted(scores, reverse=True)
    as_float32 = np.asarray([scores[doc] for doc in by_id_descending], dtype=np.float32)
    # A stable sort on the negated scores keeps the id-descending order among tied scores.
    order = np.argsort(-as_float32, kind="stable")
    return [by_id_descending[i] for i in order]


def dcg(gains: Sequence[float]) -> float:
    """Discounted cumulative gain of gains in rank order, log2(rank + 1) discount, positive gains only."""
    return math.fsum(gain / math.log2(rank + 1) for rank, gain in enumerate(gains, start=1) if gain > 0)


def ndcg_at_k(ranking: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """nDCG@k with linear gains; 0 when the query has no positively graded document."""
    _check_cutoff(k)
    ideal = dcg(sorted(qrels.values(), reverse=True)[:k])
    if ideal == 0:
        return 0.0
    return dcg([qrels.get(doc, 0) for doc in ranking[:k]]) / ideal


def precision_at_k(ranking: Sequence[str], qrels: Mapping[str, int], k: int, relevance_level: int = 1) -> float:
    _check_cutoff(k)
    return _relevant_in_top(ranking, qrels, k, relevance_level) / k


def recall_at_k(ranking: Sequence[str], qrels: Mapping[str, int], k: int, relevance_level: int = 1) -> float:
    _check_cutoff(k)
    n_relevant = sum(1 for grade in qrels.values() if grade >= relevance_level)
    return _relevant_in_top(ranking, qrels, k, relevance_level) / n_relevant if n_relevant else 0.0


def reciprocal_rank(ranking: Sequence[str], qrels: Mapping[str, int], relevance_level: int = 1) -> float:
    for rank, doc in enumerate(ranking, start=1):
        if qrels.get(doc, 0) >= relevance_level:
            return 1.0 / rank
    return 0.0


def _relevant_in_top(ranking: Sequence[str], qrels: Mapping[str, int], k: int, relevance_level: int) -> int:
    return sum(1 for doc in ranking[:k] if qrels.get(doc, 0) >= relevance_level)


def _repeated(items: Iterable[str]) -> list[str]:
    return sorted(item for item, count in Counter(items).items() if count > 1)


def _check_cutoff(k: int) -> None:
    if k < 1:
        raise ValueError(f"cutoff k must be >= 1, got {k}")


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

    def ranked_ids(self) -> list[str]:
        return list(self.ranking) if self.ranking is not None else rank_by_score(self.scores or {})


class RankingInput(MetricInput):
    queries: list[RankedQuery] = Field(min_length=1, description="The queries to evaluate.")
    cutoffs: list[int] = Field(
        default_factory=lambda: list(DEFAULT_CUTOFFS), min_length=1, description="Cutoffs k for nDCG@k, P@k and R@k."
    )
    relevance_level: int = Field(default=1, description="Minimum grade counted as relevant for P, R and RR.")

    @model_validator(mode="after")
    def _valid_cutoffs_and_ids(self) -> RankingInput:
        bad = [k for k in self.cutoffs if k < 1]
        if bad:
            raise ValueError(f"cutoffs must be >= 1, got {bad}")
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


def query_ranking_scores(
    ranking: Sequence[str], qrels: Mapping[str, int], cutoffs: Sequence[int], relevance_level: int = 1
) -> QueryRankingScores:
    return QueryRankingScores(
        ndcg={k: ndcg_at_k(ranking, qrels, k) for k in cutoffs},
        precision={k: precision_at_k(ranking, qrels, k, relevance_level) for k in cutoffs},
        recall={k: recall_at_k(ranking, qrels, k, relevance_level) for k in cutoffs},
        reciprocal_rank=reciprocal_rank(ranking, qrels, relevance_level),
    )


def ranking_scores(evaluated: RankingInput) -> RankingResult:
    per_query = {
        q.query_id: query_ranking_scores(q.ranked_ids(), q.qrels, evaluated.cutoffs, evaluated.relevance_level)
        for q in evaluated.queries
    }
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
