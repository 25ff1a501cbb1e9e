"""Issue 32, point 7: help text that shows `[[judges]]`, open_deep_research's failed research units
caught, and recipe data paths read from the recipe's folder with errors naming file, line and key."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
from typer.testing import CliRunner

from atelier.benchmarks.common.errors import ConfigError
from atelier.graphs.external.graph import agent_response
from atelier.runs.cli import app
from atelier.runs.folder.recipe import load_recipe

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
CHILD = ROOT / "graphs" / "external" / "child"

# ----------------------------------------------------------------------------- rescore --help


def test_rescore_help_shows_the_judges_table_names():
    shown = CliRunner().invoke(app, ["rescore", "--help"], env={"COLUMNS": "200", "TERMINAL_WIDTH": "200"})
    assert shown.exit_code == 0, shown.output
    assert "A TOML file of [[judges]] (and [models.<role>]) tables." in shown.output


@pytest.mark.parametrize(
    ("command", "shown_text"),
    [
        (["run", "--help"], "(overrides [run] concurrency)"),
        (["run", "--help"], "default: the recipe's [run] executor"),
        (["run", "--help"], "(overrides [run] budget_usd)"),
        (["simulate", "history", "--help"], "[models.history_writer] and [models.history_checker]"),
        (["simulate", "check", "--help"], "[models.history_checker] (else [models.user_sim])"),
    ],
)
def test_help_texts_keep_their_recipe_table_names(command, shown_text):
    shown = CliRunner().invoke(app, command, env={"COLUMNS": "400", "TERMINAL_WIDTH": "400"})
    assert shown.exit_code == 0, shown.output
    assert shown_text in " ".join(shown.output.split())
    assert "of [] (and ) tables" not in shown.output


# ----------------------------------------------------------------------------- open_deep_research


def odr_runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "run_open_deep_research_under_test", CHILD / "run_open_deep_research.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tool(content: str, name: str = "ConductResearch"):
    return SimpleNamespace(type="tool", name=name, content=content)


FAILED = "Error synthesizing research report: Maximum retries exceeded"
REPORT = "# Pensions\n\nFindings [1].\n\n### Sources\n[1] https://example.org/pensions"


def fake_agent(monkeypatch, final_state: dict) -> None:
    """open_deep_research's graph, replaced by one that ends in `final_state`."""

    class Graph:
        async def ainvoke(self, *args, **kwargs):
            return final_state

    package = ModuleType("open_deep_research")
    module = ModuleType("open_deep_research.deep_researcher")
    module.deep_researcher = Graph()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "open_deep_research", package)
    monkeypatch.setitem(sys.modules, "open_deep_research.deep_researcher", module)


def job() -> dict:
    return {"brief": "pensions", "endpoint": {"web_root": "http://127.0.0.1:9/s/t"}}


async def test_every_research_unit_failing_to_synthesize_is_the_agents_failure(monkeypatch):
    runner = odr_runner()
    fake_agent(monkeypatch, {"final_report": REPORT, "supervisor_messages": [tool(FAILED), tool(FAILED)]})
    with pytest.raises(RuntimeError, match=r"every research unit failed \(2\): Error synthesizing research report"):
        await runner.run(job())


async def test_some_research_units_failing_is_a_recorded_degradation(monkeypatch):
    runner = odr_runner()
    state = {
        "final_report": REPORT,
        "supervisor_messages": [
            tool("Pension notes from https://example.org/pensions"),
            tool(FAILED),
            tool("Error: Did not run this research as you have already exceeded the maximum"),  # not run: no unit
            tool("a thought", name="think_tool"),
        ],
    }
    fake_agent(monkeypatch, state)
    result = await runner.run(job())
    assert result["details"]["notes"] == 1 and result["details"]["failed_research_units"] == 1
    [degraded] = result["degraded"]
    assert degraded["kind"] == "step_fallback" and degraded["count"] == 1
    assert degraded["step"] == "open_deep_research:compress_research"
    assert "1 of 2 research units failed" in degraded["detail"]


async def test_research_that_succeeded_is_not_degraded_and_counts_its_notes(monkeypatch):
    runner = odr_runner()
    fake_agent(monkeypatch, {"final_report": REPORT, "supervisor_messages": [tool("notes a"), tool("notes b")]})
    result = await runner.run(job())
    assert result["degraded"] == [] and result["details"]["notes"] == 2


async def test_a_failed_final_report_is_still_the_agents_failure(monkeypatch):
    runner = odr_runner()
    fake_agent(monkeypatch, {"final_report": "Error generating final report: boom", "supervisor_messages": [tool("n")]})
    with pytest.raises(RuntimeError, match="Error generating final report: boom"):
        await runner.run(job())


