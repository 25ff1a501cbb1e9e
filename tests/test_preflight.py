"""Preflight: a recipe with an unknown model, an unreachable api_base, a missing key or a corrupted
data file is refused before any episode, one line per problem, exit code 2, in a few seconds."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from typer.testing import CliRunner

from atelier.runs.cli import app
from atelier.runs.execution.preflight import PreflightError, data_problems, preflight_problems
from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import parse_recipe
from tests.openai_stub import OpenAIStub


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed


def recipe(tmp_path, system: dict, judge: dict | None = None, **extra):
    return parse_recipe(
        {
            "name": "pf",
            "benchmark": {"name": "tiny"},
            "models": {"system": system, "judge": judge or {"model": "scripted"}},
            "systems": [{"name": "none", "memory": {"backend": "none"}}],
            "judges": [{"name": "lampqa_aspects"}],
            "run": {"out_dir": str(tmp_path / "out")},
            **extra,
        }
    )


@pytest.fixture(scope="module", autouse=True)
def litellm_imported():
    import litellm  # noqa: F401 - importing it takes seconds once per process; the probes are timed without it


def problems(r) -> tuple[list[str], float]:
    from atelier.benchmarks.registry import load_cases

    started = time.perf_counter()
    found = asyncio.run(preflight_problems(r, load_cases("tiny")))
    return found, time.perf_counter() - started


def test_an_unknown_model_and_an_unreachable_api_base_are_refused_naming_their_roles(tmp_path):
    found, seconds = problems(
        recipe(
            tmp_path,
            system={"model": "nosuchprovider/some-model"},
            judge={
                "model": "openai/gpt-4o-mini",
                "api_base": f"http://127.0.0.1:{closed_port()}/v1",
                "api_key": "sk-x",
            },
        )
    )
    assert seconds < 10
    assert len(found) == 2
    assert (
        found[0].startswith("models.system (nosuchprovider/some-model): ") and "LLM Provider NOT provided" in found[0]
    )
    assert found[1].startswith("models.judge (openai/gpt-4o-mini at http://127.0.0.1:") and "Connection" in found[1]


def test_a_working_server_and_the_scripted_model_pass(tmp_path):
    with OpenAIStub() as stub:
        found, _ = problems(
            recipe(tmp_path, system={"model": "openai/gpt-4o-mini", "api_base": stub.base_url, "api_key": "sk-stub"})
        )
        kinds = sorted("response_format" in r["body"] for r in stub.requests)
    assert found == [] and kinds == [False, True]  # one text and one structured probe


def test_missing_keys_are_named(tmp_path, monkeypatch):
    monkeypatch.delenv("ATELIER_TEST_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    found, _ = problems(
        recipe(
            tmp_path,
            system={"model": "openai/gpt-4o-mini", "api_key_env": "ATELIER_TEST_KEY"},
            judge={"model": "anthropic/claude-3-5-haiku-20241022"},
        )
    )
    assert "models.system (openai/gpt-4o-mini): api_key_env names ATELIER_TEST_KEY, which is not set" in found
    assert any(
        p.startswith("models.judge (anthropic/claude-3-5-haiku-20241022): needs ANTHROPIC_API_KEY") for p in found
    )


def test_a_corrupted_data_file_is_refused(tmp_path, monkeypatch):
    from atelier.benchmarks.data_files import locate
    from atelier.benchmarks.loaders.locomo import RELPATH

    original, _ = locate(RELPATH)
    data = tmp_path / "data"
    (data / RELPATH).parent.mkdir(parents=True)
    (data / RELPATH).write_bytes(original.read_bytes()[:-10] + b"corrupted!")
    monkeypatch.setenv("ATELIER_DATA_DIR", str(data))
    found = data_problems("locomo")
    assert len(found) == 1 and found[0].startswith(f"data {RELPATH}: ") and "sha256 mismatch" in found[0]
    monkeypatch.delenv("ATELIER_DATA_DIR")
    assert data_problems("locomo") == []


def test_a_failed_preflight_starts_nothing_and_exits_2(tmp_path, cache_dir):
    bad = recipe(tmp_path, system={"model": "nosuchprovider/some-model"})
    with pytest.raises(PreflightError) as caught:
        run_recipe(bad, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()
    assert str(caught.value).startswith("preflight failed (1 problem); nothing was started:\n  models.system")
    path = tmp_path / "bad.toml"
    path.write_text(
        'name = "bad"\n[benchmark]\nname = "tiny"\n[models.system]\nmodel = "nosuchprovider/x"\n'
        '[[systems]]\nname = "s"\nmemory = { backend = "none" }\n'
    )
    result = CliRunner().invoke(app, ["run", str(path), "--no-progress", "--out", str(tmp_path / "cli")])
    assert isinstance(result.exception, PreflightError)  # main() prints it as one error and exits 2
    assert not (tmp_path / "cli").exists()
    skipped = CliRunner().invoke(
        app, ["run", str(path), "--no-progress", "--no-preflight", "--out", str(tmp_path / "cli")]
    )
    assert skipped.exit_code == 3 and "failed (of 3)" in skipped.stderr  # every episode failed instead


def test_the_command_exits_2_with_one_line_per_problem(tmp_path):
    import os
    import subprocess
    import sys

    path = tmp_path / "bad.toml"
    path.write_text(
        'name = "bad"\n[benchmark]\nname = "sample"\nlimit = 1\n[models.system]\nmodel = "nosuchprovider/x"\n'
        f'[models.judge]\nmodel = "openai/gpt-4o-mini"\napi_base = "http://127.0.0.1:{closed_port()}/v1"\n'
        'api_key = "sk-x"\n[[systems]]\nname = "s"\nmemory = { backend = "none" }\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "atelier.runs.cli", "run", str(path), "--out", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "ATELIER_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines[0] == "error: preflight failed (2 problems); nothing was started:"
    assert lines[1].startswith("  models.system (nosuchprovider/x): ") and lines[2].startswith("  models.judge (")
    assert "Traceback" not in done.stderr and not (tmp_path / "run").exists()


def test_a_judge_that_does_not_fit_the_benchmark_is_one_line_naming_both(tmp_path):
    from atelier.benchmarks.registry import load_cases

    r = parse_recipe(
        {
            "name": "misfit",
            "benchmark": {"name": "locomo", "limit": 3},
            "systems": [{"name": "s", "memory": {"backend": "none"}}],
            "judges": [{"name": "lampqa_aspects"}],
            "run": {"out_dir": str(tmp_path / "out")},
        }
    )
    started = time.perf_counter()
    found = asyncio.run(preflight_problems(r, load_cases("locomo", limit=3)))
    assert time.perf_counter() - started < 10
    assert len(found) == 1
    assert found[0].startswith(
        "judge 'lampqa_aspects' does not fit benchmark 'locomo': 3 of 3 cases lack rubric aspects"
    )


# --------------------------------------------------------------------------- every command that calls a model


def test_a_missing_key_is_bad_credentials_whatever_status_litellm_gives_it_and_never_retried():
    import litellm

    from atelier.agents.models.provider_errors import bad_credentials, classify

    missing = litellm.InternalServerError(  # what litellm raises for openai/... with no OPENAI_API_KEY
        message="OpenAIException - Missing credentials. Please pass an `api_key`, or set the `OPENAI_API_KEY`",
        llm_provider="openai",
        model="gpt-4o",
    )
    assert bad_credentials(missing) and classify(missing) == "fatal"
    trouble = litellm.InternalServerError(
        message="OpenAIException - upstream overloaded", llm_provider="openai", model="x"
    )
    assert not bad_credentials(trouble) and classify(trouble) == "retry"


def test_a_call_without_its_key_fails_at_once_as_authentication(monkeypatch):
    from atelier.agents.models.gateway import Gateway, ModelCallError
    from atelier.agents.models.settings import ModelSettings

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    gateway = Gateway({"judge": ModelSettings(model="openai/gpt-4o", max_retries=4, retry_backoff_s=30)})
    with pytest.raises(ModelCallError) as failed:
        asyncio.run(gateway.text("judge", [{"role": "user", "content": "hi"}]))
    assert failed.value.attempts == 1 and failed.value.verdict == "fatal"
    assert "authentication failed" in str(failed.value) and "not retried" in str(failed.value)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("pilot") / "run"
    run_recipe(
        parse_recipe(
            {
                "name": "pilot",
                "benchmark": {"name": "tiny", "limit": 2},
                "models": {"system": {"model": "scripted"}, "judge": {"model": "scripted"}},
                "systems": [{"name": "a", "memory": {"backend": "none"}}, {"name": "b", "memory": {"backend": "full"}}],
                "judges": [{"name": "lampqa_aspects"}],
                "run": {"out_dir": str(folder.parent)},
            }
        ),
        folder,
        progress=False,
    )
    return str(folder)


@pytest.mark.parametrize(
    "command",
    [
        ["rescore", "{run}", "--judge", "lampqa_aspects", "--out", "{tmp}/rescored", "--no-progress"],
        ["simulate", "feedback", "--run", "{run}", "--out", "{tmp}/pairs.jsonl"],
        ["meta-eval", "{run}", "--judge", "lampqa_aspects", "--against", "{run}", "--feedback"],
        ["plan", "{run}", "--detect", "0.1"],
        ["recipe", "check", "{tmp}/recipe.toml"],
    ],
    ids=lambda c: " ".join(c[:2]),
)
def test_every_command_that_calls_a_model_refuses_a_missing_key_by_name_with_exit_2(
    command, finished_run, tmp_path, capsys, monkeypatch
):
    """Issue 48: `rescore --model openai/gpt-4o` with no key was retried for ten minutes; each command
    that calls (or prices) a model now runs the run's preflight of it: exit 2, nothing written."""
    from tests.test_cli_errors import atelier

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    (tmp_path / "recipe.toml").write_text(
        'name = "r"\n[benchmark]\nname = "tiny"\n[[systems]]\nname = "s"\nmemory = { backend = "none" }\n'
    )
    args = [part.format(run=finished_run, tmp=tmp_path) for part in command] + ["--model", "openai/gpt-4o"]
    code, _, err = atelier(capsys, monkeypatch, *args)
    assert code == 2, err
    assert "needs OPENAI_API_KEY" in err and "(openai/gpt-4o)" in err and "Traceback" not in err
    assert not (tmp_path / "rescored" / "results.jsonl").exists() and not (tmp_path / "pairs.jsonl").exists()


@pytest.mark.parametrize(
    ("model", "needs"),
    [
        ("openai/local-alias", None),  # sent the placeholder key: a llama.cpp server ignores it
        ("hosted_vllm/Qwen/Qwen2.5-7B-Instruct", None),
        ("ollama_chat/llama3.1", None),
        ("anthropic/claude-3-5-haiku-latest", "ANTHROPIC_API_KEY"),  # a proxy at an api_base still wants one
    ],
)
def test_a_model_at_an_api_base_needs_a_key_where_its_provider_does(monkeypatch, model, needs):
    """An api_base used to waive every key check: `recipe check` said ok for an anthropic/ proxy with
    no key, and the run then failed at its first call (outside audit)."""
    from atelier.agents.models.settings import ModelSettings
    from atelier.runs.execution.preflight import key_problems

    for variable in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "ATELIER_API_KEY"):
        monkeypatch.delenv(variable, raising=False)
    problems = key_problems(ModelSettings(model=model, api_base="http://127.0.0.1:9/v1"))
    assert problems == ([] if needs is None else [f"needs {needs} (set it, or api_key_env / api_key in the recipe)"])
