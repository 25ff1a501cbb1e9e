"""Plugins (issue 43): a researcher's own memory backend, pipeline, judge and data named in a recipe by
`module:attr` or by an entry point of the group `atelier.plugins`, validated like the built-ins.

The package is examples/mylab, copied to a folder outside the checkout. The `module:attr` form puts
that folder on PYTHONPATH; the entry-point form installs it with `pip install --no-deps --target`
into another folder put on PYTHONPATH (its .dist-info is what `importlib.metadata` finds entry
points in): a second venv would take minutes to build, and `--target` installs exactly as pip
installs into a venv's site-packages."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atelier.benchmarks.common.errors import ConfigError, DataError
from atelier.runs.folder.recipe import load_recipe, parse_recipe

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "mylab"


@pytest.fixture(scope="module")
def outside(tmp_path_factory) -> Path:
    """examples/mylab copied to a folder outside the checkout (the package, its recipes, its cases)."""
    folder = tmp_path_factory.mktemp("outside") / "mylab-project"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    return folder


@pytest.fixture
def on_path(outside, monkeypatch):
    monkeypatch.syspath_prepend(str(outside))
    return outside


def atelier(*args: str, cwd: Path, path: str) -> subprocess.CompletedProcess:
    pythonpath = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH", ""), str(ROOT), path) if p)
    return subprocess.run(
        [sys.executable, "-m", "atelier.runs.cli", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": pythonpath},
        capture_output=True,
        text=True,
        timeout=900,
    )


# --------------------------------------------------------------------------- the acceptance, end to end


def test_a_package_outside_the_checkout_runs_by_reference_beside_the_builtins(outside, tmp_path):
    run = tmp_path / "run"
    done = atelier(
        "run", "recipe.toml", "--limit", "1", "--no-progress", "--out", str(run), cwd=outside, path=str(outside)
    )
    assert done.returncode == 0, done.stderr
    config = json.loads((run / "config.json").read_text())
    assert {(p["kind"], p["name"]) for p in config["plugins"]} == {
        ("pipeline", "mylab.graphs:build"),
        ("memory backend", "mylab.memory:KeywordMemory"),
        ("judge", "mylab.judges:Strict"),
    }
    summary = json.loads((run / "summary.json").read_text())
    assert list(summary["systems"]) == ["direct-full", "direct-keyword", "revise-keyword"]
    for system in summary["systems"].values():
        assert set(system["judges"]) == {"lampqa_aspects", "mylab.judges:Strict"}
        assert all(stats["n"] == 1 for stats in system["judges"].values())
    report = (run / "report.html").read_text()
    row = '<td class="name">{}</td><td>{}</td><td>{}</td>'  # the systems table: name, pipeline, memory
    assert row.format("revise-keyword", "mylab.graphs:build", "mylab.memory:KeywordMemory") in report
    assert row.format("direct-full", "direct", "full") in report
    assert 'id="plugins"' in report
    results = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    keyword = next(r for r in results if r["system"] == "direct-keyword")
    assert keyword["user_context"]["backend"] == "mylab.memory:KeywordMemory"
    assert next(r for r in results if r["system"] == "revise-keyword")["response"]["meta"]["pipeline"] == "draft_revise"


@pytest.mark.battery
def test_the_installed_package_runs_by_entry_point_name_and_is_listed(outside, tmp_path):
    site = tmp_path / "site"
    source = tmp_path / "source"
    shutil.copytree(outside, source)
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(site)]
    subprocess.run([*pip, str(source)], check=True, capture_output=True, timeout=300)
    assert not (site / "mylab" / "recipe.toml").exists() and (site / "mylab" / "memory.py").exists()
    # an installed plugin that cannot load is listed with the reason, not silently left out
    ghost = site / "ghost-0.1.dist-info"
    ghost.mkdir()
    (ghost / "METADATA").write_text("Metadata-Version: 2.1\nName: ghost\nVersion: 0.1\n")
    (ghost / "entry_points.txt").write_text("[atelier.plugins]\nghost = ghostlab.memory:Ghost\n")

    run = tmp_path / "run"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    recipe = outside / "recipe-installed.toml"
    done = atelier(
        "run", str(recipe), "--limit", "2", "--no-progress", "--out", str(run), cwd=elsewhere, path=str(site)
    )
    assert done.returncode == 0, done.stderr
    plugins = {p["name"]: p for p in json.loads((run / "config.json").read_text())["plugins"]}
    assert set(plugins) == {"draft_revise", "keyword", "strict", "mylab_cases"}
    assert plugins["keyword"]["target"] == "mylab.memory:KeywordMemory"
    assert plugins["keyword"]["distribution"] == "mylab 0.1.0"
    summary = json.loads((run / "summary.json").read_text())
    assert list(summary["systems"]) == ["direct-full", "direct-keyword", "revise-keyword"]
    assert summary["benchmark"]["name"] == "mylab_cases" and summary["n_cases"] == 2

    listed = atelier("list", "--json", cwd=elsewhere, path=str(site))
    assert listed.returncode == 0, listed.stderr
    catalog = json.loads(listed.stdout)
    memory = {e["name"]: e for e in catalog["memory"]}
    assert memory["keyword"]["plugin"] == "plugin mylab.memory:KeywordMemory (entry point 'keyword' of mylab)"
    assert [o["name"] for o in memory["keyword"]["options"]] == ["budget_tokens", "k", "min_overlap"]
    assert "plugin" not in memory["full"]
    assert {e["name"] for e in catalog["pipelines"]} >= {"direct", "draft_revise"}
    assert {e["name"] for e in catalog["judges"]} >= {"strict", "lampqa_aspects"}
    assert {e["name"] for e in catalog["benchmarks"]} >= {"mylab_cases", "sample", "jsonl"}
    table = atelier("list", "memory", cwd=elsewhere, path=str(site))
    assert "plugin not loaded: entry point 'ghost' of ghost (ghostlab.memory:Ghost" in " ".join(table.stdout.split())
    checked = atelier("recipe", "check", str(recipe), cwd=elsewhere, path=str(site))
    assert checked.returncode == 0 and "direct-keyword [direct + keyword]" in checked.stdout, checked.stderr


# --------------------------------------------------------------------------- validated like the built-ins


def recipe_file(folder: Path, systems: str, judges: str = '[[judges]]\nname = "lampqa_aspects"\n') -> Path:
    path = folder / "recipe.toml"
    path.write_text(f'name = "t"\n\n[benchmark]\nname = "sample"\nlimit = 1\n\n{systems}\n{judges}')
    return path


def test_a_plugins_options_are_checked_with_key_path_line_and_choices(on_path, tmp_path):
    path = recipe_file(
        tmp_path,
        '[[systems]]\nname = "a"\nmemory = { backend = "full" }\n\n'
        '[[systems]]\nname = "b"\nmemory = { backend = "mylab.memory:KeywordMemory", k = 0 }\n',
    )
    with pytest.raises(ConfigError) as refused:
        load_recipe(path)
    assert str(refused.value) == f"invalid recipe: {path}:13: systems[1].memory.k: Input should be greater than 0"
    path.write_text(path.read_text().replace("k = 0", "colour = 1"))
    with pytest.raises(ConfigError, match=r"systems\[1\]\.memory\.colour: unknown key"):
        load_recipe(path)
    path.write_text(path.read_text().replace("colour = 1", "k = 5"))
    assert load_recipe(path).systems[1].memory == {
        "backend": "mylab.memory:KeywordMemory",
        "budget_tokens": 2000,
        "k": 5,
        "min_overlap": 1,
    }
    judged = recipe_file(
        tmp_path,
        '[[systems]]\nname = "a"\nmemory = { backend = "none" }\n',
        '[[judges]]\nname = "mylab.judges:Strict"\nmin_words = -1\n',
    )
    with pytest.raises(ConfigError, match=rf"{judged}:13: judges\[0\]\.min_words: Input should be greater"):
        load_recipe(judged)


def test_an_import_error_names_the_module_and_the_recipe_line(on_path, tmp_path):
    path = recipe_file(
        tmp_path,
        '[[systems]]\nname = "a"\npipeline = "nolab.graphs:build"\nmemory = { backend = "mylab.memory:Nothing" }\n',
    )
    with pytest.raises(ConfigError) as refused:
        load_recipe(path)
    message = str(refused.value)
    assert message.startswith("invalid recipe (2 problems)")
    assert (
        f"{path}:9: systems[0].pipeline: cannot import module 'nolab.graphs': no module named 'nolab' "
        "(is its package installed, or its folder on PYTHONPATH?)" in message
    )
    assert f"{path}:10: systems[0].memory.backend: module 'mylab.memory' has no attribute 'Nothing'" in message


def test_a_module_that_fails_to_import_is_told_in_one_line(on_path, tmp_path):
    package = tmp_path / "badlab"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "memory.py").write_text("raise RuntimeError('the lab\\'s database is offline')\n")
    sys.path.insert(0, str(tmp_path))
    try:
        path = recipe_file(tmp_path, '[[systems]]\nname = "a"\nmemory = { backend = "badlab.memory:M" }\n')
        with pytest.raises(
            ConfigError, match=r"cannot import module 'badlab.memory': RuntimeError: the lab's database is offline"
        ):
            load_recipe(path)
    finally:
        sys.path.remove(str(tmp_path))


@pytest.mark.parametrize(
    ("place", "reference", "expected"),
    [
        ("pipeline", "mylab.judges:Strict", "plugin mylab.judges:Strict is not a pipeline"),
        ("memory", "mylab.graphs:build", "plugin mylab.graphs:build is not a memory backend"),
        ("judge", "mylab.memory:KeywordMemory", "plugin mylab.memory:KeywordMemory is not a judge"),
        ("benchmark", "mylab.graphs:build", "plugin mylab.graphs:build is not a benchmark"),
    ],
)
def test_a_plugin_of_another_kind_is_refused_naming_what_was_expected(on_path, place, reference, expected):
    data = {"name": "t", "benchmark": {"name": "sample"}, "systems": [{"name": "a", "memory": {"backend": "none"}}]}
    if place == "pipeline":
        data["systems"][0]["pipeline"] = reference
    elif place == "memory":
        data["systems"][0]["memory"] = {"backend": reference}
    elif place == "judge":
        data["judges"] = [{"name": reference}]
    else:
        data["benchmark"] = {"name": reference}
    with pytest.raises(ConfigError, match=expected):
        parse_recipe(data)


def test_a_graph_factory_that_returns_no_graph_is_refused_when_built(on_path, tmp_path):
    from atelier.graphs.pipelines import PIPELINES

    module = tmp_path / "oddlab.py"
    module.write_text("def build():\n    return 'not a graph'\n\ndef needs(x):\n    return x\n")
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(ConfigError, match=r"its factory returned a str .*not a compiled LangGraph graph"):
            PIPELINES.get("oddlab:build").build()
        with pytest.raises(ConfigError, match="a graph factory takes no argument; .* requires x"):
            PIPELINES.get("oddlab:needs")
    finally:
        sys.path.remove(str(tmp_path))


def test_a_file_of_cases_is_a_benchmark_read_from_the_recipes_folder(tmp_path):
    shutil.copy(EXAMPLE / "cases.jsonl", tmp_path / "cases.jsonl")
    path = tmp_path / "recipe.toml"
    path.write_text(
        'name = "t"\n[benchmark]\npath = "cases.jsonl"\nsetting = "persona+context"\n'
        '[[systems]]\nname = "a"\nmemory = { backend = "full" }\n[[judges]]\nname = "lampqa_aspects"\n'
    )
    recipe = load_recipe(path)
    assert recipe.benchmark.name == "jsonl" and recipe.benchmark.options == {"path": str(tmp_path / "cases.jsonl")}
    cases = recipe.cases()
    assert [c.id for c in cases] == ["ana-1", "ana-2", "ben-1"] and {c.benchmark for c in cases} == {"jsonl"}
    assert cases[0].view("persona+context").history[0].kind == "persona"
    assert parse_recipe(recipe.model_dump(mode="python")).benchmark == recipe.benchmark  # config.json reads back

    lines = (tmp_path / "cases.jsonl").read_text().splitlines()
    (tmp_path / "cases.jsonl").write_text("\n".join([lines[0], lines[1].replace('"user_id"', '"user"')]) + "\n")
    with pytest.raises(
        DataError, match=rf"{tmp_path / 'cases.jsonl'}:2: case 'ana-2', field 'user_id': Field required"
    ):
        load_recipe(path).cases()
    path.write_text(path.read_text().replace('path = "cases.jsonl"', 'path = "missing.jsonl"'))
    with pytest.raises(ConfigError, match=rf"{path}:3: benchmark.options.path: .*missing.jsonl is not a file"):
        load_recipe(path).cases()
    path.write_text(path.read_text().replace("[benchmark]\n", '[benchmark]\nname = "sample"\n'))
    with pytest.raises(ConfigError, match="give either `name` .* or `path`, not both"):
        load_recipe(path)


def test_a_pipeline_variant_is_told_from_a_reference():
    from atelier.graphs.pipelines import pipeline_variant

    assert pipeline_variant("external:gpt_researcher") == ("external", {"agent": "gpt_researcher"})
    assert pipeline_variant("mylab.graphs:build") == ("mylab.graphs:build", {})
    assert pipeline_variant("direct") == ("direct", {})


@settings(max_examples=200, deadline=None)
# references to modules that do not exist (no real module is imported by a generated name)
@given(
    st.text(max_size=40)
    | st.from_regex(r"zz_[a-z0-9_]{0,8}(\.[a-z_.]{0,6})?:[A-Za-z_.][A-Za-z0-9_.]{0,12}", fullmatch=True)
)
def test_any_name_resolves_to_a_plugin_or_fails_with_one_clear_error(name):
    """Whatever a recipe spells: a registered name, an unknown one (with the valid choices), or a
    PluginError saying what could not be imported — never another exception."""
    from atelier.benchmarks.common.named_registry import UnknownNameError
    from atelier.benchmarks.common.plugins import PluginError, is_reference
    from atelier.memory.registry import BACKENDS

    try:
        BACKENDS.get(name)
    except UnknownNameError as exc:
        assert not is_reference(name) and "valid: " in str(exc)
    except PluginError as exc:
        assert is_reference(name) and "\n" not in str(exc)


def test_a_reference_loaded_is_found_but_not_listed_among_the_registrys_names():
    """Loading a `module:attr` plugin (one test, one recipe) leaves what a registry lists as it was:
    the grid of built-in pipelines x backends and the judges' roles do not grow with it."""
    from atelier.benchmarks.common.named_registry import NamedRegistry

    registry: NamedRegistry[object] = NamedRegistry("thing", adapt=lambda obj, name: obj)
    registry.register("builtin", object())
    before = registry.names()
    loaded = registry.get("tests.conformance_doubles:SoundMemory")
    assert loaded is registry.get("tests.conformance_doubles:SoundMemory")
    assert registry.names() == before == ["builtin"]
    assert [name for name, _ in registry.items()] == before
    assert registry.known() == ["builtin", "tests.conformance_doubles:SoundMemory"]
    assert "tests.conformance_doubles:SoundMemory" in registry.loaded()