class NoWeb:
    sources: dict = {}
    degraded: list = []
    searches = fetches = searches_refused = 0

    def cited(self, urls):
        return [], list(urls)

    def source_for(self, url):
        return None

    def page_url(self, source):  # pragma: no cover - no sources
        raise AssertionError


def test_the_agents_degraded_steps_are_in_its_response():
    result = {
        "report": REPORT,
        "degraded": [
            {"kind": "step_fallback", "step": "open_deep_research:compress_research", "detail": "1 of 2", "count": 1}
        ],
    }
    response = agent_response(result, NoWeb(), {})  # type: ignore[arg-type]
    assert [(d.kind, d.step, d.count) for d in response.degraded] == [
        ("step_fallback", "open_deep_research:compress_research", 1),
        ("citation_removed", "citations", 1),  # the report's one URL was never shown to the agent
        ("no_findings", "run_agent", 1),  # so the report rests on no source read (issue 51)
    ]
    assert response.meta["citations"]["unverified_urls"] == ["https://example.org/pensions"]
    assert "https://example.org/pensions" in response.text and response.citations == []


# ----------------------------------------------------------------------------- external agents research when scripted

# Why the shipped external-agents recipe did no research on the scripted model: a tool-calling turn
# is answered with a random instance of the tool-turn schema, so open_deep_research's supervisor
# ends at once (no call, or `ResearchComplete`, ~78% of prompts) and its researcher's `web_search`
# often gets `queries: []`. The fix is the scripted model's first move on a tool turn
# (agents/models/scripted.py `first_tool_move`).
SUPERVISOR_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "ConductResearch",
            "parameters": {
                "type": "object",
                "properties": {"research_topic": {"type": "string"}},
                "required": ["research_topic"],
            },
        },
    },
    {"type": "function", "function": {"name": "ResearchComplete", "parameters": {"type": "object", "properties": {}}}},
]
RESEARCHER_TOOLS = [
    SUPERVISOR_TOOLS[1],
    {
        "type": "function",
        "function": {
            "name": "web_search",
            "parameters": {
                "type": "object",
                "properties": {"queries": {"type": "array", "items": {"type": "string"}}},
                "required": ["queries"],
            },
        },
    },
]


@pytest.mark.parametrize("brief", [f"brief {i}: pensions for a nurse on night shifts" for i in range(20)])
def test_the_scripted_model_starts_working_on_a_first_tool_turn(brief):
    from atelier.agents.models.scripted import ScriptedLLM
    from atelier.agents.models.tool_calls import TOOL_TURN_NOTE, tool_turn_schema

    messages = [{"role": "user", "content": brief}, {"role": "user", "content": TOOL_TURN_NOTE}]
    for tools, work in ((SUPERVISOR_TOOLS, "ConductResearch"), (RESEARCHER_TOOLS, "web_search")):
        params = {"response_format": {"type": "json_schema", "json_schema": {"schema": tool_turn_schema(tools)}}}
        content, _, _ = ScriptedLLM().answer(messages, params)
        calls = json.loads(content)["tool_calls"]
        assert [c["name"] for c in calls] == [work], brief
        assert all(calls[0]["arguments"].values()), brief  # a search with no query is no first step


@pytest.mark.battery
@pytest.mark.slow
def test_the_shipped_external_agents_recipe_researches_on_the_scripted_model(tmp_path):
    pytest.importorskip("open_deep_research")
    from atelier.runs.execution.runner import run_recipe

    recipe = load_recipe(ROOT / "runs" / "recipes" / "external_agents.toml").with_overrides(
        limit=1, out_dir=str(tmp_path / "out"), systems=["open_deep_research-none", "open_deep_research-full"]
    )
    data = recipe.model_dump(mode="python")
    data["cache"] = {"dir": str(tmp_path / "llm")}
    data["judges"] = []  # the searches are the point here, not the judge
    recipe = type(recipe).model_validate(data)
    folder = run_recipe(recipe, progress=False)
    results = [json.loads(line) for line in folder.results.read_text().splitlines() if line.strip()]
    assert len(results) == 2 and all(r["status"] == "ok" for r in results), results
    for result in results:
        assert result["response"]["meta"]["searches"] > 0, result["system"]


# ----------------------------------------------------------------------------- recipe data paths

BESPOKE_RECIPE = """name = "mine"

[benchmark]
name = "bespoke"
setting = "history"
options = {{ data_dir = "{data_dir}" }}

[models.system]
model = "scripted"

[[systems]]
name = "direct-none"
pipeline = "direct"
memory = {{ backend = "none" }}
"""


