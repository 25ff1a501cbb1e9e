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

    clustered_variance(values, design) / clustered_variances(rows, design)
        The variance of the mean, cluster-robust: one-way CR1 (Liang-Zeger with the G/(G-1) factor);
        multiway by Cameron, Gelbach & Miller (2011): the sum over non-empty subsets S of the
        dimensions of (-1)^(|S|+1) times the one-way variance clustered on the intersection of S.
        When that sum is not positive (it can be, in small samples) the largest one-way variance is
        used, as they suggest. With no dimension it is s^2/n. `rows`: one dataset per row.

    design_effect(values, design) = clustered_variance / (s^2 / n): how many times the variance of
        the mean exceeds what independent cases would give; n / design_effect is the effective n.

    multiway_t_rows(rows, design, confidence) / multiway_t(values, design, confidence)
        For crossed designs: the interval mean +- t * SE and the two-sided p-value of mean / SE, with
        SE the multiway cluster-robust one and t on min(G) - 1 degrees of freedom (the dimension
        with the fewest clusters bounds what the data can say about the variance).

    cr2_rows(rows, codes) and bell_mccaffrey_df(sizes)
        For one dimension: the CR2 standard error of a mean (Bell & McCaffrey 2002) and its
        degrees of freedom; the t interval of a mean rests on them (`procedures.MeanProcedure`).

    t_detectable(se, df, alpha, power): the smallest true difference a two-sided t test on df
        degrees of freedom detects with probability `power` (noncentral t).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize, stats