def installed(site: Path, distribution: str, entry_points: str) -> None:
    """A distribution installed in `site` as pip leaves one: its .dist-info with metadata and entry points."""
    info = site / f"{distribution}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[atelier.plugins]\n{entry_points}\n")


def test_an_entry_point_name_claimed_twice_or_by_a_builtin_is_refused_naming_both(tmp_path, monkeypatch):
    """Issue 48: two distributions declaring `recency` (a memory backend each), or one declaring the
    built-in `full`, are refused where the name is loaded — never one silently chosen or ignored;
    an entry point of another kind under a built-in's name is no clash."""
    from atelier.benchmarks.common.named_registry import NamedRegistry
    from atelier.benchmarks.common.plugins import PluginClashError
    from atelier.memory.backends.full import FullHistory
    from atelier.memory.registry import plugin_backend

    site = tmp_path / "site"
    installed(site, "alab", "recency = tests.conformance_doubles:SoundMemory")
    installed(site, "blab", "recency = tests.conformance_doubles:InventingMemory")
    installed(site, "clab", "full = tests.conformance_doubles:SoundMemory\ndirect = tests.conformance_doubles:OffScale")
    monkeypatch.syspath_prepend(str(site))

    def registry() -> NamedRegistry:
        backends: NamedRegistry = NamedRegistry("memory backend", adapt=plugin_backend)
        backends.register("full", FullHistory)
        backends.register("direct", FullHistory)  # a judge (OffScale) claims this name: another kind
        return backends

    with pytest.raises(PluginClashError) as twice:
        registry().get("recency")
    assert "'recency' is declared by two installed distributions" in str(twice.value)
    assert "of alab" in str(twice.value) and "of blab" in str(twice.value)
    with pytest.raises(PluginClashError) as builtin:
        registry().get("full")
    assert "built into Atelier" in str(builtin.value) and "entry point 'full' of clab" in str(builtin.value)
    assert registry().get("direct") is FullHistory
    listed = registry()
    assert "recency" not in listed.names() and "full" in listed.names()
    assert "two installed distributions" in listed.broken["recency"] and "built into" in listed.broken["full"]


