"""`atelier simulate ...` as a user runs it: synthesize PDR contexts for three users, then run the
`context` settings on them end to end; check a contexts file; rate a run into R-J pairs."""

from __future__ import annotations

import json

import pytest

from atelier.benchmarks.common.errors import DataError
from atelier.benchmarks.registry import load_cases
from atelier.benchmarks.rj_pairs import with_rj_pairs
from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import parse_recipe
from tests.cli_in_process import cli  # noqa: F401 (a fixture)
from tests.test_cli_e2e import env, lines  # noqa: F401 (env: the CLI tests' fixture)


@pytest.mark.battery
def test_synthesized_contexts_make_the_pdr_context_settings_runnable(cli, tmp_path, env):
    out = tmp_path / "contexts"
    done = cli("simulate", "history", "--benchmark", "pdr", "--limit", "3", "--out", str(out), env=env)
    # a dry run's history cannot be reversed into its persona: the gate fails, naming the users; the file is written
    assert done.returncode == 3, done.stderr
    stderr = done.stderr.splitlines()
    gate = stderr[stderr.index("reversibility gate:") + 1 :]
    assert [line.split(":")[0] for line in gate[:3]] == ["  User1", "  User2", "  User3"]
    assert all("facets recovered, below the minimum 50%" in line for line in gate[:3])
    assert any(line.startswith("overall reversibility: ") for line in stderr)
    printed = json.loads(done.stdout)
    assert printed["overall"]["users"] == 3 and printed["dry_run"]
    assert printed["users"] == {"User1": "complete", "User2": "complete", "User3": "complete"}

    manifest = json.loads((out / "manifest.json").read_text())
    assert list(manifest["per_user"]) == ["User1", "User2", "User3"]
    for figures in manifest["per_user"].values():
        protocol = figures["protocol"]
        assert not protocol["content_failures"] and protocol["items"] == figures["synthesis"]["items_written"]
        # items per tag count what the inverse pass cited: the scripted checker cites no real item id
        assert protocol["counted_by"] == "attribution" and protocol["counted_items"] == 0
        assert len(protocol["tags_below_minimum"]) == protocol["preference_tags"]
        assert figures["reversibility"]["traits"] == protocol["traits_total"]
        assert 0 <= figures["reversibility"]["recovered_share"] <= 1
        assert figures["reversibility_problems"]
    overall = manifest["overall"]["reversibility"]
    assert overall["traits"] == sum(f["reversibility"]["traits"] for f in manifest["per_user"].values())
    assert set(overall["per_user_recovered_share"]) == {"User1", "User2", "User3"}
    assert manifest["job"]["models"]["history_writer"]["model"] == "scripted" and manifest["seed"] == 0
    assert len(lines(out / "contexts_en.jsonl")) == 3 and lines(out / "ledger.jsonl")

    # the check of the file reads the history's manifest: the same checks (the inverse pass), the same verdict
    again = cli("simulate", "check", "--contexts", str(out / "contexts_en.jsonl"), env=env)
    assert again.returncode == 3 and "overall reversibility: " in again.stderr, again.stderr
    assert {f["protocol"]["counted_by"] for f in json.loads(again.stdout)["per_user"].values()} == {"attribution"}
    # without the inverse pass the items count for their labels, once they pass the content checks
    labels = cli("simulate", "check", "--contexts", str(out / "contexts_en.jsonl"), "--no-reversibility", env=env)
    assert labels.returncode == 0, labels.stderr
    for figures in json.loads(labels.stdout)["per_user"].values():
        protocol = figures["protocol"]
        assert protocol["ok"] and protocol["counted_by"] == "labels" and not protocol["content_failures"]
        assert min(protocol["items_per_tag"].values()) >= 5 and 0.2 <= protocol["conversational_share"] <= 0.5

    benchmark = manifest["recipe"]["benchmark"]
    recipe = tmp_path / "context.toml"
    recipe.write_text(
        'name = "pdr-context"\n'
        f'[benchmark]\nname = "pdr"\nsetting = "context"\nlimit = 4\n'
        f'[benchmark.options]\ncontexts_file = "{benchmark["options"]["contexts_file"]}"\n'
        f"users = {json.dumps(benchmark['options']['users'])}\n"
        '[[systems]]\nname = "context"\nmemory = { backend = "retrieval", method = "bm25" }\n'
        '[[systems]]\nname = "both"\nsetting = "persona+context"\nmemory = { backend = "full", budget_tokens = 100000 }\n'
    )
    run = cli("run", str(recipe), "--no-progress", "--out", str(tmp_path / "run"), env=env)
    assert run.returncode == 0, run.stderr
    results = lines(tmp_path / "run" / "results.jsonl")
    assert len(results) == 8 and all(r["status"] == "ok" for r in results)
    assert {r["user_id"] for r in results} <= {"User1", "User2", "User3"}
    context = [r for r in results if r["system"] == "context"]
    assert all(r["setting"] == "context" and r["user_context"]["event_ids"] for r in context)
    assert all(i.startswith(r["user_id"] + ":") for r in context for i in r["user_context"]["event_ids"])
    both = [r for r in results if r["system"] == "both"]
    assert all(f"{r['user_id']}:persona" in r["user_context"]["event_ids"] for r in both)
    assert all(len(r["user_context"]["event_ids"]) > 100 for r in both)  # persona and the whole history


def test_bad_options_are_refused_with_the_reason(cli, tmp_path, env):
    done = cli("simulate", "history", "--users", "User1,Nobody", "--out", str(tmp_path / "x"), env=env)
    assert done.returncode == 2 and "--users: no persona 'Nobody'" in done.stderr and "Traceback" not in done.stderr
    done = cli(
        "simulate", "history", "--limit", "1", "--conversational-share", "0.7", "--out", str(tmp_path / "x"), env=env
    )
    assert done.returncode == 2 and "conversational_share" in done.stderr and "0.5" in done.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.battery
