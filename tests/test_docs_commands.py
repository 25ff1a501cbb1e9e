"""Every `atelier ...` command in a fenced block of README.md and docs/*.md is exercised, so the docs
cannot rot.

What counts as a documented command: a line of a fenced block written as ```bash, ```console, ```sh,
```shell or ``` with no language whose command (after a leading `$ ` and `.venv/bin/`, with backslash
continuations joined, cut at `&&`, `||`, `;` and `|`) starts with `atelier`. Its `# comment` is not
part of the command, but the `--flags` a comment names (`# or --executor ray`, and an indented comment
line right below it) are that command's flags too, and are checked like the others.

Each command is exercised in one of two ways:
- **help**: `atelier <command path> --help` must succeed, and every `--flag` the line uses or its
  comment names must appear in that help text (so renaming a documented flag fails here). The help
  texts are collected in one subprocess that calls the CLI's own entry point (`main()`) once per
  command path: forty-odd interpreters would take longer than all the real runs together.
- **for real**: the commands in `REAL` run as `python -m <CLI_MODULE> ...` subprocesses from the
  repository root on the scripted model, with their outputs sent to a temporary folder (the paths
  in `PLACEHOLDERS`) and a temporary response cache, and must end with the expected exit code. The
  README tour's two runs share one module-scoped fixture; everything else that reads a run reads them.

Every documented command is either in `REAL` or its command path has a reason in `HELP_ONLY_WHY`;
a command documented anew fails `test_every_documented_command_is_reviewed` until it is placed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# the CLI's module: `python -m CLI_MODULE ...` is `atelier ...`
CLI_MODULE = "atelier.runs.cli"

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_LANGUAGES = {"", "bash", "console", "sh", "shell"}
COMMAND_SEPARATORS = {"&&", "||", ";", "|"}
FLAG = re.compile(r"--[A-Za-z0-9][A-Za-z0-9-]*")

# --------------------------------------------------------------------------- the reviewed lists

# Documented commands run for real (the documented text, as `DocCommand.text` spells it) -> (the exit
# code it must end with, why it is worth running). Their arguments are the documented ones, with the
# paths of PLACEHOLDERS replaced.
REAL: dict[str, tuple[int, str]] = {
    # the README tour, step 1 to 3: the module fixture runs the two runs, the rest read them
    "atelier run quickstart --limit 4 --out runs/out/tour": (
        0,
        "the tour's first run, the shipped recipe by name: 4 cases x 2 systems on the scripted model; every "
        "other real command reads it",
    ),
    "atelier run my_recipe.toml --limit 4 --out runs/out/tour-retrieval": (
        0,
        "the tour's swapped backend: the quickstart with README's [[systems]] snippet (BM25 retrieval)",
    ),
    "atelier recipe check quickstart": (0, "the tour: a shipped recipe checked by name"),
    "atelier recipe check runs/recipes/quickstart.toml": (0, "recipes.md: the same recipe by its path"),
    "atelier recipe list": (0, "the first command of the tour and of recipes.md: the shipped recipes"),
    "atelier view runs/out/tour --static runs/out/tour/view": (0, "the tour: the run's episodes as static pages"),
    "atelier trace runs/out/tour q13 --system direct-full --all": (
        0,
        "the tour: one episode printed (q13 is among the tour's 4 cases)",
    ),
    "atelier list memory": (0, "the tour: the memory backends a recipe can name"),
    "atelier run personalization_controls --limit 2 --out runs/out/controls": (
        0,
        "personalization.md: the shipped controls recipe on two cases, each system beside its controls",
    ),
    "atelier view runs/out/controls --static runs/out/controls/view": (
        0,
        "personalization.md: the control episodes in the view",
    ),
    "atelier trace runs/out/controls q13 --system direct-full --control swapped --all": (
        0,
        "personalization.md: one control episode stepped through",
    ),
    "atelier compare runs/out/tour runs/out/tour-retrieval --html runs/out/compare.html": (
        0,
        "the tour: the two runs side by side, as a table and a page",
    ),
    "atelier report RUN_DIR": (0, "rewrites summary.json and report.html of the tour's run"),
    "atelier data list": (0, "no data is read, only located"),
    "atelier metric --list": (0, "pure code"),
    "atelier metric pqr --input benchmarks/metrics/examples/pqr.json": (0, "pure code on a shipped example"),
    "atelier metric paired_test --input benchmarks/metrics/examples/paired_test.json": (
        0,
        "pure code: the crossed-clusters example of docs/statistics.md",
    ),
    "atelier metric bootstrap_ci --schema": (0, "pure code: the input schema, clusters included"),
    "atelier plan runs/out/tour --detect 0.3 --no-cost": (0, "the plan from the tour's run, without the forecast"),
    "atelier studio runs/out/studio": (0, "studio.md: a langgraph.json for any install, and the module it names"),
    "atelier simulate check-precision": (
        0,
        "simulated-users.md: the history checks measured on the shipped labelled set (offline, the local MiniLM)",
    ),
}

# Every other documented command is checked with --help only; why, per command path.
HELP_ONLY_WHY: dict[tuple[str, ...], str] = {
    ("run",): "a whole run of a recipe (minutes), on a real model, a Ray cluster or the local model; "
    "the tour's two `--limit 4` runs run for real",
    ("recipe", "check"): "`--preflight` or a placeholder recipe; the plain check of the quickstart runs for real",
    ("recipe", "cost"): "a scripted dry run of sample cases: ~13 s for what `recipe check` already loads",
    ("recipe", "new"): "writes into the current folder (the checkout here); tests/test_shipped_recipes.py runs it "
    "in a temporary one and checks what it wrote",
    ("list",): "the bracketed kinds are alternatives; `atelier list memory` runs for real",
    ("view",): "without --static it serves until stopped; the tour's --static view runs for real",
    ("trace",): "placeholders; the tour's trace runs for real",
    ("compare",): "placeholders and optional flags; the tour's compare runs for real",
    ("data", "check"): "reads every record of the shared data sets (ATELIER_DATA_DIR), which CI may lack",
    ("memory", "eval"): "needs iKAT or LoCoMo and minutes of embedding",
    ("web", "serve"): "serves until stopped",
    ("bench", "data"): "timed repetitions over the shared data sets",
    ("bench", "memory"): "ingests N items: minutes",
    ("bench", "web"): "a timed benchmark of the sandbox web",
    ("bench", "runner"): "hundreds of episodes: minutes",
    ("bench", "graph"): "a timed benchmark; external agents need the agents extra",
    ("bench", "model"): "times a model: a real one, or the local one (its server)",
    ("bench", "judge"): "a timed benchmark of the PQR judge",
    ("rescore",): "needs a real judge model (--model openai/...) or a judges file of the reader's",
    ("meta-eval", "RUN_DIR"): "needs labels a person filled in, or a second run judged by PQR",
    ("meta-eval", "sheet"): "needs a run judged by BESPOKE (the tour's is judged by LaMP-QA)",
    ("label",): "serves the labelling page until stopped; tests/test_label_page.py drives it in chromium",
    ("plan",): "placeholder RUN_DIR and a real model's price; the plan of the tour's run runs for real",
    ("gateway", "serve"): "serves until stopped",
    ("model", "check"): "probes a real server (Ollama, the local model)",
    ("model", "serve"): "serves the local model until stopped",
    ("simulate", "history"): "writes histories for PDR-Bench users: minutes, and the PDR data",
    ("simulate", "check"): "placeholder contexts file; `--reversibility` needs a real model",
    ("studio",): "--serve starts langgraph dev until stopped, --graph needs a plugin on the path; the plain one "
    "runs for real, and tests/test_studio_config.py serves what it writes",
    ("check",): "the conformance kit takes 10-60 s a system (a child process it kills, the sandbox web); "
    "tests/test_conformance.py runs it on every built-in and on examples/mylab",
}

# The documented paths a real command writes or reads, in the temporary folder instead. `my_recipe.toml`
# is the quickstart with README's `[[systems]]` snippet in place of its last system, as the tour says.
PLACEHOLDERS = {
    "runs/out/tour": "{tmp}/tour",
    "runs/out/tour-retrieval": "{tmp}/tour-retrieval",
    "runs/out/tour/view": "{tmp}/view",
    "runs/out/compare.html": "{tmp}/compare.html",
    "my_recipe.toml": "{tmp}/my_recipe.toml",
    "RUN_DIR": "{tmp}/tour",
    "runs/out/studio": "{tmp}/studio",
    "runs/out/controls": "{tmp}/controls",
    "runs/out/controls/view": "{tmp}/controls-view",
}
# When each runs (two at a time): the tour's runs, then what reads them, then `report` (which rewrites
# the tour's folder) beside the commands that need no run.
TOUR_RUNS = [text for text in REAL if text.startswith("atelier run ")]
TOUR_READERS = [text for text in REAL if "runs/out/tour" in text and text not in TOUR_RUNS]
LAST = [text for text in REAL if text not in TOUR_RUNS + TOUR_READERS]


# --------------------------------------------------------------------------- reading the docs


@dataclass
class DocCommand:
    where: str  # file:line
    tokens: list[str]  # from `atelier` on
    comment_flags: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return " ".join(self.tokens)

    def flags(self) -> list[str]:
        found = [m.group(0) for token in self.tokens if (m := FLAG.match(token.lstrip("[")))]
        return list(dict.fromkeys(found + self.comment_flags))


def _split_comment(line: str) -> tuple[str, str]:
    """The command and its `# comment` (a # that starts a word outside quotes)."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i], line[i + 1 :]
    return line, ""


def commands_in(markdown: str, name: str) -> list[DocCommand]:
    """The `atelier ...` commands of the shell blocks of one markdown text."""
    commands: list[DocCommand] = []
    lines = markdown.split("\n")
    in_block, shell = False, False
    after_command = -1  # the index of the line right after the last atelier command read
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = re.match(r"\s*```(\S*)\s*$", line)
        if fence:
            in_block, shell = (not in_block), fence.group(1).lower() in SHELL_LANGUAGES
            i += 1
            continue
        if not (in_block and shell):
            i += 1
            continue
        start = i
        while line.rstrip().endswith("\\") and i + 1 < len(lines):  # a backslash continuation
            i += 1
            line = line.rstrip()[:-1] + " " + lines[i].strip()
        i += 1
        code, comment = _split_comment(line.strip())
        code = code.strip()
        if not code:  # a comment line: an indented one right below a command continues its comment
            if line.startswith((" ", "\t")) and start == after_command:
                commands[-1].comment_flags += FLAG.findall(comment)
                after_command = i
            continue
        if "atelier" not in code:
            continue
        try:
            words = shlex.split(code.removeprefix("$ "))
        except ValueError:  # not shell (a layout drawing in a plain ``` block)
            words = code.split()
        tokens = [word.lstrip("(").rstrip(")") for word in words]
        segment: list[str] = []
        found = []
        for token in [*tokens, "&&"]:
            if token not in COMMAND_SEPARATORS:
                segment.append(token)
                continue
            if segment and segment[0].removeprefix(".venv/bin/") == "atelier":
                found.append(DocCommand(f"{name}:{start + 1}", ["atelier", *segment[1:]]))
            segment = []
        if found:
            found[-1].comment_flags = FLAG.findall(comment)
            commands += found
            after_command = i
    return commands


def documented_commands() -> list[DocCommand]:
    return [
        c
        for path in DOC_FILES
        for c in commands_in(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())
    ]


# --------------------------------------------------------------------------- the CLI's tree and help

# Runs in one subprocess: the command tree, then each requested argv through the CLI's `main()`.
_HELPER = r"""
import contextlib, importlib, io, json, sys
import typer
module = importlib.import_module(sys.argv[1])
def tree(command):
    subs = getattr(command, "commands", None)
    return None if subs is None else {name: tree(sub) for name, sub in subs.items()}
answers = []
for args in json.loads(sys.stdin.read()):
    out, err = io.StringIO(), io.StringIO()
    sys.argv = ["atelier", *args]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            module.main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    answers.append({"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
print(json.dumps({"tree": tree(typer.main.get_command(module.app)), "answers": answers}))
"""


def _env(tmp: Path | None = None) -> dict[str, str]:
    env = {**os.environ, "COLUMNS": "250", "TERMINAL_WIDTH": "250", "NO_COLOR": "1", "TERM": "dumb"}
    if tmp is not None:
        env["ATELIER_CACHE_DIR"] = str(tmp / "cache")
    return env


def _ask_cli(requests: list[list[str]]) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _HELPER, CLI_MODULE],
        input=json.dumps(requests),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def help_args(tokens: list[str], tree: dict) -> tuple[str, ...]:
    """The arguments that ask for the help of the command `tokens` names: its command path; when the
    path ends at a group and an argument follows, that argument too (a group with a default command,
    `meta-eval RUN ...`, takes it; any other group refuses it as an unknown command)."""
    path: list[str] = []
    node: dict | None = tree
    rest = tokens[1:]
    while node is not None and rest and rest[0] in node:
        node = node[rest[0]]
        path.append(rest.pop(0))
    if node is not None and rest and not rest[0].startswith("-"):
        path.append(rest[0])
    return tuple(path)