def test_an_entry_point_named_like_a_builtin_that_cannot_load_is_refused_naming_both(tmp_path, monkeypatch):
    """Its kind cannot be told, so it may mean to replace the built-in: refused naming the built-in,
    the entry point, its distribution and why it does not load — never silently ignored."""
    from atelier.benchmarks.common.named_registry import NamedRegistry
    from atelier.benchmarks.common.plugins import PluginClashError
    from atelier.memory.backends.full import FullHistory
    from atelier.memory.registry import plugin_backend

    site = tmp_path / "site"
    installed(site, "dlab", "full = nolab.memory:Nothing")
    monkeypatch.syspath_prepend(str(site))
    backends: NamedRegistry = NamedRegistry("memory backend", adapt=plugin_backend)
    backends.register("full", FullHistory)
    with pytest.raises(PluginClashError) as refused:
        backends.get("full")
    said = str(refused.value)
    assert "memory backend 'full' is built into Atelier" in said and "entry point 'full' of dlab" in said
    assert "cannot import module 'nolab.memory'" in said


def copy_installed(site: Path, folder: str, distribution: str, version: str, entry_points: str) -> None:
    """A copy of `distribution` in `site`, its .dist-info folder named `folder`."""
    info = site / folder
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[atelier.plugins]\n{entry_points}\n")


