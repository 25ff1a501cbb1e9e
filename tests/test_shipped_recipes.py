"""Shipped recipes by name, `atelier recipe list` and `atelier recipe new` (issue 40, item 2): what a
user of the installed wheel has with no checkout at hand."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from atelier.benchmarks.common.errors import ConfigError
from atelier.runs.cli import main
from atelier.runs.folder.recipe import load_recipe
from atelier.runs.folder.shipped import recipe_file, shipped_recipes

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def atelier(capsys, monkeypatch):
    """`atelier ARGS` in this process: (exit code, stdout, stderr)."""

    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["atelier", *args])
        capsys.readouterr()
        with pytest.raises(SystemExit) as exited:
            main()
        out, err = capsys.readouterr()
        return int(exited.value.code or 0), out, err

    return run


def test_every_shipped_recipe_has_a_name_and_loads_by_it():
    on_disk = sorted(
        p.relative_to(ROOT / "runs" / "recipes").with_suffix("").as_posix()
        for p in (ROOT / "runs" / "recipes").rglob("*.toml")
    )
    assert list(shipped_recipes()) == on_disk and "quickstart" in on_disk and "papers/pdr_table1_systems" in on_disk
    assert load_recipe("quickstart").name == "quickstart"
    assert recipe_file("papers/lampqa_table2").name == "lampqa_table2.toml"


def test_a_name_that_is_neither_a_file_nor_shipped_is_refused_naming_the_closest(tmp_path, monkeypatch, atelier):
    with pytest.raises(ConfigError, match=r"no shipped recipe 'quickstrt'; did you mean 'quickstart'\? \(shipped: "):
        recipe_file("quickstrt")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quickstart.toml").write_text('name = "mine"\n')  # a path ending in .toml is the user's file
    assert recipe_file("quickstart.toml") == Path("quickstart.toml")
    code, _, err = atelier("recipe", "check", "quickstrt")
    assert code == 2 and err.startswith("error: no shipped recipe 'quickstrt'") and "Traceback" not in err


@pytest.mark.parametrize("name", ["quickstart", "pipelines", "papers/pdr_table1_systems"])
def test_a_shipped_name_is_found_whatever_stands_in_the_current_directory(tmp_path, monkeypatch, atelier, name):
    """`atelier run quickstart --out quickstart` leaves a folder named quickstart: the name still
    means the shipped recipe, as does a file of that name with no .toml."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).mkdir(parents=True)
    (tmp_path / name / "results.jsonl").write_text("")
    assert recipe_file(name) == shipped_recipes()[name]
    code, out, err = atelier("recipe", "check", name)
    assert code == 0, err
    (tmp_path / name / "results.jsonl").unlink()
    (tmp_path / name).rmdir()
    (tmp_path / name).write_text("not a recipe")
    assert load_recipe(name).source == str(shipped_recipes()[name])


def test_a_missing_recipe_path_names_where_it_looked_and_the_shipped_recipe_it_matches(tmp_path, monkeypatch, atelier):
    monkeypatch.chdir(tmp_path)  # README's path form, from outside the checkout
    code, _, err = atelier("recipe", "check", "runs/recipes/quickstart.toml")
    assert code == 2 and f"looked for {tmp_path}/runs/recipes/quickstart.toml" in err
    assert "the shipped recipe 'quickstart' is named so: `atelier run quickstart`" in err
    code, _, err = atelier("recipe", "check", "runs/recipes/papers/pdr_table1_systems.toml")
    assert code == 2 and "'papers/pdr_table1_systems'" in err
    code, _, err = atelier("recipe", "check", "mine/study.toml")
    assert code == 2 and "no recipe file mine/study.toml" in err and "shipped recipe" not in err


# every shipped recipe that reads synthesized contexts (a recipe added later is covered too)
CONTEXT_RECIPES = sorted(name for name, path in shipped_recipes().items() if "contexts_file" in path.read_text())


def test_the_recipes_reading_contexts_are_found():
    assert {"memory_access_pdr", "papers/pdr_table2_settings", "personalization_controls_pdr"} <= set(CONTEXT_RECIPES)


@pytest.mark.parametrize("name", CONTEXT_RECIPES)
def test_a_shipped_recipe_reads_its_relative_paths_from_the_current_directory(tmp_path, monkeypatch, name):
    """The recipe's own comment (`atelier simulate history --benchmark pdr --out runs/out/pdr-contexts`)
    lines up with its contexts_file from any directory: both are read from the current one."""
    for where in (tmp_path / "a", tmp_path / "b" / "deeper"):
        where.mkdir(parents=True)
        monkeypatch.chdir(where)
        recipe = load_recipe(name)
        contexts = where / "runs" / "out" / "pdr-contexts" / "contexts_en.jsonl"
        assert recipe.benchmark.options["contexts_file"] == str(contexts)
        assert "simulate history --benchmark pdr --out runs/out/pdr-contexts" in shipped_recipes()[name].read_text()
        with pytest.raises(ConfigError) as missing:
            recipe.check_data_paths()
        assert str(contexts) in str(missing.value)
        assert "a shipped recipe reads a relative path from the current directory" in str(missing.value)


def test_recipe_list_names_each_shipped_recipe_with_its_description(atelier):
    code, out, _ = atelier("recipe", "list", "--json")
    assert code == 0
    listed = {row["name"]: row for row in json.loads(out)}
    assert set(listed) == set(shipped_recipes())
    assert listed["quickstart"]["description"] == load_recipe("quickstart").description
    code, out, _ = atelier("recipe", "list")
    assert code == 0 and len(out.splitlines()) == len(listed)


def test_recipe_new_writes_a_commented_recipe_that_checks_and_never_overwrites(tmp_path, atelier):
    code, out, _ = atelier("recipe", "new", "my_study", "--dir", str(tmp_path))
    written = tmp_path / "my_study.toml"
    assert code == 0 and str(written) in out
    text = written.read_text()
    assert 'name = "my_study"' in text and text.count("\n#") >= 5  # commented
    assert load_recipe(written).name == "my_study"
    code, _, err = atelier("recipe", "check", str(written))
    assert code == 0, err
    written.write_text(text + "# my edits\n")
    code, _, err = atelier("recipe", "new", "my_study", "--dir", str(tmp_path))
    assert code == 2 and "exists" in err and written.read_text().endswith("# my edits\n")
    code, _, err = atelier("recipe", "new", "../escape", "--dir", str(tmp_path))
    assert code == 2 and "recipe name" in err and not (tmp_path.parent / "escape.toml").exists()
