"""Fusing rankings: reciprocal-rank fusion of methods; weighted sums and mixtures over conversation turns.

A ranking here is `dict[event id, score]` with the best first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Ranking = dict[str, float]


def ordered(scores: dict[str, float]) -> Ranking:
    """Best score first; equal scores keep their given order."""
    return dict(sorted(scores.items(), key=lambda item: -item[1]))


def reciprocal_rank_fusion(rankings: Sequence[Ranking], k: int = 60, weights: Sequence[float] | None = None) -> Ranking:
    """RRF (Cormack et al., 2009): score(d) = sum over rankings of w / (k + rank of d), ranks from 1."""
    weights = weights or [1.0] * len(rankings)
    fused: dict[str, float] = {}
    for ranking, weight in zip(rankings, weights):
        for rank, event_id in enumerate(ranking, start=1):
            fused[event_id] = fused.get(event_id, 0.0) + weight / (k + rank)
    return ordered(fused)


def weighted_sum(rankings: Sequence[Ranking], weights: Sequence[float]) -> Ranking:
    """sum_t weight_t * score_t(d): for BM25 this is one query whose terms carry their turn's weight."""
    summed: dict[str, float] = {}
    for ranking, weight in zip(rankings, weights):
        for event_id, score in ranking.items():
            summed[event_id] = summed.get(event_id, 0.0) + weight * score
    return ordered(summed)


def turn_mixture(rankings: Sequence[Ranking], weights: Sequence[float], temperature: float) -> Ranking:
    """Mix per-turn rankings as a weighted sum of per-turn distributions over events.

    Each turn's scores become a softmax distribution (scores / temperature) over the events it
    retrieved; the result is sum_t weight_t * p_t. A turn that singles out a few events (a peaked
    distribution) moves the result; a vague one ("Yes.", "Tell me more") spreads its weight thin
    and barely does, so the current utterance dominates when it is specific and the earlier turns
    decide when it is not.
    """
    mixed: dict[str, float] = {}
    for ranking, weight in zip(rankings, weights):
        if not ranking or weight <= 0:
            continue
        top = max(ranking.values())
        exps = {i: math.exp((s - top) / temperature) for i, s in ranking.items()}
        total = sum(exps.values())
        for event_id, value in exps.items():
            mixed[event_id] = mixed.get(event_id, 0.0) + weight * value / total
    return ordered(mixed)