def memory_backends():
    from atelier.benchmarks.common.named_registry import NamedRegistry
    from atelier.memory.backends.full import FullHistory
    from atelier.memory.registry import plugin_backend

    backends: NamedRegistry = NamedRegistry("memory backend", adapt=plugin_backend)
    backends.register("full", FullHistory)
    return backends


@pytest.mark.parametrize(
    "folders",
    [
        ("elab-0.1.dist-info", "elab-0.1.dist-info"),  # pip's name twice: importlib.metadata keeps the first
        ("e_lab-0.1.dist-info", "e-lab-0.1.dist-info"),  # a copy under an unescaped name: importlib keeps both
    ],
)
def test_one_distribution_found_twice_on_sys_path_is_one_plugin_not_a_clash(tmp_path, monkeypatch, folders):
    """The same distribution (name and version) in two sys.path folders, e.g. installed in a venv and
    copied into a folder on PYTHONPATH, declaring the same target, is one plugin: registered once,
    never refused as 'declared by two installed distributions'."""
    from tests.conformance_doubles import SoundMemory

    for where, folder in zip(("one", "two"), folders, strict=True):
        copy_installed(tmp_path / where, folder, "e-lab", "0.1", "recency = tests.conformance_doubles:SoundMemory")
        monkeypatch.syspath_prepend(str(tmp_path / where))
    backends = memory_backends()
    assert issubclass(backends.get("recency"), SoundMemory)
    assert backends.origin("recency").distribution == "e-lab"
    listed = memory_backends()
    assert "recency" in listed.names() and "recency" not in listed.broken


