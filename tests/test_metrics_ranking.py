"""Ranking metrics (trec_eval through ir-measures): hand-computed graded nDCG, ties, edge cases,
and the measures mapped to the right fields.

The parity data was produced once with pytrec-eval-terrier 0.5.11 (trec_eval 9.x bindings) on seeded
random queries with graded judgments (0-3), many tied scores and a query without relevant documents:
    pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.1,3,5,10", "P.1,3,5,10", "recall.1,3,5,10", "recip_rank"})
"""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from atelier.benchmarks.metrics.ranking import RankingInput, evaluate_runs, query_ranking_scores, ranking_scores

CUTOFFS = (1, 3, 5, 10)

TREC_EVAL_QUERIES = {
    "q0": {
        "qrels": {"d05": 1, "d02": 2, "d06": 0, "d00": 2, "d01": 0, "d09": 0, "d04": 0, "d08": 1},
        "scores": {
            "d06": 0.9,
            "d01": 0.7,
            "d03": 0.1,
            "d10": 0.7,
            "d11": 0.7,
            "d00": 0.5,
            "d04": 0.1,
            "d07": 0.2,
            "d08": 0.1,
            "d02": 0.7,
        },
    },
    "q1": {
        "qrels": {"d02": 3, "d04": 0, "d06": 0, "d11": 2, "d01": 2, "d10": 3, "d08": 0, "d09": 1},
        "scores": {
            "d01": 0.5,
            "d08": 0.7,
            "d11": 0.5,
            "d00": 0.5,
            "d03": 0.5,
            "d07": 0.2,
            "d05": 0.2,
            "d04": 0.9,
            "d06": 0.2,
            "d09": 0.1,
        },
    },
    "q2": {
        "qrels": {"d09": 2, "d04": 0, "d08": 0, "d07": 2, "d05": 1, "d11": 0, "d03": 1, "d02": 0},
        "scores": {
            "d07": 0.5,
            "d06": 0.1,
            "d00": 0.1,
            "d01": 0.5,
            "d05": 0.5,
            "d02": 0.9,
            "d11": 0.9,
            "d10": 0.1,
            "d03": 0.1,
            "d04": 0.9,
        },
    },
    "q3": {
        "qrels": {"d11": 0, "d04": 1, "d09": 1, "d07": 0, "d10": 2, "d05": 0, "d03": 1, "d02": 0},
        "scores": {
            "d03": 0.5,
            "d04": 0.7,
            "d02": 0.5,
            "d11": 0.2,
            "d06": 0.5,
            "d08": 0.7,
            "d07": 0.5,
            "d00": 0.9,
            "d01": 0.5,
            "d05": 0.5,
        },
    },
    "q4": {
        "qrels": {"d10": 3, "d06": 0, "d03": 0, "d02": 1, "d01": 2, "d07": 0, "d11": 1, "d05": 1},
        "scores": {
            "d00": 0.7,
            "d02": 0.7,
            "d06": 0.9,
            "d08": 0.9,
            "d05": 0.9,
            "d04": 0.1,
            "d09": 0.5,
            "d10": 0.9,
            "d01": 0.7,
            "d07": 0.5,
        },
    },
    "q5": {
        "qrels": {"d06": 0, "d11": 0, "d10": 0, "d01": 0, "d07": 0, "d05": 0, "d03": 0, "d00": 0},
        "scores": {
            "d00": 0.7,
            "d01": 0.5,
            "d11": 0.2,
            "d02": 0.9,
            "d10": 0.5,
            "d08": 0.5,
            "d04": 0.7,
            "d09": 0.5,
            "d05": 0.5,
            "d03": 0.1,
        },
    },
}
TREC_EVAL_RESULTS = {
    "q0": {
        "ndcg": [0.0, 0.0, 0.2054491846, 0.4506180359],
        "P": [0.0, 0.0, 0.2, 0.3],
        "recall": [0.0, 0.0, 0.25, 0.75],
        "recip_rank": 0.25,
    },
    "q1": {
        "ndcg": [0.0, 0.1696989245, 0.2483835332, 0.2888631609],
        "P": [0.0, 0.3333333333, 0.4, 0.3],
        "recall": [0.0, 0.2, 0.4, 0.6],
        "recip_rank": 0.3333333333,
    },
    "q2": {
        "ndcg": [0.0, 0.0, 0.2977209746, 0.3695223833],
        "P": [0.0, 0.0, 0.4, 0.3],
        "recall": [0.0, 0.0, 0.5, 0.75],
        "recip_rank": 0.25,
    },
    "q3": {
        "ndcg": [0.0, 0.1596969716, 0.1403860944, 0.2339768241],
        "P": [0.0, 0.3333333333, 0.2, 0.2],
        "recall": [0.0, 0.25, 0.25, 0.5],
        "recip_rank": 0.3333333333,
    },
    "q4": {
        "ndcg": [1.0, 0.6300059873, 0.684219984, 0.8119067954],
        "P": [1.0, 0.3333333333, 0.6, 0.4],
        "recall": [0.2, 0.2, 0.6, 0.8],
        "recip_rank": 1.0,
    },
    "q5": {"ndcg": [0.0, 0.0, 0.0, 0.0], "P": [0.0, 0.0, 0.0, 0.0], "recall": [0.0, 0.0, 0.0, 0.0], "recip_rank": 0.0},
}