def flag_problems(command: DocCommand, tree: dict, helps: dict[tuple[str, ...], dict]) -> list[str]:
    """What is wrong with a documented command: its help fails, or lacks a flag it uses."""
    args = help_args(command.tokens, tree)
    answer = helps[args]
    shown = "atelier " + " ".join((*args, "--help"))
    if answer["code"] != 0:
        return [f"{command.where}: `{shown}` exited {answer['code']}: {answer['stderr'].strip()[:300]}"]
    return [
        f"{command.where}: `{command.text}` uses {flag}, which `{shown}` does not know"
        for flag in command.flags()
        if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", answer["stdout"])
    ]


# --------------------------------------------------------------------------- fixtures

COMMANDS = documented_commands()


@pytest.fixture(scope="module")
def cli() -> dict:
    """The command tree and the help text of every documented command path."""
    tree = _ask_cli([])["tree"]
    wanted = sorted({help_args(c.tokens, tree) for c in COMMANDS})
    answers = _ask_cli([[*args, "--help"] for args in wanted])["answers"]
    return {"tree": tree, "helps": dict(zip(wanted, answers))}


def _argv(text: str, tmp: Path) -> list[str]:
    tokens = shlex.split(text)
    assert tokens[0] == "atelier"
    return [PLACEHOLDERS[t].format(tmp=tmp) if t in PLACEHOLDERS else t for t in tokens[1:]]


