"""Any command as a system (`agent = "command"`): a small script speaking the command protocol runs
inside the agents' boundary (the launcher's namespaces), searches and reads the run's web and asks
the run's model through the endpoint (ledgered with the case), and its report is scored with its
citation's page in `sources/`; a script that exits 1, prints no JSON or hangs fails its episode
with the reason named."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from atelier.benchmarks.common.errors import ConfigError
from atelier.graphs.external import launcher
from atelier.graphs.pipelines import pipeline_options
from atelier.graphs.sources import SourceStore
from atelier.runs.execution.runner import run_recipe
from atelier.runs.folder.recipe import parse_recipe

ROOT = Path(__file__).resolve().parent.parent
AGENT = str(ROOT / "docs" / "examples" / "command_agent.py")  # outside /tmp: the boundary's /tmp is its own
AGENTS = ROOT / "tests" / "fixtures" / "agents"
HELPERS = {"helper-bash": ("sleep", "7771"), "helper-node": ("sleep", "7772")}  # what each leaves running


def running(argv: tuple[str, ...]) -> list[int]:
    """The processes on this machine whose command line is `argv`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and tuple((entry / "cmdline").read_bytes().split(b"\0")[:-1]) == tuple(
                a.encode() for a in argv
            ):
                found.append(int(entry.name))
        except OSError:
            pass
    return found


def system(name: str, mode: str, **options) -> dict:
    return {
        "name": name,
        "pipeline": "external",
        "memory": {"backend": "full"},
        "pipeline_options": {"agent": "command", "command": [sys.executable, AGENT, "--mode", mode], **options},
    }


