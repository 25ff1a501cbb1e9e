"""Issue 50, item 2: the coverage, size and power figures docs/statistics.md quotes are what the
calibration script prints (it regenerates them), and the few-clusters warning starts where they say
coverage falls under 93%."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from atelier.benchmarks.metrics.calibration import BEGIN, END, few_clusters_threshold, tables, write_into
from atelier.benchmarks.metrics.clusters import MIN_CLUSTERS

DOCS = Path("docs/statistics.md")


def _block() -> str:
    return DOCS.read_text(encoding="utf-8").split(BEGIN, 1)[1].split(END, 1)[0]


def test_the_warning_starts_where_the_quoted_coverage_falls_under_93_percent() -> None:
    quoted = re.search(r"from \*\*(\d+) clusters\*\* on", _block())
    assert quoted is not None and int(quoted.group(1)) == MIN_CLUSTERS


def test_the_threshold_is_the_fewest_clusters_from_which_every_typical_coverage_holds() -> None:
    def row(g: int, coverage: float, typical: bool = True) -> dict:
        return {"clusters": g, "coverage": coverage, "typical": typical, "testable": True}

    rows = [row(5, 0.90), row(8, 0.92), row(10, 0.95), row(25, 0.94), row(8, 0.80, typical=False)]
    assert few_clusters_threshold(rows) == 10
    assert few_clusters_threshold([*rows, row(25, 0.925)]) == 26  # short at the last: beyond the grid


def test_the_block_is_replaced_in_place(tmp_path) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"before\n{BEGIN}\nold\n{END}\nafter\n")
    write_into(page, "new\n")
    assert page.read_text() == f"before\n{BEGIN}\nnew\n{END}\nafter\n"
    with pytest.raises(SystemExit, match="no <!-- calibration:begin -->"):
        write_into(DOCS.with_name("README.md"), "x")


@pytest.mark.battery
@pytest.mark.timeout(3600)
def test_the_quoted_figures_are_what_the_script_prints() -> None:
    assert _block().strip() == tables().strip()
