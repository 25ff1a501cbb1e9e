"""summary.json names the cases' cluster design (issue 45): PDR-Bench's persona x task, and each
cell's design effect; every benchmark's loader gives its cases their cluster keys."""

from __future__ import annotations

import numpy as np
import pytest

from atelier.benchmarks.common.errors import AtelierError
from atelier.benchmarks.registry import load_cases
from atelier.runs.folder.results import ResultRecord, result_key
from atelier.runs.reading.summary import summarize


def _pdr_cases(limit: int | None = None):
    try:
        return load_cases("pdr", None, "persona", limit, {}, seed=0)
    except AtelierError as exc:  # the PDR-Bench files are not here (CI without the shared data)
        pytest.skip(f"PDR-Bench data not available: {exc}")


def _records(cases, systems, rng) -> list[ResultRecord]:
    persona = {c.clusters["persona"]: rng.normal() for c in cases}
    return [
        ResultRecord(
            key=result_key(c.id, s),
            run_id="r",
            case_id=c.id,
            system=s,
            benchmark="pdr",
            user_id=c.user_id,
            setting="persona",
            status="ok",
            scores={"pqr": 5 + persona[c.clusters["persona"]] * (i == 0) + rng.normal(scale=0.3)},
        )
        for c in cases
        for i, s in enumerate(systems)
    ]


def test_a_pdr_summary_names_persona_and_task_clusters_and_their_design_effect() -> None:
    cases = _pdr_cases()
    assert len(cases) == 250 and all(set(c.clusters) == {"persona", "task"} for c in cases)
    records = _records(cases, ["a", "b"], np.random.default_rng(0))
    summary = summarize(records, ["a", "b"], ["pqr"], clusters={c.id: c.clusters for c in cases})
    assert summary["clusters"]["dimensions"] == {"persona": 25, "task": 50}
    cell = summary["systems"]["a"]["judges"]["pqr"]
    assert cell["n_clusters"] == {"persona": 25, "task": 50}
    assert "persona (25) x task (50)" in cell["ci_method"]
    assert cell["design_effect"] > 3  # a's scores move with the persona
    [comparison] = summary["comparisons"]
    assert comparison["n_clusters"] == {"persona": 25, "task": 50} and comparison["design_effect"] > 3
    unclustered = summarize(records, ["a", "b"], ["pqr"])
    assert unclustered["clusters"]["dimensions"] == {}
    low, high = cell["ci95"]
    naive_low, naive_high = unclustered["systems"]["a"]["judges"]["pqr"]["ci95"]
    assert high - low > 1.5 * (naive_high - naive_low)


def test_loaders_give_cases_their_cluster_keys() -> None:
    sample = load_cases("sample", "all", "context", None, {}, seed=0)
    assert all(c.clusters == {"user": c.user_id} for c in sample)
    assert "clusters" not in sample[0].view().model_dump()  # systems never see them
    try:
        locomo = load_cases("locomo", None, None, 50, {}, seed=0)
        ikat = load_cases("ikat", None, None, 50, {}, seed=0)
    except AtelierError as exc:
        pytest.skip(f"LoCoMo / iKAT data not available: {exc}")
    assert all(set(c.clusters) == {"conversation"} for c in locomo)
    assert all(set(c.clusters) == {"topic"} and c.clusters["topic"].count(":") == 1 for c in ikat)
