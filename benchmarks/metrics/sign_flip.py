"""The sign-flip test of a mean difference over independent units, and the interval that inverts it.

Two systems scored on the same cases give one difference per case. When cases are independent the
unit is the case; when they share a cluster (a user, a conversation) the unit is the cluster and
its statistic the sum of its cases' differences (a and b swapped for a whole cluster at once flips
that sum's sign). Under "no difference" each unit's sum is as likely to be positive as negative,
so the observed total T = sum_g S_g is compared with the totals of every sign pattern
T_e = sum_g e_g S_g (e_g = +-1): exactly, over all 2^G patterns, when 2^G <= n_resamples, else
over n_resamples random patterns drawn with the seed (p then (1 + count) / (n_resamples + 1)).

The interval is the set of differences mu the same test does not reject, testing each unit's
S_g - mu n_g with the same sign patterns: {mu : p(mu) >= alpha}, alpha = 1 - confidence. Each
pattern is at least as extreme as the data on one closed interval of mu (|T_e(mu)| >= |T(mu)| is a
product of two linear factors in mu), and every such interval holds the estimate, so the count is
largest at the estimate and falls away from it on either side: the set is one interval whose ends
are order statistics of the patterns' interval ends, computed exactly (no search). Because p at 0
and the interval come from the same numbers, "the interval excludes 0" and "p < alpha" agree in
every case, ties included.

With G units, exact patterns, the smallest p the test can give is 2 / 2^G (the data's own pattern
and its mirror are always as extreme): with 5 units 0.0625, so no difference is ever declared at 5%
and the interval is unbounded (`None` ends). `smallest_p` says it; `power` and `atelier plan` use it.

Everything is batched: `sign_flip` takes a matrix of datasets (one row each) so that a power
simulation analyses thousands of simulated datasets with the exact procedure a run applies to one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# rows x sign patterns held at once (a batch of datasets against 10,000 patterns): bounds memory
_CELLS_PER_CHUNK = 4_000_000


@dataclass(frozen=True)
class SignPatterns:
    """The sign patterns the test compares the data with: every one (`exact`) or a seeded sample."""

    signs: np.ndarray  # (patterns, units) of +-1.0
    exact: bool

    @property
    def units(self) -> int:
        return int(self.signs.shape[1])

    @property
    def denominator(self) -> int:
        return self.signs.shape[0] if self.exact else self.signs.shape[0] + 1

    @property
    def offset(self) -> int:
        """Added to the count of patterns as extreme as the data: the data itself when sampled."""
        return 0 if self.exact else 1


def sign_patterns(units: int, n_resamples: int, seed: int) -> SignPatterns:
    """All 2^units patterns when they number at most `n_resamples`, else `n_resamples` drawn with `seed`."""
    if units < 1:
        raise ValueError("the sign-flip test needs at least one unit")
    if units < 63 and 2**units <= n_resamples:
        bits = (np.arange(2**units)[:, None] >> np.arange(units)[None, :]) & 1
        return SignPatterns(1.0 - 2.0 * bits, True)
    rng = np.random.default_rng(seed)
    return SignPatterns(rng.choice(np.array([1.0, -1.0]), size=(n_resamples, units)), False)


def smallest_p(units: int, n_resamples: int) -> float:
    """The smallest two-sided p the test can give with this many units: 2 / 2^G when every pattern is
    enumerated (the data's own and its mirror always count), else 1 / (n_resamples + 1)."""
    if units < 1:
        return 1.0
    if units < 63 and 2**units <= n_resamples:
        return 2.0 / 2**units
    return 1.0 / (n_resamples + 1)


def reachable(units: int, n_resamples: int, alpha: float) -> bool:
    """Whether the test can reject at `alpha` (its smallest p is below it)."""
    return smallest_p(units, n_resamples) < alpha


@dataclass(frozen=True)
class SignFlipResult:
    """Per dataset (one row each): the estimate, the two-sided p of "no difference" and the interval
    (infinite ends: the test cannot reject anywhere at that level)."""

    estimate: np.ndarray
    p: np.ndarray
    low: np.ndarray
    high: np.ndarray


def sign_flip(sums: np.ndarray, sizes: np.ndarray, patterns: SignPatterns, confidence: float) -> SignFlipResult:
    """The test and its interval for each row of `sums` (datasets x units: each unit's summed
    difference); `sizes` the cases per unit (the same for every row)."""
    sums = np.atleast_2d(np.asarray(sums, dtype=float))
    sizes = np.asarray(sizes, dtype=float)
    if sums.shape[1] != patterns.units or sizes.shape != (patterns.units,):
        raise ValueError(f"{sums.shape[1]} unit sums and {sizes.size} sizes for {patterns.units}-unit sign patterns")
    total_n = float(sizes.sum())
    alpha = 1.0 - confidence
    # the count of patterns (the data's own included when sampled) p >= alpha needs
    needed = max(0, math.ceil(alpha * patterns.denominator - patterns.offset - 1e-9))
    signs = patterns.signs
    flipped_sizes = signs @ sizes  # B_e
    # all +1 or all -1: as extreme as the data for every mu, whatever the data
    trivial = np.abs(np.abs(flipped_sizes) - total_n) < 0.5
    always = int(np.count_nonzero(trivial))
    signs, flipped_sizes = signs[~trivial], flipped_sizes[~trivial]
    # a pattern and its mirror are as extreme on the same interval of mu: enumerating every pattern,
    # one of each pair is computed and counted twice
    weight = 1
    if patterns.exact and signs.shape[0]:
        keep = signs[:, 0] > 0
        signs, flipped_sizes, weight = signs[keep], flipped_sizes[keep], 2
    below = 1.0 / (flipped_sizes - total_n)  # both finite: no pattern left is trivial
    above = 1.0 / (flipped_sizes + total_n)
    rows = sums.shape[0]
    estimate = sums.sum(axis=1) / total_n
    p = np.empty(rows)
    low = np.full(rows, -np.inf)
    high = np.full(rows, np.inf)
    left = needed - always  # of the computed patterns, how many must hold mu (each counting `weight`)
    rank = math.ceil(left / weight) if left > 0 else 0
    chunk = max(1, _CELLS_PER_CHUNK // max(1, signs.shape[0]))
    for start in range(0, rows, chunk):
        block = sums[start : start + chunk]
        total = block.sum(axis=1, keepdims=True)  # A
        tolerance = 1e-9 * (np.abs(block).sum(axis=1, keepdims=True) + np.abs(total)) / total_n + 1e-300
        flipped = block @ signs.T  # A_e
        first = np.subtract(flipped, total)
        first *= below
        flipped += total
        flipped *= above  # the second root
        ends_low = np.minimum(first, flipped)
        np.maximum(first, flipped, out=first)
        ends_low -= tolerance
        first += tolerance
        ends_high = first
        counted = np.count_nonzero((ends_low <= 0.0) & (ends_high >= 0.0), axis=1)
        p[start : start + chunk] = np.minimum(1.0, (patterns.offset + always + weight * counted) / patterns.denominator)
        if rank == 0 or rank > ends_low.shape[1]:
            continue  # unbounded: the patterns always as extreme are enough (or no pattern is left)
        # the rank-th smallest low end and the rank-th largest high end
        low[start : start + chunk] = np.partition(ends_low, rank - 1, axis=1)[:, rank - 1]
        count = ends_high.shape[1]
        high[start : start + chunk] = np.partition(ends_high, count - rank, axis=1)[:, count - rank]
    return SignFlipResult(estimate=estimate, p=p, low=low, high=high)