def test_role_settings_come_from_a_recipe_and_the_command_line_wins(cli, tmp_path, env):
    recipe = tmp_path / "history.toml"
    recipe.write_text(
        '[models.user_sim]\nmodel = "scripted?seed=1"\nmax_tokens = 300\n'
        '[models.history_checker]\nmodel = "scripted?seed=2"\n'
        '[benchmark]\nname = "pdr"\n'
    )  # a run recipe's other tables are not read
    out = tmp_path / "h"
    done = cli(
        "simulate",
        "history",
        "--users",
        "User1",
        "--recipe",
        str(recipe),
        "--max-tokens",
        "900",
        "--out",
        str(out),
        "--no-check",
        "--no-progress",
        env=env,
    )
    assert done.returncode == 0, done.stderr
    models = json.loads((out / "manifest.json").read_text())["job"]["models"]
    assert models["history_writer"]["model"] == "scripted?seed=1"  # history_writer falls back to user_sim
    assert models["history_checker"]["model"] == "scripted?seed=2"
    assert models["history_writer"]["max_tokens"] == models["history_checker"]["max_tokens"] == 900

    recipe.write_text('[models.history_writer]\nmodel = "scripted"\nmax_tokens = 0\n')
    bad = cli("simulate", "history", "--users", "User1", "--recipe", str(recipe), "--out", str(tmp_path / "x"), env=env)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert f"{recipe}: models.history_writer.max_tokens: Input should be greater than 0" in bad.stderr
    recipe.write_text('[models.writer_of_histories]\nmodel = "scripted"\n')
    bad = cli("simulate", "history", "--users", "User1", "--recipe", str(recipe), "--out", str(tmp_path / "x"), env=env)
    assert bad.returncode == 2 and f"{recipe}: models.writer_of_histories: not a role" in bad.stderr
    assert not (tmp_path / "x").exists()


def test_check_names_the_protocol_violations_of_a_contexts_file(cli, env):
    done = cli("simulate", "check", "--contexts", "tests/fixtures/pdr_contexts/contexts_en.jsonl", env=env)
    assert done.returncode == 3
    report = json.loads(done.stdout)
    assert report["overall"]["users"] == 25 and not report["overall"]["protocol_ok"]
    problems = report["per_user"]["User1"]["protocol"]["problems"]
    assert any("not linked to a trait" in p and "memory-1" in p for p in problems)
    assert any("20 preference tag(s) with fewer than 5 items" in p for p in problems)


def test_feedback_turns_a_runs_responses_into_rj_pairs_for_later_runs(cli, tmp_path, env, cache_dir):
    recipe = parse_recipe(
        {
            "name": "s",
            "benchmark": {"name": "sample", "limit": 2},
            "systems": [{"name": "direct", "memory": {"backend": "full"}}],
        }
    )
    run_recipe(recipe, tmp_path / "run", progress=False)
    pairs = tmp_path / "pairs.jsonl"
    done = cli("simulate", "feedback", "--run", str(tmp_path / "run"), "--out", str(pairs), env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rated"] == 2 and json.loads(done.stdout)["rj_pairs"] == 8
    records = lines(pairs)
    assert all(
        len(r["rj_pairs"]) == 4
        and {p["criterion"] for p in r["rj_pairs"]} == {"need_alignment", "content_depth", "tone", "explanation_style"}
        for r in records
    )
    assert all(1 <= p["score"] <= 5 and p["feedback"] for r in records for p in r["rj_pairs"])

    cases = load_cases("sample", limit=2)
    before = {c.id: len(c.gold.rj_pairs) for c in cases}
    after = {c.id: len(c.gold.rj_pairs) for c in with_rj_pairs(cases, pairs)}
    assert after == {i: n + 4 for i, n in before.items()}
    with pytest.raises(DataError, match="no R-J pairs for any of the"):
        with_rj_pairs(load_cases("tiny"), pairs)


def test_simulated_rj_pairs_let_the_bespoke_judge_score_a_benchmark_without_them(tmp_path, cache_dir):
    import asyncio

    from atelier.benchmarks.common.errors import ConfigError
    from atelier.runs.studies.simulate_feedback import rate_run

    lampqa = {
        "name": "lampqa",
        "limit": 2,
        "options": {"data_file": "tests/fixtures/lampqa/Lifestyle_and_Personal_Development_test.jsonl"},
    }
    systems = [{"name": "direct", "memory": {"backend": "full"}}]
    first = run_recipe(
        parse_recipe({"name": "a", "benchmark": lampqa, "systems": systems}), tmp_path / "a", progress=False
    )
    bespoke = [{"name": "bespoke", "recall": False}]
    with pytest.raises(ConfigError, match="response-judgment pairs"):
        run_recipe(
            parse_recipe({"name": "b", "benchmark": lampqa, "systems": systems, "judges": bespoke}),
            tmp_path / "refused",
            progress=False,
        )

    report = asyncio.run(rate_run(first.path, tmp_path / "pairs.jsonl"))
    assert report["rated"] == 2 and not report["failed"]
    recipe = parse_recipe(
        {
            "name": "c",
            "benchmark": {**lampqa, "rj_pairs_file": str(tmp_path / "pairs.jsonl")},
            "systems": systems,
            "judges": bespoke,
        }
    )
    judged = run_recipe(recipe, tmp_path / "c", progress=False)
    results = lines(judged.results)
    assert len(results) == 2 and all(r["status"] == "ok" for r in results)
    assert all(r["scores"]["bespoke"] is not None and 20 <= r["scores"]["bespoke"] <= 100 for r in results)