def test_a_relative_data_path_is_read_from_the_recipes_folder_whatever_the_working_directory(tmp_path, monkeypatch):
    shutil.copytree(FIXTURES / "bespoke", tmp_path / "study" / "data" / "bespoke")
    recipe_path = tmp_path / "study" / "recipe.toml"
    recipe_path.write_text(BESPOKE_RECIPE.format(data_dir="data/bespoke"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    recipe = load_recipe(recipe_path)
    assert recipe.benchmark.options["data_dir"] == str(tmp_path / "study" / "data" / "bespoke")
    assert len(recipe.cases()) == 3


def test_an_absolute_or_home_data_path_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    recipe_path = tmp_path / "recipe.toml"
    recipe_path.write_text(BESPOKE_RECIPE.format(data_dir="~/bespoke"))
    assert load_recipe(recipe_path).benchmark.options["data_dir"] == str(tmp_path / "bespoke")
    recipe_path.write_text(BESPOKE_RECIPE.format(data_dir=str(FIXTURES / "bespoke")))
    assert load_recipe(recipe_path).benchmark.options["data_dir"] == str(FIXTURES / "bespoke")


def test_a_missing_data_path_names_the_recipe_line_key_and_where_the_data_comes_from(tmp_path):
    recipe_path = tmp_path / "recipe.toml"
    recipe_path.write_text(BESPOKE_RECIPE.format(data_dir="data/bespoke"))
    recipe = load_recipe(recipe_path)
    with pytest.raises(ConfigError) as info:
        recipe.cases()
    message = str(info.value)
    assert message.startswith(
        f"{recipe_path}:6: benchmark.options.data_dir: {tmp_path / 'data' / 'bespoke'} is not a directory"
    )
    assert "read from the recipe's folder" in message
    assert "https://huggingface.co/datasets/yonsei-dli/BESPOKE" in message and "atelier data fetch bespoke" in message


@pytest.mark.parametrize(
    ("recipe", "line", "key", "source"),
    [
        ("bespoke_table4_context.toml", 18, "benchmark.options.data_dir", "yonsei-dli/BESPOKE"),
        ("lampqa_table2.toml", 24, "benchmark.options.data_file", "alireza7/LaMP-QA"),
        ("pdr_table2_settings.toml", 20, "benchmark.options.contexts_file", "atelier simulate history"),
    ],
)
def test_the_shipped_paper_recipes_name_their_data_relative_to_themselves(
    recipe, line, key, source, monkeypatch, tmp_path
):
    monkeypatch.chdir(tmp_path)  # not the project: the paths must not depend on it
    path = ROOT / "runs" / "recipes" / "papers" / recipe
    loaded = load_recipe(path)
    named = Path(loaded.benchmark.options[key.rsplit(".", 1)[1]])
    assert named.is_absolute() and ROOT in named.parents  # the project's data/ or runs/out/
    if named.exists():  # a download is in place: nothing to refuse
        return
    with pytest.raises(ConfigError) as info:
        loaded.check_data_paths()
    assert str(info.value).startswith(f"{path}:{line}: {key}: ") and source in str(info.value)


def test_cli_run_of_a_recipe_whose_data_is_missing_is_one_line_exit_2(tmp_path):
    import subprocess

    recipe_path = tmp_path / "recipe.toml"
    recipe_path.write_text(BESPOKE_RECIPE.format(data_dir="data/bespoke"))
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from atelier.runs.cli import main; main()",
            "run",
            str(recipe_path),
            "--out",
            str(tmp_path / "out"),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert f"{recipe_path}:6: benchmark.options.data_dir" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_the_scripted_first_tool_move_is_only_the_first_and_only_on_tool_turns():
    from atelier.agents.models.scripted import first_tool_move
    from atelier.agents.models.tool_calls import TOOL_TURN_NOTE, flatten_messages, tool_turn_schema

    schema = tool_turn_schema(RESEARCHER_TOOLS)
    first = [{"role": "user", "content": "pensions"}, {"role": "user", "content": TOOL_TURN_NOTE}]
    narrowed = first_tool_move(schema, first)
    assert narrowed is not None and narrowed["properties"]["tool_calls"]["minItems"] == 1
    answered = first + [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "function": {"name": "web_search", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "web_search", "content": "results"},
    ]
    assert first_tool_move(schema, answered) is None  # a raw tool message
    assert first_tool_move(schema, flatten_messages(answered)) is None  # the same, flattened to text
    assert first_tool_move({"type": "object", "properties": {"answer": {"type": "string"}}}, first) is None
    done_only = tool_turn_schema(
        [{"type": "function", "function": {"name": "done", "parameters": {"type": "object", "properties": {}}}}]
    )
    assert first_tool_move(done_only, first) is None  # a signal is no first step
