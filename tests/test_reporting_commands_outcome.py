"""Issue 41, item 3 (and the CLI table of item 7): every command that reports on a run — rescore,
report, compare, meta-eval, trace — ends with the run's outcome line and exits as `run` does (0
clean, 3 failed or degraded, 130 not finished); `compare` shows every degradation kind, the judges'
too; a table printed to a pipe keeps system names whole."""

from __future__ import annotations

import json

from atelier.runs.reading.outcome import EXIT_FAILURES, EXIT_OK
from tests.openai_stub import OpenAIStub
from tests.test_cli_errors import atelier

RECIPE = """name = "{name}"
[benchmark]
name = "tiny"
limit = 2
[models.system]
model = "scripted"
[models.judge]
model = "scripted"
[[systems]]
name = "{system}"
pipeline = "direct"
memory = {{ backend = "none" }}
[[judges]]
name = "lampqa_aspects"
"""


def run(tmp_path, capsys, monkeypatch, name="clean", system="direct-none"):
    recipe = tmp_path / f"{name}.toml"
    recipe.write_text(RECIPE.format(name=name, system=system))
    out = tmp_path / name
    code, _, err = atelier(capsys, monkeypatch, "run", str(recipe), "--out", str(out), "--no-progress")
    assert code == EXIT_OK, err
    return out


def degrade_judgments(folder, *kinds: str) -> None:
    """Give every judgment of the run the degradations `kinds` (as a judge gated or left unscored)."""
    lines = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    for line in lines:
        for judgment in line["judgments"]:
            judgment["degraded"] = [
                {"kind": k, "step": "judge:lampqa_aspects", "count": 1, "detail": "x"} for k in kinds
            ]
    (folder / "results.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def outcome_line(err: str) -> str:
    [line] = [line for line in err.splitlines() if "episodes: " in line]
    return line


def test_rescore_with_every_judgment_failed_exits_3_with_the_outcome_line(tmp_path, capsys, monkeypatch, cache_dir):
    original = run(tmp_path, capsys, monkeypatch)
    with OpenAIStub() as stub:
        stub.script(["400"] * 50)  # every judge call refused: no retry can fix it
        code, out, err = atelier(
            capsys,
            monkeypatch,
            "rescore",
            str(original),
            "--judge",
            "lampqa_aspects",
            "--model",
            "openai/judge-model",
            "--api-base",
            stub.base_url,
            "--api-key",
            "sk-stub",
            "--out",
            str(tmp_path / "rescored"),
            "--no-progress",
            "--no-preflight",  # the preflight's probe would be refused too (exit 2: tests/test_preflight.py)
        )
    assert code == EXIT_FAILURES, err
    assert outcome_line(err).startswith("episodes: 0 scored, 2 answered but not fully judged")
    assert out.strip().endswith(str(tmp_path / "rescored"))


def test_report_exits_as_run_does_on_a_clean_and_on_a_degraded_run(tmp_path, capsys, monkeypatch, cache_dir):
    folder = run(tmp_path, capsys, monkeypatch)
    code, _, err = atelier(capsys, monkeypatch, "report", str(folder))
    assert code == EXIT_OK and outcome_line(err) == "episodes: 2 scored, 0 failed (of 2)"
    degrade_judgments(folder, "judge_output_gated")
    code, _, err = atelier(capsys, monkeypatch, "report", str(folder))
    assert code == EXIT_FAILURES and "degraded: 2 episodes (by kind: judge_output_gated 2)" in err


def test_compare_shows_every_kind_and_ends_with_each_runs_outcome(tmp_path, capsys, monkeypatch, cache_dir):
    clean = run(tmp_path, capsys, monkeypatch)
    gated = run(tmp_path, capsys, monkeypatch, name="gated")
    degrade_judgments(gated, "criterion_unscored", "judge_output_gated")
    atelier(capsys, monkeypatch, "report", str(gated))
    code, out, err = atelier(capsys, monkeypatch, "compare", str(clean), str(gated))
    assert code == EXIT_FAILURES, err
    assert "2 episodes: criterion_unscored 2, judge_output_gated 2" in out
    assert "clean: episodes: 2 scored, 0 failed (of 2)" in err
    assert "gated: degraded: 2 episodes (by kind: criterion_unscored 2, judge_output_gated 2)" in err
    code, _, err = atelier(capsys, monkeypatch, "compare", str(clean), str(clean))
    assert code == EXIT_OK, err


def test_trace_and_meta_eval_end_with_the_runs_outcome(tmp_path, capsys, monkeypatch, cache_dir):
    folder = run(tmp_path, capsys, monkeypatch)
    code, _, err = atelier(capsys, monkeypatch, "trace", str(folder), "tiny:0", "--all")
    assert code == EXIT_OK and outcome_line(err) == "episodes: 2 scored, 0 failed (of 2)"
    code, _, err = atelier(
        capsys, monkeypatch, "meta-eval", str(folder), "--judge", "lampqa_aspects", "--against", str(folder)
    )
    assert code == EXIT_OK, err
    degrade_judgments(folder, "spans_removed")
    code, _, err = atelier(capsys, monkeypatch, "trace", str(folder), "tiny:0", "--all")
    assert code == EXIT_FAILURES and "spans_removed 2" in err
    code, _, err = atelier(
        capsys, monkeypatch, "meta-eval", str(folder), "--judge", "lampqa_aspects", "--against", str(folder)
    )
    assert code == EXIT_FAILURES and "spans_removed 2" in err


def test_a_table_printed_to_a_pipe_keeps_long_system_names_whole(tmp_path, capsys, monkeypatch, cache_dir):
    long = "deep_research-agentic-recall-with-a-name-longer-than-any-column"
    recipe = tmp_path / "long.toml"
    recipe.write_text(RECIPE.format(name="long", system=long))
    code, _, err = atelier(capsys, monkeypatch, "run", str(recipe), "--out", str(tmp_path / "long"), "--no-progress")
    assert code == EXIT_OK and long in err and "…" not in err  # the summary table, on stderr
    code, out, _ = atelier(capsys, monkeypatch, "compare", str(tmp_path / "long"), str(tmp_path / "long"))
    assert long in out and "…" not in out