def test_matches_trec_eval_on_graded_runs_with_ties() -> None:
    runs = {q: (query["scores"], query["qrels"]) for q, query in TREC_EVAL_QUERIES.items()}
    for query_id, scores in evaluate_runs(runs, CUTOFFS).items():
        expected = TREC_EVAL_RESULTS[query_id]
        assert [scores.ndcg[k] for k in CUTOFFS] == pytest.approx(expected["ndcg"], abs=1e-9), query_id
        assert [scores.precision[k] for k in CUTOFFS] == pytest.approx(expected["P"], abs=1e-9), query_id
        assert [scores.recall[k] for k in CUTOFFS] == pytest.approx(expected["recall"], abs=1e-9), query_id
        assert scores.reciprocal_rank == pytest.approx(expected["recip_rank"], abs=1e-9), query_id


def first_relevant_rank(scores: dict[str, float], relevant: str) -> float:
    """1 / RR: where trec_eval put `relevant` in its ranking of `scores`."""
    return 1 / evaluate_runs({"q": (scores, {relevant: 1})}, [1])["q"].reciprocal_rank


def test_ties_are_broken_by_descending_document_id() -> None:
    scores = {"b": 0.5, "a": 0.5, "c": 0.5, "z": 0.1, "top": 0.9}  # trec_eval: top, c, b, a, z
    assert [first_relevant_rank(scores, doc) for doc in ("top", "c", "b", "a", "z")] == [1, 2, 3, 4, 5]
    # Scores equal in float32 (trec_eval's storage type) tie as well.
    assert first_relevant_rank({"a": 0.3 + 1e-12, "b": 0.3}, "b") == 1
    assert first_relevant_rank({"a": 0.3, "b": 0.3 + 1e-12}, "b") == 1


def test_an_explicit_ranking_keeps_its_order() -> None:
    qrels = {"a": 1}
    assert query_ranking_scores(["b", "a"], qrels, [1]).reciprocal_rank == 0.5
    assert query_ranking_scores(["a", "b"], qrels, [1]).reciprocal_rank == 1.0


def test_graded_ndcg_by_hand() -> None:
    qrels = {"d1": 3, "d2": 2, "d3": 0, "d4": 1}
    ranking = ["d3", "d2", "d1", "d9"]
    # DCG@3 = 0/log2(2) + 2/log2(3) + 3/log2(4); IDCG@3 = 3/log2(2) + 2/log2(3) + 1/log2(4)
    expected = (2 / math.log2(3) + 3 / 2) / (3 + 2 / math.log2(3) + 1 / 2)
    scores = query_ranking_scores(ranking, qrels, [1, 3])
    assert scores.ndcg[3] == pytest.approx(expected)
    assert scores.ndcg[1] == 0.0
    # The ideal ranking scores 1 at every cutoff, also beyond the number of relevant documents.
    assert query_ranking_scores(["d1", "d2", "d4", "d3"], qrels, [10]).ndcg[10] == pytest.approx(1.0)
    # Gains are linear: swapping grades 3 and 2 at ranks 1-2 costs (3-2)(1 - 1/log2(3)) of DCG.
    swapped = query_ranking_scores(["d2", "d1", "d4"], qrels, [3]).ndcg[3]
    assert swapped == pytest.approx(1 - (1 - 1 / math.log2(3)) / (3 + 2 / math.log2(3) + 0.5))