# below this many clusters the measured coverage of the 95% intervals falls under 93% in a typical
# scenario (docs/statistics.md; `calibration.few_clusters_threshold` measures it): said, never hidden
MIN_CLUSTERS = 8
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
    def crossed(self) -> bool:
        """Two or more dimensions kept (PDR's persona x task)."""
        return len(self.names) > 1

    @property
    def levels(self) -> dict[str, int]:
        return {name: int(codes.max()) + 1 for name, codes in zip(self.names, self.codes)}

    def warnings(self) -> list[str]:
        """What makes cluster-based figures unreliable here (too few clusters), in words."""
        few = {name: g for name, g in self.levels.items() if g < MIN_CLUSTERS}
        return [
            f"few clusters: {name} has {g} (under {MIN_CLUSTERS}); with so few, 95% intervals were measured to "
            "cover less than 93% of the time for some scores (docs/statistics.md)"
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


def indicator(codes: np.ndarray) -> np.ndarray:
    """The (cases x clusters) 0/1 matrix of `codes`: rows of datasets times it give cluster sums."""
    out = np.zeros((codes.size, int(codes.max()) + 1 if codes.size else 0))
    out[np.arange(codes.size), codes] = 1.0
    return out


def _one_way_variances(residuals: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Per row of `residuals` (datasets x cases), the CR1 variance of the mean clustered on `codes`:
    G/(G-1) * sum_g (sum of residuals in g)^2 / n^2."""
    n = residuals.shape[1]
    g = int(codes.max()) + 1
    if g < 2:
        return np.zeros(residuals.shape[0])
    sums = residuals @ indicator(codes)
    return g / (g - 1) * np.sum(sums**2, axis=1) / n**2


def _as_rows(values: Sequence[float] | np.ndarray) -> np.ndarray:
    return np.atleast_2d(np.asarray(values, dtype=float))


def clustered_variances(rows: np.ndarray, design: ClusterDesign) -> np.ndarray:
    """Per row (a dataset of n values), the cluster-robust variance of its mean (module docstring)."""
    x = _as_rows(rows)
    n = x.shape[1]
    if n < 2:
        return np.zeros(x.shape[0])
    if not design.clustered:
        return np.var(x, axis=1, ddof=1) / n
    residuals = x - x.mean(axis=1, keepdims=True)
    total = np.zeros(x.shape[0])
    one_way = [_one_way_variances(residuals, codes) for codes in design.codes]
    for size in range(1, len(design.codes) + 1):
        for subset in itertools.combinations(design.codes, size):
            joint = subset[0] if size == 1 else np.unique(np.stack(subset), axis=1, return_inverse=True)[1].ravel()
            total += (-1) ** (size + 1) * _one_way_variances(residuals, joint)
    return np.where(total > 0, total, np.max(one_way, axis=0))


def clustered_variance(values: Sequence[float] | np.ndarray, design: ClusterDesign) -> float:
    """The cluster-robust variance of the mean of `values` under `design` (see the module docstring)."""
    return float(clustered_variances(np.asarray(values, dtype=float)[None, :], design)[0])


def design_effect(values: Sequence[float] | np.ndarray, design: ClusterDesign) -> float | None:
    """clustered_variance over the independent-cases variance s^2/n; None when every value is equal."""
    x = np.asarray(values, dtype=float)
    if x.size < 2 or float(np.var(x, ddof=1)) == 0.0:
        return None
    return clustered_variance(x, design) / (float(np.var(x, ddof=1)) / x.size)


def z_sum(alpha: float = 0.05, power: float = 0.8) -> float:
    """z_{1-alpha/2} + z_power: 2.80 at the 5% two-sided level and 80% power."""
    return float(stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power))


def t_detectable(se: float, df: float, alpha: float = 0.05, power: float = 0.8) -> float | None:
    """The smallest true difference a two-sided t test on `df` degrees of freedom detects with
    probability `power` when its estimate's standard error is `se`: the noncentrality at which
    P(|T| > t_{1-alpha/2}) = power, times se (normal data; None when df < 1)."""
    if not df >= 1 or not math.isfinite(se):
        return None
    critical = float(stats.t.ppf(1 - alpha / 2, df))

    def shortfall(ncp: float) -> float:
        lower = float(stats.nct.cdf(-critical, df, ncp))  # scipy gives NaN where it is ~0 (large ncp)
        return float(stats.nct.sf(critical, df, ncp)) + (lower if math.isfinite(lower) else 0.0) - power

    high = critical + 10.0
    while shortfall(high) < 0:
        high *= 2
    return float(optimize.brentq(shortfall, 0.0, high, xtol=1e-6)) * se


def cluster_sums(values: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per cluster, the sum of its values and how many it holds."""
    return np.bincount(codes, weights=values), np.bincount(codes).astype(float)


def standard_error(values: Sequence[float] | np.ndarray, design: ClusterDesign) -> float:
    return math.sqrt(max(0.0, clustered_variance(values, design)))


def multiway_df(design: ClusterDesign) -> int:
    """The t reference's degrees of freedom for a crossed design: the fewest clusters less one."""
    return min(design.levels.values()) - 1


def multiway_t_rows(
    rows: np.ndarray, design: ClusterDesign, confidence: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per row: (mean, low, high, p) of mean +- t_{min(G)-1} x the cluster-robust SE, p of mean = 0."""
    x = _as_rows(rows)
    mean = x.mean(axis=1)
    se = np.sqrt(np.maximum(0.0, clustered_variances(x, design)))
    df = multiway_df(design)
    half = float(stats.t.ppf(1 - (1 - confidence) / 2, df)) * se
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(se > 0, 2 * stats.t.sf(np.abs(mean) / se, df), np.where(mean == 0.0, 1.0, 0.0))
    return mean, mean - half, mean + half, p


def multiway_t(values: np.ndarray, design: ClusterDesign, confidence: float) -> tuple[float, float, float]:
    """(low, high, p): mean +- t_{min(G)-1} x the cluster-robust SE, and the two-sided p of mean = 0."""
    _, low, high, p = multiway_t_rows(values, design, confidence)
    return float(low[0]), float(high[0]), float(p[0])


def bell_mccaffrey_df(sizes: np.ndarray) -> float:
    """Bell & McCaffrey's degrees of freedom of the CR2 variance of a mean over clusters of `sizes`
    (working model: independent, equal-variance cases): (sum lambda)^2 / sum lambda^2 over the
    eigenvalues of G'G, column g of G being (I - H) a_g; G - 1 when the clusters are equal."""
    n = float(sizes.sum())
    a = 1.0 / (n * np.sqrt(1.0 - sizes / n))
    gram = -np.outer(a * sizes, a * sizes) / n
    gram[np.diag_indices(sizes.size)] += a**2 * sizes
    return float(np.trace(gram) ** 2 / np.sum(gram**2))


def cr2_rows(rows: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Per row: (mean, CR2 standard error of the mean clustered on `codes`, Bell-McCaffrey df).
    CR2 (Bell & McCaffrey 2002) for a mean: sum_g (sum of residuals in g)^2 / (1 - n_g/n) / n^2, the
    small-sample correction of the cluster-robust variance; with every case its own cluster it is
    s^2/n and the df is n - 1 (Student's t)."""
    x = _as_rows(rows)
    n = x.shape[1]
    sizes = np.bincount(codes).astype(float)
    mean = x.mean(axis=1)
    sums = (x - mean[:, None]) @ indicator(codes)
    variance = np.sum(sums**2 / (1.0 - sizes / n), axis=1) / n**2
    return mean, np.sqrt(variance), bell_mccaffrey_df(sizes)
