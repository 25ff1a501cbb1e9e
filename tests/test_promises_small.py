"""Issue 50, item 6: the smaller promises — the LaMP-QA aspect guide when judgments are repeated,
the labelling page's scale and the criterion text saying the same thing, a note where a table sets
means over different cases side by side, and `--limit N` being the seeded subset the docs say."""

from __future__ import annotations

import json
import re
from pathlib import Path

from atelier.benchmarks.registry import load_cases
from atelier.runs.reading.report import interval_warnings, unequal_n_note
from atelier.runs.studies.labelling import RUBRICS
from atelier.runs.studies.meta_eval import _aspect_guide


def test_the_aspect_guide_reads_the_rubric_of_a_repeated_judgment() -> None:
    aspects = [{"aspect": "Budget under 100 euros"}, {"aspect": "Vegetarian options"}]
    once = _aspect_guide({"aspects": aspects}, "aspect_2")
    repeated = _aspect_guide({"repeats": [{"aspects": aspects}, {"aspects": aspects}]}, "aspect_2")
    assert once == repeated and "Aspect: Vegetarian options" in repeated[1]


def test_the_page_scale_and_the_criterion_text_say_the_same_thing() -> None:
    rubric = RUBRICS["lampqa_aspects"]
    scale, text = _aspect_guide({"aspects": [{"aspect": "x"}]}, "aspect_1")
    page = [str(rating) for rating in range(rubric.low, rubric.high + 1)]
    assert f"{', '.join(page[:-1])} or {page[-1]}" in text  # the ratings the page offers: 0, 1 or 2
    halved = [f"{rating * rubric.factor:g}" for rating in range(rubric.low, rubric.high + 1)]
    assert f"{', '.join(halved[:-1])} or {halved[-1]}" in text and scale == f"{halved[0]}-{halved[-1]}"


def _summary(n_a: int, n_b: int, reached: bool) -> dict:
    cell = lambda n: {"n": n, "mean": 0.5, "ci95": [0.4, 0.6]}
    return {
        "judges": ["j"],
        "systems": {"a": {"judges": {"j": cell(n_a)}}, "b": {"judges": {"j": cell(n_b)}}},
        "clusters": {"dimensions": {}},
        "comparisons": [],
        "budget": {"reached": reached},
    }


def test_a_table_of_means_over_different_cases_says_so() -> None:
    assert unequal_n_note(_summary(8, 8, False)) is None
    note = unequal_n_note(_summary(8, 5, True))
    assert note is not None and "the budget stopped the run" in note and "j: a 8, b 5" in note
    assert any(
        line.startswith("note: the systems' means rest on different numbers of cases")
        for line in interval_warnings(_summary(8, 5, True))
    )


def test_limit_is_a_seeded_subset_in_suite_order_as_the_docs_say(tmp_path) -> None:
    cases = tmp_path / "cases.jsonl"
    rows = [
        {"id": f"c{i:02d}", "benchmark": "mine", "user_id": f"u{i % 3}", "query": {"text": f"question {i}"}}
        for i in range(30)
    ]
    cases.write_text("".join(json.dumps(row) + "\n" for row in rows))
    chosen = [c.id for c in load_cases("jsonl", None, None, 5, {"path": str(cases)}, seed=0)]
    again = [c.id for c in load_cases("jsonl", None, None, 5, {"path": str(cases)}, seed=0)]
    other = [c.id for c in load_cases("jsonl", None, None, 5, {"path": str(cases)}, seed=1)]
    assert chosen == again == sorted(chosen) and chosen != other
    assert chosen != [f"c{i:02d}" for i in range(5)]  # not the file's first five
    docs = Path("docs/runs-and-reports.md").read_text()
    assert "--limit 3 --out runs/out/try       # 3 cases, a seeded subset" in docs
    assert re.search(r"takes a seeded subset of N cases", docs) and "first 3 cases" not in docs