def ended(pid: int) -> bool:
    """The process is gone, or a zombie (killed, not yet reaped by its parent)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def command_system(name: str, command: list[str], **options) -> dict:
    return {
        "name": name,
        "pipeline": "external",
        "memory": {"backend": "full"},
        "pipeline_options": {"agent": "command", "command": command, **options},
    }


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("command")
    recipe = parse_recipe(
        {
            "name": "command-agents",
            "benchmark": {"name": "sample", "setting": "context", "limit": 1},
            "models": {"system": {"model": "scripted"}, "judge": {"model": "scripted"}},
            "systems": [
                system("script", "ok"),
                system("script-file", "ok", job_via="file"),
                system("crash", "exit1"),
                system("garbage", "garbage"),
                system("hang", "hang", timeout_s=4),
                # each prints its report and exits 0, leaving a helper that holds its stdout open:
                # past the timeout, the episode would fail as a hang
                command_system("helper-bash", ["bash", str(AGENTS / "helper_agent.sh")], timeout_s=60),
                command_system("helper-node", ["node", str(AGENTS / "helper_agent.js")], timeout_s=60),
            ],
            "judges": [{"name": "lampqa_aspects"}],
            "cache": {"dir": str(tmp / "llm")},
            "run": {"out_dir": str(tmp / "run"), "concurrency": 5},
        }
    )
    return run_recipe(recipe, progress=False)


def test_a_command_speaking_the_protocol_is_a_scored_system(folder):
    results = {r["system"]: r for r in lines(folder.results)}
    ledger = lines(folder.ledger)
    store = SourceStore.for_run(str(folder.path))
    for name, via in (("script", "stdin"), ("script-file", "file")):
        result = results[name]
        assert result["status"] == "ok" and result["scores"]["lampqa_aspects"] is not None, result.get("error")
        response = result["response"]
        assert response["meta"]["agent"] == "command" and response["meta"]["isolation"] == "namespaces"
        assert response["meta"]["searches"] == 1 and response["meta"]["fetches"] == 1
        (citation,) = response["citations"]  # the page it read, by its own URL, with what it said
        assert citation["number"] == 1 and citation["url"].startswith("https://") and store.get(citation["sha256"])
        assert response["meta"]["details"]["argv"][-1] == "ok"
        # its model call went through the run's endpoint: ledgered with the case, under its call name
        (call,) = [e for e in ledger if e["system"] == name and e["node"] == "command:command-agent"]
        assert call["case_id"] == result["case_id"] and call["status"] == "ok"
        log = next((folder.path / "external" / name).glob("*/agent.log")).read_text()
        assert f"({via})" in log  # the job came as the protocol says
    # a command agent's server runs inside the agents' namespaces, as the other agents' do
    assert any(agent == "command" and isolated for (_, agent, isolated) in launcher._servers)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("crash", "command failed: CommandFailed: exited with code 1; its stderr ends: job for case"),
        ("garbage", "its stdout is not one JSON object"),
        ("hang", "command did not finish within 4 s"),
    ],
)
def test_a_command_that_fails_or_hangs_fails_its_episode_naming_why(folder, name, reason):
    result = {r["system"]: r for r in lines(folder.results)}[name]
    assert result["status"] == "error" and reason in result["error"], result["error"]
    assert "a dry run" not in result["error"]  # none of these asked the model: its free text is not why
    if name == "crash":
        assert "broke down on purpose" in result["error"]


@pytest.mark.parametrize("name", sorted(HELPERS))
def test_a_command_is_done_when_it_exits_and_what_it_left_running_ends(folder, name):
    result = {r["system"]: r for r in lines(folder.results)}[name]
    assert result["status"] == "ok", result.get("error")  # not "did not finish within 60 s"
    assert "cites nothing" in result["response"]["text"]
    # a report that cites nothing rests on no source: said so, as for every system
    assert [d["kind"] for d in result["response"]["degraded"]] == ["no_findings"]
    assert running(HELPERS[name]) == []  # its helper ended with it


async def test_a_sealed_command_that_exits_ends_with_what_it_left_running(tmp_path):
    """`run_command_job` (a command as a job of its own): done when it exits, its group ended then."""
    code = await launcher.run_command_job(
        ["sh", "-c", "sleep 7773 & echo $! > helper.pid; echo done"],
        tmp_path,
        tmp_path / "command.log",
        {},
        60,
        isolation="none",
    )
    assert code == 0 and (tmp_path / "command.log").read_text() == "done\n"
    helper = int((tmp_path / "helper.pid").read_text())
    for _ in range(100):  # killed at once; gone once its new parent reaps it
        if ended(helper):
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError(f"the command's helper (pid {helper}) outlived it")


def test_the_dry_run_hint_is_given_only_where_the_models_text_may_be_why():
    from collections import Counter
    from types import SimpleNamespace

    from atelier.graphs.external.graph import dry_run_may_explain

    asked = SimpleNamespace(calls=Counter({"planner": 1}), errors=[])
    parse = "OutputParserException: Invalid json output: DRY RUN: sure"
    assert dry_run_may_explain(parse, True, asked)
    assert not dry_run_may_explain(parse, False, asked)  # a real model's text
    assert not dry_run_may_explain(parse, True, SimpleNamespace(calls=Counter(), errors=[]))  # never asked it
    assert not dry_run_may_explain(parse, True, SimpleNamespace(calls=Counter({"x": 1}), errors=["429"]))
    assert not dry_run_may_explain("CommandFailed: exited with code 1", True, asked)  # not a parse


def test_command_options_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="needs command"):
        pipeline_options("external", {"agent": "command"})
    with pytest.raises(ConfigError, match="command: only for agent = 'command'"):
        pipeline_options("external", {"agent": "gpt_researcher", "command": ["x"]})
    with pytest.raises(ConfigError, match="job_via"):
        pipeline_options("external", {"agent": "command", "command": ["x"], "job_via": "socket"})
    missing = pipeline_options("external", {"agent": "command", "command": ["no-such-program-here"]})
    with pytest.raises(ConfigError, match="no-such-program-here is not on the agents' PATH"):
        missing.check_available()
    not_a_folder = pipeline_options(
        "external", {"agent": "command", "command": ["python3"], "cwd": str(tmp_path / "x")}
    )
    with pytest.raises(ConfigError, match="is not a folder"):
        not_a_folder.check_available()
