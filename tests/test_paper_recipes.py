"""Every paper recipe validates, runs end to end on the scripted model with one case (the data a
recipe names outside the data directory replaced by the bundled fixtures), and its report shows
the paper's numbers beside ours."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import load_recipe, parse_recipe

ROOT = Path(__file__).resolve().parent.parent
PAPERS = sorted((ROOT / "runs" / "recipes" / "papers").glob("*.toml"))
FIXTURES = ROOT / "tests" / "fixtures"

# what CI has instead of the downloads a recipe points at
CI_OPTIONS = {
    "bespoke": {"data_dir": str(FIXTURES / "bespoke")},
    "lampqa": {"data_file": str(FIXTURES / "lampqa" / "Lifestyle_and_Personal_Development_test.jsonl")},
}
KNOWN_FIXTURE_LIMITS = {"bespoke_table6_noise": "items from other users' unrelated cases; benchmark 'bespoke' has"}
PDR_CONTEXTS = {"contexts_file": str(FIXTURES / "pdr_contexts" / "contexts_en.jsonl")}


def ci_recipe(path: Path, tmp_path: Path):
    recipe = load_recipe(path)
    data = recipe.model_dump(mode="python")
    benchmark = data["benchmark"]
    if benchmark["name"] in CI_OPTIONS:
        benchmark["options"] = {**benchmark["options"], **CI_OPTIONS[benchmark["name"]]}
    if "contexts_file" in benchmark["options"]:
        benchmark["options"] = {**benchmark["options"], **PDR_CONTEXTS}
    data["source"] = str(path)
    return parse_recipe(data, source=str(path)).with_overrides(limit=1, out_dir=str(tmp_path / "out"), model="scripted")


def test_there_is_a_recipe_for_every_table_the_issue_names():
    names = {p.stem for p in PAPERS}
    assert names == {
        "pdr_table1_systems",
        "pdr_table2_settings",
        "pdr_table3_memory",
        "bespoke_table4_context",
        "bespoke_table5_retrieval",
        "bespoke_table6_noise",
        "lampqa_table2",
        "aepd_ikat2024",
    }
    for path in PAPERS:
        recipe = load_recipe(path)
        assert recipe.report.reproduces and recipe.report.paper, path.name
        assert all(row.system in {s.name for s in recipe.systems} for row in recipe.report.paper)


@pytest.mark.parametrize("path", PAPERS, ids=[p.stem for p in PAPERS])
def test_each_paper_recipe_runs_on_the_scripted_model_and_reports_the_papers_numbers(path, tmp_path, cache_dir):
    recipe = ci_recipe(path, tmp_path)
    folder = run_recipe(recipe, tmp_path / "run", progress=False)
    summary = json.loads(folder.summary.read_text())
    assert summary["dry_run"] is True
    episodes = summary["episodes"]
    assert episodes["missing"] == 0, episodes
    # the bundled BESPOKE fixture has too few other users' gold items for 50% and 70% noise: those
    # episodes fail with that reason (the full data has enough), every other one must succeed
    allowed = KNOWN_FIXTURE_LIMITS.get(path.stem)
    assert all(allowed and allowed in r["reason"] for r in episodes["failure_reasons"]), episodes
    expected = [(row.row, metric, value) for row in recipe.report.paper for metric, value in row.values.items()]
    assert [(p["row"], p["metric"], p["paper"]) for p in summary["paper"]] == expected
    # ours is computed wherever the metric exists on a one-case dry run
    assert any(p["ours"] is not None for p in summary["paper"]) or all(
        metric.startswith("history.") for _, metric, _ in expected
    )
    html = folder.report.read_text()
    assert 'id="paper"' in html and recipe.report.reproduces.split(",")[0] in html
    # the web the recipe's systems searched is named; a paper recipe searches the wiki corpus, not the sample
    if summary["web"] is not None:
        assert summary["web"]["corpus"] == "wiki" and summary["web"]["documents"] > 10_000 // 2
        doc_web = html[html.index('id="web"') :]
        assert "sandbox corpus <code>wiki</code>" in doc_web[:400] and 'id="web-warning"' not in html


def test_a_paper_recipe_on_the_sample_corpus_is_warned_about_at_start_and_in_the_report(
    tmp_path, cache_dir, capsys, monkeypatch
):
    from tests.test_cli_errors import atelier

    path = ROOT / "runs" / "recipes" / "papers" / "pdr_table1_systems.toml"
    text = path.read_text().replace('corpus = "wiki"', 'corpus = "sample"')
    text = text.replace("contexts_file", "contexts_file_unused") if "contexts_file" in text else text
    recipe = tmp_path / "pdr_on_sample.toml"
    recipe.write_text(text)
    code, _, err = atelier(
        capsys,
        monkeypatch,
        "run",
        str(recipe),
        "--limit",
        "1",
        "--no-progress",
        "--systems",
        "llm_search",
        "--out",
        str(tmp_path / "run"),
    )
    assert "warning: this recipe reproduces PDR-Bench" in err and "searched the bundled sample corpus (63 pages" in err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["web"]["corpus"] == "sample" and summary["web"]["documents"] == 63
    assert 'id="web-warning"' in (tmp_path / "run" / "report.html").read_text()


def test_the_pdr_table1_systems_the_paper_ran_are_switched_on_by_uncommenting_them():
    """Each paper row whose system can run here with a key or a checkout names it (`runs_as`);
    uncommented, every such system validates and the paper's row sits beside it."""
    import tomllib

    path = ROOT / "runs" / "recipes" / "papers" / "pdr_table1_systems.toml"
    text = path.read_text()
    block = text[text.index("# ---- The paper's own systems") : text.index("[[judges]]")]
    switched_on = "\n".join(
        line[2:] if line.startswith(("# [[systems]]", "# name", "# pipeline", "# memory", "# models.")) else line
        for line in block.splitlines()
    )
    data = tomllib.loads(text.replace(block, switched_on))
    recipe = parse_recipe(data, source=str(path))
    names = {s.name for s in recipe.systems}
    rows = {row.row: row for row in recipe.report.paper}
    wanted = {row["row"]: row.get("runs_as") for row in tomllib.loads(text)["report"]["paper"]}
    assert all(name in names for name in wanted.values() if name), wanted
    for row, runs_as in wanted.items():
        assert rows[row].system == (runs_as or rows[row].system)
    # left commented, the rows stay beside the pipelines that stand for them
    plain = load_recipe(path)
    assert {row.system for row in plain.report.paper} == {"deep_research", "llm_search"}
    by_name = {s.name: s for s in recipe.systems}
    assert by_name["o3_deep_research"].pipeline_options["api"] == "responses"
    assert by_name["deerflow"].pipeline_options["agent"] == "langgraph"
    assert by_name["oagents"].pipeline_options["agent"] == "command"
