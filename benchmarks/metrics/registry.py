"""The metrics `atelier metric NAME --input FILE.json` can compute: name -> input model, function, description."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from atelier.benchmarks.common.errors import ConfigError, DataError
from atelier.benchmarks.common.json_input import read_json_file
from atelier.benchmarks.metrics import aepd, agreement, bespoke, lampqa, locomo, pqr, prefeval, ranking, statistics
from atelier.benchmarks.metrics.models import MetricInput, MetricResult

EXAMPLES_DIR = Path(__file__).with_name("examples")


@dataclass(frozen=True)
class MetricSpec:
    name: str
    description: str
    input_model: type[MetricInput]
    compute: Callable[[Any], MetricResult]

    @property
    def example_path(self) -> Path:
        return EXAMPLES_DIR / f"{self.name}.json"


METRICS: dict[str, MetricSpec] = {
    spec.name: spec
    for spec in (
        MetricSpec(
            "pqr",
            "PDR-Bench P, Q (two-level weighted 0-10), R from FA and CC, and overall.",
            pqr.PQRInput,
            pqr.pqr_scores,
        ),
        MetricSpec(
            "bespoke",
            "BESPOKE criteria 1-5 scaled x20 to 0-100, gold-information recall, average.",
            bespoke.BespokeInput,
            bespoke.bespoke_scores,
        ),
        MetricSpec(
            "lampqa",
            "LaMP-QA: per-aspect 0-2 ratings divided by 2 and averaged (Algorithm 1).",
            lampqa.LampQAInput,
            lampqa.lampqa_scores,
        ),
        MetricSpec(
            "lampqa_pairwise",
            "LaMP-QA pairwise verdicts in both orders: position-balanced win rate, flip rate.",
            lampqa.PairwiseInput,
            lampqa.pairwise_summary,
        ),
        MetricSpec(
            "locomo",
            "LoCoMo QA: token F1 with LoCoMo's normalisation and per-category rules.",
            locomo.LocomoInput,
            locomo.locomo_scores,
        ),
        MetricSpec(
            "prefeval",
            "PrefEval: error types and preference-following accuracy from the four checks.",
            prefeval.PrefEvalInput,
            prefeval.prefeval_scores,
        ),
        MetricSpec(
            "aepd",
            "AEPD NPP, NPCL, P_score, AR, CLU (RNSS), D_score of one conversational turn.",
            aepd.AEPDInput,
            aepd.aepd_scores,
        ),
        MetricSpec(
            "ranking",
            "nDCG@k (linear gains, trec_eval), P@k, R@k and MRR over graded judgments.",
            ranking.RankingInput,
            ranking.ranking_scores,
        ),
        MetricSpec(
            "judge_agreement",
            "PDR-Bench PCA and MARD of a judge against human scores, with Pearson and Spearman.",
            agreement.JudgeAgreementInput,
            agreement.judge_agreement,
        ),
        MetricSpec(
            "correlation",
            "Pearson and Spearman correlation of two paired score lists.",
            agreement.CorrelationInput,
            agreement.correlations,
        ),
        MetricSpec(
            "bootstrap_ci",
            "Seeded percentile bootstrap confidence interval of a mean.",
            statistics.BootstrapInput,
            statistics.bootstrap_summary,
        ),
        MetricSpec(
            "paired_test",
            "Two systems on the same cases: mean difference, its CI, permutation and Wilcoxon p.",
            statistics.PairedTestInput,
            statistics.paired_test_from_input,
        ),
    )
}


def get_metric(name: str) -> MetricSpec:
    try:
        return METRICS[name]
    except KeyError:
        raise ConfigError(f"unknown metric {name!r}; available: {', '.join(METRICS)}") from None


def read_metric_input(path: Path) -> Any:
    """Parse a metric input file, reporting a missing file or bad JSON with its location."""
    return read_json_file(path)


def run_metric(name: str, payload: Any, source: str | Path | None = None) -> MetricResult:
    """Validate `payload` against the metric's input model and compute it; input errors become DataError."""
    spec = get_metric(name)
    try:
        validated = spec.input_model.model_validate(payload)
    except ValidationError as exc:
        raise _data_error(exc, source) from exc
    return spec.compute(validated)


def _data_error(exc: ValidationError, source: str | Path | None) -> DataError:
    errors = exc.errors()
    first = errors[0]
    field = ".".join(str(part) for part in first["loc"]) or None
    message = first["msg"].removeprefix("Value error, ")
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})"
    return DataError(message, file=source, field=field)