def test_ideal_uses_unretrieved_judged_documents_and_ignores_non_positive_grades() -> None:
    qrels = {"found": 1, "missed": 2, "bad": -1}
    ndcg = query_ranking_scores(["bad", "found"], qrels, [2]).ndcg[2]
    assert ndcg == pytest.approx((1 / math.log2(3)) / (2 + 1 / math.log2(3)))


def test_precision_recall_and_reciprocal_rank() -> None:
    qrels = {"a": 1, "b": 2, "c": 0, "d": 1}
    ranking = ["c", "b", "x"]
    scores = query_ranking_scores(ranking, qrels, [2, 5])
    assert scores.precision[5] == pytest.approx(1 / 5)  # divides by k, not by 3 retrieved
    assert scores.recall[2] == pytest.approx(1 / 3)
    assert query_ranking_scores(ranking, qrels, [2], relevance_level=2).recall[2] == pytest.approx(1.0)
    assert scores.reciprocal_rank == pytest.approx(1 / 2)
    assert query_ranking_scores(["c", "x"], qrels, [1]).reciprocal_rank == 0.0


def test_queries_without_relevant_documents_judgments_or_results_score_zero() -> None:
    zero = {"ndcg": {1: 0.0, 3: 0.0}, "precision": {1: 0.0, 3: 0.0}, "recall": {1: 0.0, 3: 0.0}, "reciprocal_rank": 0.0}
    assert query_ranking_scores(["a", "b"], {"a": 0, "b": 0}, (1, 3)).model_dump() == zero
    assert query_ranking_scores(["a", "b"], {}, (1, 3)).model_dump() == zero
    assert query_ranking_scores([], {"a": 1}, (1, 3)).model_dump() == zero


def test_means_over_queries_give_mrr() -> None:
    result = ranking_scores(
        RankingInput.model_validate(
            {
                "cutoffs": [1, 2],
                "queries": [
                    {"query_id": "q1", "qrels": {"a": 1}, "ranking": ["a", "b"]},
                    {"query_id": "q2", "qrels": {"a": 1}, "ranking": ["b", "a"]},
                    {"query_id": "q3", "qrels": {"a": 1}, "scores": {"b": 0.9, "c": 0.8, "a": 0.1}},
                ],
            }
        )
    )
    assert result.n_queries == 3
    assert result.mean.reciprocal_rank == pytest.approx((1 + 1 / 2 + 1 / 3) / 3)
    # P@2: q1 and q2 have their one relevant document in the top 2, q3 ranks it third.
    assert result.mean.precision == pytest.approx({1: 1 / 3, 2: (1 / 2 + 1 / 2 + 0) / 3})
    assert result.per_query["q2"].ndcg[2] == pytest.approx(1 / math.log2(3))


def test_invalid_inputs_are_rejected() -> None:
    with pytest.raises(ValidationError, match="exactly one of 'ranking'"):
        RankingInput.model_validate({"queries": [{"query_id": "q", "qrels": {}}]})
    with pytest.raises(ValidationError, match="more than once: a"):
        RankingInput.model_validate({"queries": [{"query_id": "q", "qrels": {}, "ranking": ["a", "b", "a"]}]})
    with pytest.raises(ValidationError, match="query_id"):
        RankingInput.model_validate(
            {"queries": [{"query_id": "q", "qrels": {}, "ranking": []}, {"query_id": "q", "qrels": {}, "ranking": []}]}
        )
    with pytest.raises(ValidationError, match="cutoffs must be >= 1"):
        RankingInput.model_validate({"cutoffs": [0], "queries": [{"query_id": "q", "qrels": {}, "ranking": []}]})
    with pytest.raises(ValueError, match="cutoffs must be >= 1"):
        query_ranking_scores([], {}, [0])