def _run(argv: list[str], tmp: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", CLI_MODULE, *argv], capture_output=True, text=True, cwd=ROOT, env=_env(tmp), timeout=300
    )


def _readme_systems_snippet() -> str:
    """The README tour's `[[systems]]` block (the swapped memory backend)."""
    blocks = re.findall(r"```toml\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)
    snippet = [b for b in blocks if b.lstrip().startswith("[[systems]]")]
    assert len(snippet) == 1, "README's tour shows one [[systems]] block to put in my_recipe.toml"
    return snippet[0]


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> tuple[Path, dict[str, subprocess.CompletedProcess]]:
    """Every REAL command's outcome, two at a time in the order of TOUR_RUNS, TOUR_READERS, LAST."""
    tmp = tmp_path_factory.mktemp("docs")
    quickstart = (ROOT / "runs/recipes/quickstart.toml").read_text(encoding="utf-8")
    last_system = quickstart.rindex("[[systems]]")
    end = quickstart.index("\n[[", last_system + 1)  # the table after it
    (tmp / "my_recipe.toml").write_text(
        quickstart[:last_system] + _readme_systems_snippet() + quickstart[end:], encoding="utf-8"
    )
    results: dict[str, subprocess.CompletedProcess] = {}
    with ThreadPoolExecutor(max_workers=2) as pool:
        for phase in (TOUR_RUNS, TOUR_READERS, LAST):
            for text, done in zip(phase, pool.map(lambda t: _run(_argv(t, tmp), tmp), phase)):
                results[text] = done
    return tmp, results


# --------------------------------------------------------------------------- the tests


def test_the_docs_document_commands():
    assert len(COMMANDS) > 50, [c.text for c in COMMANDS]
    assert {Path(c.where.split(":")[0]).name for c in COMMANDS} >= {"README.md", "runs-and-reports.md", "judges.md"}


def test_every_documented_command_is_reviewed(cli):
    """A command is run for real (REAL) or its path says why it is not (HELP_ONLY_WHY); neither list
    names what the docs no longer document."""
    tree = cli["tree"]
    documented = {c.text for c in COMMANDS}
    assert not set(REAL) - documented, f"REAL names commands no page documents: {sorted(set(REAL) - documented)}"
    unreviewed = [
        f"{c.where}: {c.text}"
        for c in COMMANDS
        if c.text not in REAL and help_args(c.tokens, tree) not in HELP_ONLY_WHY
    ]
    assert not unreviewed, "run these for real (REAL) or say why not (HELP_ONLY_WHY):\n" + "\n".join(unreviewed)
    paths = {help_args(c.tokens, tree) for c in COMMANDS if c.text not in REAL}
    assert not set(HELP_ONLY_WHY) - paths, (
        f"HELP_ONLY_WHY names paths no help-only command has: {set(HELP_ONLY_WHY) - paths}"
    )


@pytest.mark.parametrize("command", COMMANDS, ids=[f"{c.where}" for c in COMMANDS])
def test_help_knows_every_documented_flag(command, cli):
    problems = flag_problems(command, cli["tree"], cli["helps"])
    assert not problems, "\n".join(problems)


def test_a_renamed_flag_or_command_is_reported(cli):
    """The checker fails a documented line whose flag (or subcommand) the CLI does not have."""
    tree, helps = cli["tree"], dict(cli["helps"])
    [renamed] = commands_in("```bash\natelier run runs/recipes/quickstart.toml --limitt 3 --out x\n```\n", "doc.md")
    assert flag_problems(renamed, tree, helps) == [
        "doc.md:2: `atelier run runs/recipes/quickstart.toml --limitt 3 --out x` uses --limitt, "
        "which `atelier run --help` does not know"
    ]
    [in_comment] = commands_in("```\n$ .venv/bin/atelier data list   # or --jsn\n```\n", "doc.md")
    assert [p for p in flag_problems(in_comment, tree, helps) if "--jsn" in p]
    [misspelt] = commands_in("```sh\natelier recipe chekc runs/recipes/quickstart.toml\n```\n", "doc.md")
    args = help_args(misspelt.tokens, tree)
    helps[args] = _ask_cli([[*args, "--help"]])["answers"][0]
    assert flag_problems(misspelt, tree, helps), "an unknown subcommand must fail its --help"


def test_reading_shell_blocks():
    markdown = (
        "```toml\natelier = 1\n```\n"
        "```bash\n# a comment\n$ atelier run R --limit 2 \\\n    --out o   # resumes an existing --out; see --seed\n"
        "    # --epochs 2\n(cd x && .venv/bin/atelier data list --json) | head\nray start --head\n```\n"
        "```python\natelier.run()\n```\n"
    )
    found = commands_in(markdown, "f.md")
    assert [(c.where, c.text, c.flags()) for c in found] == [
        ("f.md:6", "atelier run R --limit 2 --out o", ["--limit", "--out", "--seed", "--epochs"]),
        ("f.md:9", "atelier data list --json", ["--json"]),
    ]


# the documented commands run for real: ~20 commands, two at a time (70 s of the README command's
# 10 min on a slower VM), in the battery with the other whole runs; their --help checks stay here
@pytest.mark.battery
@pytest.mark.parametrize("text", list(REAL))
def test_documented_command_runs(text, real):
    done = real[1][text]
    expected = REAL[text][0]
    assert done.returncode == expected, f"`{text}` exited {done.returncode}, not {expected}:\n{done.stderr[-3000:]}"


@pytest.mark.battery
def test_the_tour_reads_what_it_ran(real):
    tmp, results = real
    for run in ("tour", "tour-retrieval"):
        summary = json.loads((tmp / run / "summary.json").read_text(encoding="utf-8"))
        assert summary["episodes"]["failed"] == 0, summary["episodes"]
    assert "direct-retrieval" in (tmp / "tour-retrieval" / "summary.json").read_text(encoding="utf-8")
    assert (tmp / "view" / "index.html").is_file()
    assert (tmp / "compare.html").is_file()
    assert "q13" in results["atelier trace runs/out/tour q13 --system direct-full --all"].stdout
    control_trace = "atelier trace runs/out/controls q13 --system direct-full --control swapped --all"
    assert "q13" in results[control_trace].stdout
    controls_view = (tmp / "controls-view" / "index.html").read_text(encoding="utf-8")
    assert 'data-control="swapped"' in controls_view and 'data-control="no_context"' in controls_view
