"""Pure metric math, no LLM: one module per family, each metric with a pydantic input model.

- `pqr`: PDR-Bench P / Q two-level weighted scores, R from FA and CC, overall.
- `bespoke`: BESPOKE 1-5 -> 0-100 criteria and gold-information recall.
- `lampqa`: LaMP-QA per-aspect 0-2 score, normalised and averaged; direct 5-level score; pairwise
  verdicts in both orders (win rate, flip rate).
- `locomo`: LoCoMo QA token F1 with its normalisation and per-category rules.
- `prefeval`: PrefEval error types and preference-following accuracy.
- `aepd`: AEPD personalization (NPP, NPCL, P_score) and diversification (AR, CLU, D_score).
- `ranking`: nDCG@k, P@k, R@k, MRR with trec_eval conventions.
- `agreement`: PCA and MARD (PDR-Bench App. C), Pearson and Spearman; per-criterion agreement of a
  run with labels; BESPOKE feedback accuracy.
- `statistics`: `bootstrap_ci` and `paired_test`, the runner's CI and significance test.
- `registry`: `METRICS`, name -> input model + function + description, used by `atelier metric`.
"""

from atelier.benchmarks.metrics.statistics import ConfidenceInterval, PairedTestResult, bootstrap_ci, paired_test

__all__ = ["ConfidenceInterval", "PairedTestResult", "bootstrap_ci", "paired_test"]
