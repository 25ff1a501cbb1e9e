"""The power of the test a run applies, by simulation of the design it will run.

A design is the run's cases with their cluster labels (`clusters.ClusterDesign`); its variance is
a random-effects model of the per-case difference (`Components`): one normal effect per cluster
of each dimension (variance `clusters[dimension]`) plus a normal residual per case (`residual`:
what is left between cases, and the epochs' and judge repeats' noise averaged into each case's
score). `PowerCurve.simulate` draws `datasets` null datasets of that design (seeded), analyses each
with the run's own procedure (`procedures.DifferenceProcedure`: the same sign patterns, seed and
resamples), and keeps each one's interval. Because every procedure is shift-equivariant, a true
difference d is declared exactly when the null dataset's interval excludes -d, so one batch gives
the whole power curve: `power(d)` with its Monte Carlo standard error, and `detectable(power)`, the
smallest difference declared with that probability (None: not even an unbounded one, e.g. a
sign-flip test over 5 clusters, which never rejects at 5%).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats

from atelier.benchmarks.metrics.clusters import ClusterDesign, t_detectable
from atelier.benchmarks.metrics.procedures import DifferenceProcedure
from atelier.benchmarks.metrics.variance import cluster_components

DEFAULT_DATASETS = 2_000


@dataclass(frozen=True)
class Components:
    """Variance of a per-case difference: per clustered dimension between its clusters, and the rest."""

    clusters: dict[str, float]
    residual: float

    @classmethod
    def estimate(cls, differences: np.ndarray, design: ClusterDesign) -> Components:
        """From observed per-case differences: the between-cluster variance of each dimension
        (`variance.cluster_components`) and the rest of their variance."""
        x = np.asarray(differences, dtype=float)
        between = cluster_components(x, design) if x.size >= 2 else {}
        total = float(np.var(x, ddof=1)) if x.size >= 2 else 0.0
        return cls(clusters=between, residual=max(0.0, total - math.fsum(between.values())))


def simulate(design: ClusterDesign, components: Components, datasets: int, seed: int) -> np.ndarray:
    """`datasets` null datasets (rows) of per-case differences under `design` and `components`."""
    rng = np.random.default_rng(seed)
    data = rng.normal(0.0, math.sqrt(max(components.residual, 0.0)), size=(datasets, design.n))
    for name, codes in zip(design.names, design.codes):
        variance = components.clusters.get(name, 0.0)
        if variance > 0:
            data += rng.normal(0.0, math.sqrt(variance), size=(datasets, int(codes.max()) + 1))[:, codes]
    return data


@dataclass(frozen=True)
class PowerCurve:
    """The intervals of simulated null datasets under the run's procedure: power at any difference."""

    low: np.ndarray
    high: np.ndarray
    procedure: DifferenceProcedure

    @classmethod
    def simulate(
        cls, procedure: DifferenceProcedure, components: Components, datasets: int = DEFAULT_DATASETS, seed: int = 0
    ) -> PowerCurve:
        analysis = procedure.analyse(simulate(procedure.design, components, datasets, seed))
        return cls(analysis.low, analysis.high, procedure)

    @property
    def datasets(self) -> int:
        return int(self.low.size)

    def power(self, difference: float) -> tuple[float, float]:
        """(share of datasets that declare a true `difference`, its Monte Carlo standard error)."""
        declared = float(np.mean((self.low > -difference) | (self.high < -difference)))
        return declared, math.sqrt(declared * (1 - declared) / self.datasets)

    def detectable(self, power: float = 0.8) -> float | None:
        """The smallest positive difference declared in at least `power` of the datasets (None: none is)."""
        candidates = np.sort(-self.low[np.isfinite(self.low)])
        candidates = candidates[candidates > 0]
        if candidates.size == 0:
            return None
        # declared at d (just above a candidate): low > -d, or high < -d
        above = np.arange(1, candidates.size + 1) + np.count_nonzero(self.low > 0)
        below = self.datasets - np.searchsorted(np.sort(-self.high), candidates, side="right")
        share = (above + below) / self.datasets
        reached = np.nonzero(share >= power)[0]
        return float(candidates[reached[0]]) if reached.size else None


# Designs whose sign-flip test has more units than this are given the t test's power (noncentral t
# on units - 1 df) instead of a simulation: the two agree within a point of power from 50 units on
# (docs/statistics.md, `calibration`), and simulating thousands of datasets against 10,000 sign
# patterns of hundreds of units would take minutes.
SIMULATED_UNITS = 100


