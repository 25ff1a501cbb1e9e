"""Cases that are not independent: cluster designs, cluster-robust variance, design effect, MDE.

A benchmark's cases share users, tasks, conversations or topics (PDR-Bench crosses 50 tasks with 25
personas; LoCoMo's questions nest in 10 conversations). Scores of one cluster move together, so an
interval that resamples cases as if each were independent is too narrow and a test rejects a true
null far more often than it says. This module holds the pure math the intervals and tests of
`statistics.py` use when cases carry cluster labels:

    ClusterDesign.of(clusters, n)
        `clusters` is one label per value (one-way) or a mapping of named label lists (crossed, e.g.
        `{"persona": [...], "task": [...]}`). Dimensions that cannot carry information are dropped,
        each with a note: one level only (nothing to resample: the figures hold for that level), every
        case its own cluster (that is the independent design), the same grouping as another
        dimension, or nested in another (resampling the outer cluster carries the inner one with it).

    clustered_variance(values, design)
        The variance of the mean, cluster-robust: one-way CR1 (Liang-Zeger with the G/(G-1) factor);
        multiway by Cameron, Gelbach & Miller (2011): the sum over non-empty subsets S of the
        dimensions of (-1)^(|S|+1) times the one-way variance clustered on the intersection of S.
        When that sum is not positive (it can be, in small samples) the largest one-way variance is
        used, as they suggest. With no dimension it is s^2/n.

    design_effect(values, design) = clustered_variance / (s^2 / n): how many times the variance of
        the mean exceeds what independent cases would give; n / design_effect is the effective n.

    minimum_detectable(se) = (z_{1-alpha/2} + z_power) * se: the smallest true difference a two-sided
        test at `alpha` detects with probability `power` (normal approximation).

    multiway_t(values, design, confidence)
        For crossed designs: the interval mean +- t * SE and the two-sided p-value of mean / SE, with
        SE the multiway cluster-robust one and t on min(G) - 1 degrees of freedom (the dimension
        with the fewest clusters bounds what the data can say about the variance).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

MIN_CLUSTERS = 10  # below this, cluster-robust intervals and tests are unreliable: said, never hidden
ONE_WAY_NAME = "cluster"  # the dimension's name when clusters come as one list of labels

Clusters = Sequence[str | int] | Mapping[str, Sequence[str | int]]


@dataclass(frozen=True)
class ClusterDesign:
    """The dimensions cases are clustered on, each as one integer code per case (0..levels-1)."""

    n: int
    names: tuple[str, ...] = ()
    codes: tuple[np.ndarray, ...] = ()
    notes: tuple[str, ...] = field(default=())
    given: tuple[str, ...] = ()  # every dimension asked for, dropped ones included

    @classmethod
    def of(cls, clusters: Clusters | None, n: int) -> ClusterDesign:
        """The design of `clusters` for n values; ValueError naming a dimension whose labels do not
        number n."""
        if clusters is None:
            return cls(n)
        named = dict(clusters) if isinstance(clusters, Mapping) else {ONE_WAY_NAME: clusters}
        coded: dict[str, np.ndarray] = {}
        for name, labels in named.items():
            if isinstance(labels, str) or not isinstance(labels, Sequence):
                raise ValueError(f"clusters {name!r}: give one label per value (a list), got {type(labels).__name__}")
            if len(labels) != n:
                raise ValueError(f"clusters {name!r}: {len(labels)} labels for {n} values (one label per value)")
            coded[name] = np.unique(np.asarray([str(label) for label in labels]), return_inverse=True)[1]
        notes: list[str] = []
        kept: dict[str, np.ndarray] = {}
        for name, codes in coded.items():
            levels = int(codes.max()) + 1 if codes.size else 0
            if n and levels == 1:
                notes.append(f"{name}: one cluster only, not resampled (the figures hold for that {name} alone)")
            elif levels == n:
                notes.append(f"{name}: every value its own cluster (independent on {name})")
            else:
                kept[name] = codes
        order = list(kept)
        for position, name in enumerate(order):
            earlier = order[:position]
            for other in [o for o in kept if o != name]:
                if _same_groups(kept[name], kept[other]):
                    if other not in earlier:
                        continue  # the later of two alike goes
                    notes.append(f"{name}: the same groups as {other}")
                elif _nested(kept[name], kept[other]):
                    notes.append(f"{name}: nested in {other}, resampled with it")
                else:
                    continue
                del kept[name]
                break
        return cls(n, tuple(kept), tuple(kept.values()), tuple(notes), tuple(named))

    @property
    def clustered(self) -> bool:
        return bool(self.names)

    @property
    def levels(self) -> dict[str, int]:
        return {name: int(codes.max()) + 1 for name, codes in zip(self.names, self.codes)}

    def warnings(self) -> list[str]:
        """What makes cluster-based figures unreliable here (too few clusters), in words."""
        few = {name: g for name, g in self.levels.items() if g < MIN_CLUSTERS}
        return [
            f"few clusters: {name} has {g} (under {MIN_CLUSTERS}); cluster intervals and tests are rough "
            f"with so few, and too narrow more often than they say"
            for name, g in few.items()
        ]

    def describe(self) -> str:
        return " x ".join(f"{name} ({g})" for name, g in self.levels.items())

    def subset(self, keep: np.ndarray) -> ClusterDesign:
        """The design of the values where `keep` is true (their labels recoded)."""
        labels = {name: [str(c) for c in codes[keep]] for name, codes in zip(self.names, self.codes)}
        sub = ClusterDesign.of(labels or None, int(np.count_nonzero(keep)))
        return sub if labels else ClusterDesign(int(np.count_nonzero(keep)))


def _same_groups(a: np.ndarray, b: np.ndarray) -> bool:
    pairs = np.unique(np.stack([a, b]), axis=1)
    return pairs.shape[1] == int(a.max()) + 1 == int(b.max()) + 1


def _nested(inner: np.ndarray, outer: np.ndarray) -> bool:
    """Every cluster of `inner` lies within one cluster of `outer`."""
    pairs = np.unique(np.stack([inner, outer]), axis=1)
    return pairs.shape[1] == int(inner.max()) + 1


def _one_way_variance(residuals: np.ndarray, codes: np.ndarray) -> float:
    """CR1 variance of the mean clustered on `codes`: G/(G-1) * sum_g (sum of residuals in g)^2 / n^2."""
    n = residuals.size
    sums = np.bincount(codes, weights=residuals)
    g = sums.size
    if g < 2:
        return 0.0
    return float(g / (g - 1) * np.sum(sums**2) / n**2)


def clustered_variance(values: Sequence[float] | np.ndarray, design: ClusterDesign) -> float:
    """The cluster-robust variance of the mean of `values` under `design` (see the module docstring)."""
    x = np.asarray(values, dtype=float)
    n = x.size
    if n < 2:
        return 0.0
    residuals = x - x.mean()
    if not design.clustered:
        return float(np.var(x, ddof=1) / n)
    total = 0.0
    one_way = [_one_way_variance(residuals, codes) for codes in design.codes]
    for size in range(1, len(design.codes) + 1):
        for subset in itertools.combinations(design.codes, size):
            joint = subset[0] if size == 1 else np.unique(np.stack(subset), axis=1, return_inverse=True)[1].ravel()
            total += (-1) ** (size + 1) * _one_way_variance(residuals, joint)
    return total if total > 0 else max(one_way)


def design_effect(values: Sequence[float] | np.ndarray, design: ClusterDesign) -> float | None:
    """clustered_variance over the independent-cases variance s^2/n; None when every value is equal."""
    x = np.asarray(values, dtype=float)
    if x.size < 2 or float(np.var(x, ddof=1)) == 0.0:
        return None
    return clustered_variance(x, design) / (float(np.var(x, ddof=1)) / x.size)


def z_sum(alpha: float = 0.05, power: float = 0.8) -> float:
    """z_{1-alpha/2} + z_power: 2.80 at the 5% two-sided level and 80% power."""
    return float(stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power))


def minimum_detectable(se: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest true difference detected with probability `power` by a two-sided test at `alpha`,
    when the estimate's standard error is `se` (normal approximation)."""
    return z_sum(alpha, power) * se


def cluster_sums(values: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per cluster, the sum of its values and how many it holds."""
    return np.bincount(codes, weights=values), np.bincount(codes).astype(float)


def standard_error(values: Sequence[float] | np.ndarray, design: ClusterDesign) -> float:
    return math.sqrt(max(0.0, clustered_variance(values, design)))


def multiway_t(values: np.ndarray, design: ClusterDesign, confidence: float) -> tuple[float, float, float]:
    """(low, high, p): mean +- t_{min(G)-1} x the cluster-robust SE, and the two-sided p of mean = 0."""
    mean = float(values.mean())
    se = standard_error(values, design)
    df = min(design.levels.values()) - 1
    if se == 0.0:  # every cluster's mean is the overall mean: nothing varies between clusters
        return mean, mean, 1.0 if mean == 0.0 else 0.0
    half = float(stats.t.ppf(1 - (1 - confidence) / 2, df)) * se
    p = float(2 * stats.t.sf(abs(mean) / se, df))
    return mean - half, mean + half, p
