"""The interval and test procedures a run applies, batched: one row per dataset.

Two questions, each with one procedure per cluster design (`clusters.ClusterDesign`):

- **A mean difference** (two systems on the same cases; any paired difference per case):
  independent cases or one cluster dimension -> the sign-flip test over units (cases, or clusters
  with their summed differences) and the interval that inverts it (`sign_flip`); crossed dimensions
  (PDR's persona x task) -> the multiway cluster-robust t (Cameron-Gelbach-Miller SE, t on
  min(G) - 1 df), whose interval and test are the same inequality. Either way the interval
  excludes 0 exactly when p < 1 - confidence.
- **A mean** (one system's score): the CR2 cluster-robust t interval with Bell-McCaffrey degrees
  of freedom (independent cases: Student's t); crossed dimensions -> the multiway t.

`DifferenceProcedure.analyse(rows)` and `MeanProcedure.analyse(rows)` take a (datasets x cases)
matrix and return each row's estimate, p (of 0) and interval: a run calls them with one row, a
power simulation (`power`, `atelier plan`) with thousands, so what a plan promises is the
property of the procedure the run applies. Every procedure is shift-equivariant (adding d to
every value moves the interval by d), which `power` uses.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from atelier.benchmarks.metrics.clusters import ClusterDesign, cr2_rows, indicator, multiway_df, multiway_t_rows
from atelier.benchmarks.metrics.sign_flip import SignPatterns, sign_flip, sign_patterns, smallest_p


@functools.cache
def _blas() -> Any:
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """BLAS on one thread while the block runs: the procedures' matrix products are small, and
    on a shared machine BLAS's own threads, fighting for the cores, made them a hundred times slower."""
    with _blas().limit(limits=1, user_api="blas"):
        yield


@dataclass(frozen=True)
class Analysis:
    """Per dataset: the estimate, the two-sided p of "it is 0", the interval (inf ends: unbounded)."""

    estimate: np.ndarray
    p: np.ndarray
    low: np.ndarray
    high: np.ndarray
    df: float | None = None  # the t reference's degrees of freedom, when there is one


def _multiway(design: ClusterDesign) -> str:
    return f"multiway cluster-robust t (Cameron-Gelbach-Miller SE, t on min(G)-1 df) over {design.describe()}"


def _multiway_analysis(data: np.ndarray, design: ClusterDesign, confidence: float) -> Analysis:
    mean, low, high, p = multiway_t_rows(data, design, confidence)
    return Analysis(mean, p, low, high, float(multiway_df(design)))


def _rows(rows: np.ndarray, n: int) -> np.ndarray:
    data = np.atleast_2d(np.asarray(rows, dtype=float))
    if data.shape[1] != n:
        raise ValueError(f"{data.shape[1]} values per dataset for a design of {n}")
    return data


@dataclass(frozen=True)
class DifferenceProcedure:
    """The test and interval of a mean difference under `design` (module docstring)."""

    design: ClusterDesign
    confidence: float = 0.95
    n_resamples: int = 10_000
    seed: int = 0
    _patterns: list[SignPatterns] = field(default_factory=list, compare=False, repr=False)

    @property
    def crossed(self) -> bool:
        return self.design.crossed

    @property
    def units(self) -> int:
        """What the test resamples: clusters (one dimension), else cases."""
        if self.crossed:
            return multiway_df(self.design) + 1
        return self.design.levels[self.design.names[0]] if self.design.clustered else self.design.n

    @property
    def smallest_p(self) -> float:
        """The smallest p this design's test can give (0: a t test, any p)."""
        return 0.0 if self.crossed else smallest_p(self.units, self.n_resamples)

    @property
    def testable(self) -> bool:
        """Whether the test can reject "no difference" at 1 - confidence with this design."""
        if self.crossed:
            return multiway_df(self.design) >= 1
        return self.design.n >= 1 and self.smallest_p < 1 - self.confidence

    def why_untestable(self) -> str:
        alpha = 1 - self.confidence
        if self.crossed:
            return f"with {self.units} clusters on its smallest dimension the t test has no degrees of freedom"
        what = "clusters" if self.design.clustered else "cases"
        return (
            f"with {self.units} {what} the smallest p the sign-flip test can give is {self.smallest_p:.4g}, "
            f"not below {alpha:g}: no difference can be declared and the interval is unbounded"
        )

    @property
    def method(self) -> str:
        if self.crossed:
            return _multiway(self.design)
        if self.design.clustered:
            return f"sign-flip test over clusters: {self.design.describe()}; interval by inverting it"
        return "sign-flip test over cases (a and b swapped within each case), interval by inverting it"

    def patterns(self) -> SignPatterns:
        if not self._patterns:  # made once per procedure: a power simulation reuses them
            self._patterns.append(sign_patterns(self.units, self.n_resamples, self.seed))
        return self._patterns[0]

    def analyse(self, rows: np.ndarray) -> Analysis:
        with one_blas_thread():
            return self._analyse(_rows(rows, self.design.n))

    def _analyse(self, data: np.ndarray) -> Analysis:
        if self.crossed:
            return _multiway_analysis(data, self.design, self.confidence)
        if self.design.clustered:
            codes = self.design.codes[0]
            sums, sizes = data @ indicator(codes), np.bincount(codes).astype(float)
        else:
            sums, sizes = data, np.ones(self.design.n)
        result = sign_flip(sums, sizes, self.patterns(), self.confidence)
        return Analysis(result.estimate, result.p, result.low, result.high)


@dataclass(frozen=True)
class MeanProcedure:
    """The interval of a mean under `design` (module docstring), and the p of its t test of 0."""

    design: ClusterDesign
    confidence: float = 0.95

    @property
    def crossed(self) -> bool:
        return self.design.crossed

    @property
    def method(self) -> str:
        if self.crossed:
            return _multiway(self.design)
        if self.design.clustered:
            return f"CR2 cluster-robust t with Bell-McCaffrey df over {self.design.describe()}"
        return "Student t over cases (independent)"

    def analyse(self, rows: np.ndarray) -> Analysis:
        with one_blas_thread():
            return self._analyse(_rows(rows, self.design.n))

    def _analyse(self, data: np.ndarray) -> Analysis:
        if self.crossed:
            return _multiway_analysis(data, self.design, self.confidence)
        codes = self.design.codes[0] if self.design.clustered else np.arange(self.design.n)
        mean, se, df = cr2_rows(data, codes)
        half = float(stats.t.ppf(1 - (1 - self.confidence) / 2, df)) * se
        with np.errstate(divide="ignore", invalid="ignore"):
            p = np.where(se > 0, 2 * stats.t.sf(np.abs(mean) / se, df), np.where(mean == 0.0, 1.0, 0.0))
        return Analysis(mean, p, mean - half, mean + half, df)