@dataclass(frozen=True)
class DesignPower:
    """The power of one design at one difference, and how it was found."""

    cases: int
    clusters: dict[str, int]
    power: float
    error: float  # Monte Carlo standard error (0: computed, not simulated)
    method: str
    smallest_p: float
    detectable: float | None  # the smallest difference declared with the target power (None: none is)


def design_power(
    procedure: DifferenceProcedure,
    components: Components,
    difference: float | None,
    datasets: int = DEFAULT_DATASETS,
    seed: int = 0,
    *,
    target: float = 0.8,
) -> DesignPower:
    """The power of `procedure` (the run's test on its design) to declare `difference` (None: only
    the difference it declares with probability `target` is wanted), with the design's variance
    `components`: simulated (module docstring), or the t test's when the sign-flip test has more
    than SIMULATED_UNITS units."""
    design = procedure.design
    cases, clusters, smallest = design.n, design.levels, procedure.smallest_p
    if not procedure.testable:
        return DesignPower(cases, clusters, 0.0, 0.0, procedure.why_untestable(), smallest, None)
    alpha = 1 - procedure.confidence
    if not procedure.crossed and procedure.units > SIMULATED_UNITS:
        se = math.sqrt(_variance_of_mean(design, components))
        df = procedure.units - 1
        power = 0.0 if difference is None else _t_power(difference / se if se > 0 else math.inf, df, alpha)
        method = f"noncentral t on {df} df (the sign-flip test over {procedure.units} units)"
        return DesignPower(
            cases, clusters, power, 0.0, method, smallest, t_detectable(se, df, alpha, target) if se > 0 else 0.0
        )
    curve = PowerCurve.simulate(procedure, components, datasets, seed)
    value, error = curve.power(difference) if difference is not None else (0.0, 0.0)
    method = f"simulation of {datasets:,} datasets analysed with the run's test ({procedure.method})"
    return DesignPower(cases, clusters, value, error, method, smallest, curve.detectable(target))


def _variance_of_mean(design: ClusterDesign, components: Components) -> float:
    """Var(mean of n cases) under the random-effects model: sum_k s_k^2 sum_g n_g^2 / n^2 + s^2 / n."""
    n = design.n
    total = components.residual / n
    for name, codes in zip(design.names, design.codes):
        sizes = np.bincount(codes).astype(float)
        total += components.clusters.get(name, 0.0) * float(np.sum(sizes**2)) / n**2
    return total


def _t_power(ncp: float, df: float, alpha: float) -> float:
    if math.isinf(ncp):
        return 1.0
    critical = float(stats.t.ppf(1 - alpha / 2, df))
    lower = float(stats.nct.cdf(-critical, df, ncp))
    return float(stats.nct.sf(critical, df, ncp)) + (lower if math.isfinite(lower) else 0.0)


def smallest_design(
    sizes: list[int],
    design_for: Callable[[int], ClusterDesign],
    components: Components,
    difference: float,
    *,
    power: float = 0.8,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
    datasets: int = DEFAULT_DATASETS,
    guess: int | None = None,
) -> tuple[DesignPower | None, DesignPower]:
    """(the design of the fewest cases among `sizes` whose test declares `difference` with at least
    `power`, or None; the largest design's, the best there is). Power is taken to grow with the
    cases: the search starts at `guess` (e.g. the normal-theory n), steps out from it doubling
    until it brackets the answer, then halves the bracket; every probe is a simulation."""
    probed: dict[int, DesignPower] = {}
    ordered = sorted(set(sizes))

    def passes(index: int) -> bool:
        n = ordered[index]
        if n not in probed:
            procedure = DifferenceProcedure(design_for(n), confidence, n_resamples, seed)
            probed[n] = design_power(procedure, components, difference, datasets, seed, target=power)
        return probed[n].power >= power

    last = len(ordered) - 1
    if not passes(last):
        return None, probed[ordered[last]]
    start = min(last, int(np.searchsorted(ordered, guess))) if guess is not None else last
    low, high, step = -1, last, 1  # ordered[low] fails (or is none), ordered[high] passes
    if passes(start):
        high = start
        while high - step > low:
            if passes(high - step):
                high -= step
                step *= 2
            else:
                low = high - step
                break
    else:
        low = start
        while low + step < high:
            if passes(low + step):
                high = low + step
                break
            low += step
            step *= 2
    while high - low > 1:
        middle = (low + high) // 2
        if passes(middle):
            high = middle
        else:
            low = middle
    return probed[ordered[high]], probed[ordered[last]]