def test_one_distribution_installed_twice_as_two_versions_is_refused_naming_both_copies(tmp_path, monkeypatch):
    """Two copies of one distribution that differ (another version, another target) are not two
    distributions: the refusal says the distribution is installed twice, and where each copy is."""
    from atelier.benchmarks.common.plugins import PluginClashError

    copy_installed(
        tmp_path / "one", "f_lab-0.1.dist-info", "f-lab", "0.1", "recency = tests.conformance_doubles:SoundMemory"
    )
    copy_installed(
        tmp_path / "two", "f-lab-0.2.dist-info", "f-lab", "0.2", "recency = tests.conformance_doubles:InventingMemory"
    )
    copy_installed(
        tmp_path / "three",
        "glab-0.1.dist-info",
        "glab",
        "0.1",
        "older = tests.conformance_doubles:SoundMemory\nolder = tests.conformance_doubles:InventingMemory",
    )
    for where in ("one", "two", "three"):
        monkeypatch.syspath_prepend(str(tmp_path / where))
    with pytest.raises(PluginClashError) as twice:
        memory_backends().get("recency")
    said = str(twice.value)
    assert "the distribution f-lab is installed twice" in said and "two installed distributions" not in said
    assert f"f-lab 0.1 at {tmp_path / 'one'}" in said and f"f-lab 0.2 at {tmp_path / 'two'}" in said
    with pytest.raises(PluginClashError) as declared:
        memory_backends().get("older")
    assert "'older' is declared twice by the distribution glab" in str(declared.value)
    listed = memory_backends()
    assert "recency" not in listed.names() and "installed twice" in listed.broken["recency"]
