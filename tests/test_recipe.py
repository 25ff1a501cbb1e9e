"""Recipes: parsing, validation against the registries, error messages that name file, key and choices."""

from __future__ import annotations

import pytest

from atelier.benchmarks.common.errors import ConfigError
from atelier.runs.folder.recipe import load_recipe

GOOD = """
name = "t"
seed = 3
[benchmark]
name = "tiny"
setting = "context"
limit = 2
[models.judge]
model = "scripted?seed=4"
temperature = 0.2
[[systems]]
name = "a"
memory = { backend = "none" }
[[systems]]
name = "b"
pipeline = "direct"
setting = "persona"
memory = { backend = "full", budget_tokens = 500 }
[systems.models.system]
model = "openai/gpt-4o-mini"
api_base = "http://127.0.0.1:9/v1"
[[judges]]
name = "lampqa_aspects"
details = "information_need"
"""


def write(tmp_path, text: str):
    path = tmp_path / "recipe.toml"
    path.write_text(text)
    return path


def test_good_recipe_parses_into_typed_settings(tmp_path):
    recipe = load_recipe(write(tmp_path, GOOD))
    assert recipe.seed == 3 and recipe.benchmark.limit == 2
    assert recipe.role_models()["judge"].model == "scripted?seed=4"
    assert recipe.role_models()["system"].model == "scripted"  # roles not named default to scripted
    assert recipe.systems[1].memory == {"backend": "full", "budget_tokens": 500}
    assert recipe.systems[0].memory == {"backend": "none", "budget_tokens": 2000}  # defaults resolved
    assert recipe.systems[1].models["system"].api_base == "http://127.0.0.1:9/v1"
    assert recipe.judges == [{"name": "lampqa_aspects", "label": None, "repeats": 1, "details": "information_need"}]


def test_quickstart_recipe_is_valid():
    recipe = load_recipe("runs/recipes/quickstart.toml")
    assert [s.memory["backend"] for s in recipe.systems] == ["none", "full"]


def test_typo_in_backend_names_key_line_and_valid_names(tmp_path):
    path = write(tmp_path, GOOD.replace('backend = "full"', 'backend = "ful"'))
    with pytest.raises(ConfigError) as info:
        load_recipe(path)
    message = str(info.value)
    assert f"{path}:18: systems[1].memory.backend: unknown memory backend 'ful'; valid: " in message
    assert "full" in message and "none" in message


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            'name = "lampqa_aspects"',
            'name = "lampqa"',
            "judges[0].name: unknown judge 'lampqa'; valid: aepd, bespoke, lampqa_aspects, lampqa_direct, lampqa_pairwise, locomo, pqr, prefeval",
        ),
        ('pipeline = "direct"', 'pipeline = "drect"', "systems[1].pipeline: must be one of: 'deep_research', 'direct'"),
        (
            "budget_tokens = 500",
            'budget_tokens = "lots"',
            "systems[1].memory.budget_tokens: Input should be a valid integer",
        ),
        ("limit = 2", "limit = -1", "benchmark.limit: Input should be greater than 0"),
        (
            'setting = "context"',
            'setting = "everything"',
            "benchmark.setting: benchmark 'tiny' has no setting 'everything'; valid: context",
        ),
        ("[models.judge]", "[models.jduge]", "models.jduge: unknown role; must be one of: 'system'"),
        ("seed = 3", "seed = 3\ncolour = 1", "colour: unknown key (not allowed here)"),
        ('details = "information_need"', 'details = "vibes"', "judges[0].details: must be one of: 'auto'"),
        ("temperature = 0.2", "temperature = 9", "models.judge.temperature: Input should be less than or equal to 2"),
    ],
)
def test_each_mistake_is_named(tmp_path, old, new, expected):
    assert old in GOOD
    with pytest.raises(ConfigError) as info:
        load_recipe(write(tmp_path, GOOD.replace(old, new, 1)))
    assert expected in str(info.value)


def test_toml_syntax_error_names_the_line(tmp_path):
    with pytest.raises(ConfigError, match=r"recipe.toml: not valid TOML: .*line 3"):
        load_recipe(write(tmp_path, 'name = "x"\n[benchmark]\nname = \n'))


def test_duplicate_system_names_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"names must be unique \(ignoring case\); repeated: 'a'"):
        load_recipe(write(tmp_path, GOOD.replace('name = "b"', 'name = "a"')))


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(
        ConfigError, match=f"no recipe file {tmp_path}/nope.toml \\(looked for {tmp_path}/nope.toml\\)$"
    ):
        load_recipe(tmp_path / "nope.toml")
    (tmp_path / "folder.toml").mkdir()
    with pytest.raises(ConfigError, match="cannot read recipe .*folder.toml: Is a directory"):
        load_recipe(tmp_path / "folder.toml")


def test_command_line_overrides_apply_to_every_role_and_system(tmp_path):
    recipe = load_recipe(write(tmp_path, GOOD)).with_overrides(
        model="openai/gpt-4o-mini", api_base="http://x/v1", api_key="sk-1", limit=1
    )
    roles = recipe.role_models()
    assert {s.model for s in roles.values()} == {"openai/gpt-4o-mini"}
    assert roles["judge"].temperature == 0.2  # untouched fields survive
    assert roles["judge"].resolved_api_key() == "sk-1"
    assert recipe.systems[1].models["system"].api_base == "http://x/v1"
    assert recipe.benchmark.limit == 1


def test_web_table_is_validated_and_keys_are_checked_before_a_run(tmp_path, monkeypatch):
    from atelier.tools.web import check_web_config

    monkeypatch.delenv("TAVILY_API_KEY", raising=False)
    recipe = load_recipe(write(tmp_path, GOOD + '\n[web]\nprovider = "tavily"\n'))
    with pytest.raises(ConfigError, match="TAVILY_API_KEY"):
        check_web_config(recipe.web)
    with pytest.raises(ConfigError, match=r"recipe.toml: .*nosuch"):
        load_recipe(write(tmp_path, GOOD + '\n[web]\nprovider = "nosuch"\n'))
    assert load_recipe(write(tmp_path, GOOD)).web.uses_sandbox  # the default: the sandbox web


def test_each_problem_names_the_line_in_its_own_table(tmp_path):
    text = (
        GOOD.replace('model = "scripted?seed=4"', 'model = "scripted?bogus=1"')
        .replace('model = "openai/gpt-4o-mini"', 'model = "scripted?bogus=1"')
        .replace("limit = 2", "limit = true")
    )
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_recipe(path)
    lines = text.splitlines()
    judge = lines.index("[models.judge]") + 2
    system = lines.index("[systems.models.system]") + 2
    limit = lines.index("limit = true") + 1
    message = str(info.value)
    assert f"{path}:{judge}: models.judge.model: 'scripted?bogus=1': bogus: unknown parameter" in message
    assert f"{path}:{system}: systems[1].models.system.model: 'scripted?bogus=1'" in message
    assert f"{path}:{limit}: benchmark.limit: Input should be a valid integer" in message
