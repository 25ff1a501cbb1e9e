"""Every unknown name or key says what was probably meant (issue 52): recipe keys at any depth,
memory backend, judge, pipeline and benchmark names, a backend named by one of another backend's
option values; and a data file that is not there says where it was looked for."""

from __future__ import annotations

import copy

import pytest

from atelier.benchmarks import data_files, download
from atelier.benchmarks.common.errors import ConfigError, DataError
from atelier.benchmarks.common.suggest import closest, did_you_mean, fields_at
from atelier.benchmarks.registry import get_benchmark
from atelier.graphs.pipelines import PIPELINES
from atelier.runs.folder.recipe import _validator_model, parse_recipe

BASE = {
    "name": "t",
    "benchmark": {"name": "sample", "limit": 1},
    "systems": [{"name": "a", "memory": {"backend": "retrieval"}}],
    "judges": [{"name": "lampqa_aspects"}],
    "models": {"judge": {"model": "scripted"}},
    "run": {"concurrency": 2},
}


def problem(change) -> str:
    data = copy.deepcopy(BASE)
    change(data)
    with pytest.raises(ConfigError) as info:
        parse_recipe(data, source="r.toml")
    return str(info.value)


def typo(word: str) -> str:
    return word[0] + word[2:]  # the second letter left out


@pytest.mark.parametrize(
    ("table", "where"),
    [
        (("run",), lambda d: d["run"]),
        (("models", "judge"), lambda d: d["models"]["judge"]),
        (("systems", 0, "memory", "retrieval"), lambda d: d["systems"][0]["memory"]),
        (("systems", 0), lambda d: d["systems"][0]),
        (("benchmark",), lambda d: d["benchmark"]),
        ((), lambda d: d),
    ],
)
def test_every_mistyped_key_at_every_depth_is_pointed_at_the_key(table, where):
    keys = [k for k in fields_at(_validator_model(), table) if len(k) >= 5]
    assert len(keys) >= 2, table
    for key in keys:

        def change(data, key=key):
            where(data)[typo(key)] = 1

        said = problem(change)
        assert "unknown key (not allowed here)" in said and "did you mean" in said, said
        assert key in closest(typo(key), fields_at(_validator_model(), table)) and repr(key) in said, said


@pytest.mark.parametrize(
    ("value", "meant"),
    [
        ("bm25", "retrieval with method = 'bm25'"),
        ("hybrid", "retrieval with method = 'hybrid'"),
        ("pseudo_history", "retrieval with expansion = 'pseudo_history'"),
        ("retreival", "'retrieval'"),
        ("persona_modle", "'persona_model'"),
    ],
)
def test_a_memory_backend_name_points_to_the_backend_or_the_option_that_holds_it(value, meant):
    said = problem(lambda d: d["systems"][0]["memory"].update(backend=value))
    assert f"systems[0].memory.backend: unknown memory backend {value!r}; valid: " in said
    assert f"did you mean {meant}" in said and said.count("\n") == 0, said


def test_judge_pipeline_benchmark_and_role_names_are_suggested():
    assert "did you mean 'lampqa_aspects'" in problem(lambda d: d["judges"][0].update(name="lampqa_aspect"))
    assert "did you mean 'deep_research'?" in problem(lambda d: d["systems"][0].update(pipeline="deep_reserch"))
    assert "did you mean 'sample'?" in problem(lambda d: d["benchmark"].update(name="sampel"))
    assert "did you mean 'judge'?" in problem(lambda d: d["models"].update(jduge={"model": "scripted"}))
    with pytest.raises(KeyError, match=r"unknown benchmark 'lampq'; valid: .*; did you mean 'lampqa'\?"):
        get_benchmark("lampq")
    with pytest.raises(KeyError, match=r"did you mean 'planpers'\?"):
        PIPELINES.get("planper")


def test_nothing_close_suggests_nothing():
    assert did_you_mean("zzzz", ["concurrency", "epochs"]) == ""
    said = problem(lambda d: d["run"].update(qqqqqqq=1))
    assert said.endswith("run.qqqqqqq: unknown key (not allowed here)")


def test_a_data_file_not_found_offline_says_where_it_was_looked_for(tmp_path, monkeypatch):
    monkeypatch.setenv(data_files.ENV_DATA_DIR, str(tmp_path / "data"))
    monkeypatch.setenv(data_files.ENV_CACHE_DIR, str(tmp_path / "cache"))
    (tmp_path / "data").mkdir()

    def offline(entry, dest):
        raise DataError(f"download of {entry.url} failed: [Errno -2] Name or service not known", file=entry.relpath)

    monkeypatch.setattr(download, "fetch_checked", offline)
    with pytest.raises(DataError) as info:
        download.resolve("locomo/locomo10.json")
    said = str(info.value)
    assert f"the data directory {tmp_path}/data/locomo/locomo10.json" in said
    assert f"the cache {tmp_path}/cache/data/locomo/locomo10.json" in said and "download of https://" in said


def test_simulate_recipe_roles_find_recipes_as_every_command_does_and_suggest(tmp_path):
    from pathlib import Path

    from atelier.runs.cli.simulate import recipe_roles

    assert recipe_roles(Path("quickstart")) == {}  # a shipped recipe by name: no simulated-user roles
    mistyped = tmp_path / "roles.toml"
    mistyped.write_text('[models.user_sm]\nmodel = "scripted"\n')
    with pytest.raises(ConfigError, match=r"models\.user_sm: not a role; .*; did you mean 'user_sim'\?"):
        recipe_roles(mistyped)
