"""`--option key=value` (and `--param`) read as the option's declared type: a value that parses as
JSON (35, true, null) set on an option declared `str` stays the text the user typed, rather than
becoming an int that a `str` option refuses; an `int` option still gets 35, an option of any type
(a free-form table) still gets JSON's value, and a value that fits no type is refused naming the
option."""

from __future__ import annotations

import pytest

from atelier.benchmarks.common.errors import ConfigError
from atelier.runs.cli.memory import backend_config, parse_assignments
from atelier.runs.studies.conformance.clauses import Report
from tests.cli_in_process import cli  # noqa: F401 (a fixture)


def test_a_value_is_read_as_the_options_declared_type():
    from atelier.graphs.external.options import ExternalOptions

    items = [
        "assistant_id=35",  # str | None
        "cwd=null",  # str | None: null is None
        "timeout_s=35",  # float
        "max_results=5",  # int
        "call_roles.final_report=35",  # dict[str, str]
        "settings.MAX_ITERATIONS=3",  # dict[str, Any]: JSON's value
        "limits.file_mb=64",  # a nested model's int
        "unknown=35",  # declared nowhere: JSON's value, for validation to refuse by name
    ]
    assert parse_assignments(items, "--option", ExternalOptions) == {
        "assistant_id": "35",
        "cwd": None,
        "timeout_s": 35,
        "max_results": 5,
        "call_roles": {"final_report": "35"},
        "settings": {"MAX_ITERATIONS": 3},
        "limits": {"file_mb": 64},
        "unknown": 35,
    }
    # no model: every value as JSON reads it, as before
    assert parse_assignments(["assistant_id=35"], "--option") == {"assistant_id": 35}


def test_a_str_backend_field_set_to_a_number_is_that_text_and_a_bad_int_names_the_key():
    assert backend_config("hierarchical", ["embedder=35", "top_sessions=4"]).embedder == "35"
    assert backend_config("hierarchical", ["top_sessions=4"]).top_sessions == 4
    with pytest.raises(ConfigError, match="--param top_sessions: Input should be a valid integer"):
        backend_config("hierarchical", ["top_sessions=many"])


def test_check_reads_a_pipelines_options_as_declared(cli, monkeypatch):
    """`atelier check pipeline external --option assistant_id=35`: the kit is given "35" for the str
    option (before: 35, refused as 'Input should be a valid string')."""
    from atelier.graphs.pipelines import pipeline_options
    from atelier.runs.studies.conformance import run as conformance

    given = {}

    async def run_check(protocol, ref, options, workdir=None):
        given.update(options)
        pipeline_options(ref, options)  # what the kit does first
        return Report(protocol, ref)

    monkeypatch.setattr(conformance, "run_check", run_check)
    langgraph = ["--option", "agent=langgraph", "--option", "url=http://127.0.0.1:2024"]
    done = cli("check", "pipeline", "external", *langgraph, "--option", "assistant_id=35", "--option", "max_results=7")
    assert done.returncode == 0, done.stderr
    assert given == {"agent": "langgraph", "url": "http://127.0.0.1:2024", "assistant_id": "35", "max_results": 7}
    bad = cli("check", "pipeline", "external", "--option", "max_results=seven")
    assert bad.returncode == 2 and "pipeline_options.max_results: Input should be a valid integer" in bad.stderr
    # an unknown pipeline is still its own error, not the option's
    unknown = cli("check", "pipeline", "no_such_pipeline", "--option", "assistant_id=35")
    assert unknown.returncode == 2 and "unknown pipeline 'no_such_pipeline'" in unknown.stderr


def test_bench_graph_reads_each_pipelines_options_as_declared(cli, monkeypatch):
    from atelier.runs.bench import graph as bench

    given = {}

    async def bench_graph(pipeline, **settings):
        given.update(settings["options"])
        return {}

    monkeypatch.setattr(bench, "bench_graph", bench_graph)
    done = cli("bench", "graph", "--pipeline", "external:langgraph", "--option", "assistant_id=35")
    assert done.returncode == 0, done.stderr
    assert given == {"assistant_id": "35"}
