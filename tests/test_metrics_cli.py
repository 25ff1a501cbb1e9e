"""`atelier metric`: every bundled example runs through the CLI; input errors are one line, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from atelier.benchmarks.common.errors import AtelierError, ConfigError, DataError
from atelier.benchmarks.metrics.registry import EXAMPLES_DIR, METRICS, read_metric_input, run_metric
from atelier.runs.cli import metric as metric_cli

ATELIER = Path(sys.executable).with_name("atelier")

# One headline value per example, computed by hand from the example file.
EXPECTED = {
    "pqr": ("overall", (6.4 + 6.75 + (20 / 3 + 7.5) / 2) / 3),
    "bespoke": ("average", (60 + 60 + 80 + 60 + 50) / 5),
    "lampqa": ("score", (1 + 0.5 + 0.5 + 0 + 1 + 1 + 0) / 7),
    # candidate outcomes per order: (1, 1), (1, 0) flip, (0.5, 1) flip, (0, 0)
    "lampqa_pairwise": ("win_rate", (1 + 0.5 + 0.75 + 0) / 4),
    # 3/10 precision, full recall: 2*0.3/1.3; comma parts (0 + 1)/2; psychology counseling vs
    # psychology counseling certification: P 1, R 2/3 -> 0.8; refusal 1; no refusal 0
    "locomo": ("f1", (0.6 / 1.3 + 0.5 + 0.8 + 1 + 0) / 5),
    # only the first item has no error
    "prefeval": ("accuracy", 0.2),
    "aepd": ("p_score", 0.0),
    "ranking": ("n_queries", 2),
    "judge_agreement": ("pca", 0.6),
    "correlation": ("n", 8),
    "bootstrap_ci": ("mean", 0.666),
    "paired_test": ("mean_difference", 0.05),
}


@pytest.fixture
def cli() -> typer.Typer:
    app = typer.Typer()
    metric_cli.register(app, typer.Typer())
    return app


def test_every_metric_has_an_example_and_an_expectation() -> None:
    examples = {path.stem for path in EXAMPLES_DIR.glob("*.json")}
    assert examples == set(METRICS) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(METRICS))
def test_example_runs_through_the_cli(cli: typer.Typer, name: str) -> None:
    result = CliRunner().invoke(cli, [name, "--input", str(EXAMPLES_DIR / f"{name}.json")])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    key, value = EXPECTED[name]
    assert printed[key] == pytest.approx(value)


def test_example_inputs_document_every_field() -> None:
    for spec in METRICS.values():
        schema = spec.input_model.model_json_schema()
        for definition in [schema, *schema.get("$defs", {}).values()]:
            for field_name, field in definition.get("properties", {}).items():
                assert "description" in field, f"{spec.name}: {definition.get('title')}.{field_name} has no description"


@pytest.mark.parametrize("args", [["--list"], ["list"]])
def test_list_names_every_metric(cli: typer.Typer, args: list[str]) -> None:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0
    assert [row["name"] for row in json.loads(result.stdout)] == list(METRICS)


def test_schema_prints_the_documented_input(cli: typer.Typer) -> None:
    result = CliRunner().invoke(cli, ["lampqa", "--schema"])
    schema = json.loads(result.stdout)
    assert schema["title"] == "LampQAInput"
    assert "aspects" in schema["required"]


def test_input_errors_raise_atelier_errors_naming_the_field(cli: typer.Typer, tmp_path: Path) -> None:
    payload = json.loads((EXAMPLES_DIR / "pqr.json").read_text())
    del payload["quality"]["LOGC"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(payload))
    result = CliRunner().invoke(cli, ["pqr", "--input", str(bad)])
    assert isinstance(result.exception, DataError)
    assert result.exception.field == "quality"
    assert "quality dimensions must be exactly DEIN, LOGC, CLAR: missing LOGC" in str(result.exception)
    unknown = CliRunner().invoke(cli, ["nope", "--input", str(bad)])
    assert isinstance(unknown.exception, ConfigError)
    missing_input = CliRunner().invoke(cli, ["pqr"])
    assert isinstance(missing_input.exception, ConfigError)


def test_pqr_accepts_unscored_criteria_and_weights_off_one_as_deepresearch_bench_computes(
    cli: typer.Typer, tmp_path: Path
) -> None:
    # DeepResearch Bench, utils/score_calculator.py::calculate_weighted_scores, worked by hand: an unscored
    # criterion leaves its dimension's weighted mean; a dimension with none scored is 0 and keeps its weight;
    # criterion weights are divided by the scored ones' sum, dimension weights are used as given
    payload = json.loads((EXAMPLES_DIR / "pqr.json").read_text())
    payload["personalization"]["GOAL"]["criteria"][1]["score"] = None  # GOAL = 0.6 * 7 / 0.6 = 7
    payload["personalization"]["PRES"]["criteria"][0]["score"] = None  # PRES = 0
    payload["personalization"]["CONT"]["criteria"][1]["weight"] = 0.3  # CONT = (0.5 * 8 + 0.3 * 6) / 0.8 = 7.25
    payload["quality"]["DEIN"]["weight"] = 0.5  # Q weights sum to 1.1
    path = tmp_path / "official.json"
    path.write_text(json.dumps(payload))
    result = CliRunner().invoke(cli, ["pqr", "--input", str(path)])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    p, q = printed["personalization"], printed["quality"]
    assert p["dimensions"] == pytest.approx({"GOAL": 7.0, "CONT": 7.25, "PRES": 0.0, "ACTI": 0.7 * 6 + 0.3 * 4})
    assert p["score"] == pytest.approx(0.35 * 7 + 0.3 * 7.25 + 0.15 * 0 + 0.2 * 5.4)  # 5.705
    assert p["skipped_criteria"] == 2 and p["unscored_dimensions"] == ["PRES"]
    assert q["score"] == pytest.approx(0.5 * 6 + 0.3 * 7 + 0.3 * 7.5) and q["weight_sum"] == pytest.approx(1.1)


def test_bad_json_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "broken.json"
    bad.write_text('{"values": [1,\n 2,, 3]}')
    with pytest.raises(DataError) as caught:
        read_metric_input(bad)
    assert (caught.value.file, caught.value.line) == (str(bad), 2)
    with pytest.raises(DataError, match="cannot read"):
        read_metric_input(tmp_path / "absent.json")


def test_input_of_the_wrong_shape_names_the_source(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="valid dictionary") as caught:
        run_metric("bootstrap_ci", [1, 2, 3], source=tmp_path / "list.json")
    assert caught.value.file == str(tmp_path / "list.json")


def test_missing_field_is_reported_with_its_path() -> None:
    with pytest.raises(DataError) as caught:
        run_metric("bespoke", {"ratings": {"need_alignment": 3, "content_depth": 3, "tone": 3}})
    assert caught.value.field == "ratings.explanation_style"
    assert "Field required" in str(caught.value)
    assert isinstance(caught.value, AtelierError)


@pytest.mark.skipif(not ATELIER.exists(), reason="the atelier console script is not installed in this environment")
def test_console_script_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(
            {"aspects": [{"aspect": "a", "personalized": True, "words": 3}, {"aspect": "a", "personalized": False}]}
        )
    )
    completed = subprocess.run(
        [str(ATELIER), "metric", "aepd", "--input", str(bad)], capture_output=True, text=True, timeout=60
    )
    assert completed.returncode == 2
    assert completed.stdout == ""
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0] == f"error: {bad} field 'aspects': aspect 'a' is listed twice"
