"""Bad input through the CLI, as a careless user or an attacker gives it: every case ends in one
line on stderr naming the file, line or key, and exit code 2 — never a traceback. An unexpected
error (a bug) is one line too, exit 1, with the path of the file holding its traceback.

The command runs in this process (`runs.cli.main`), so the tiny test benchmark is registered.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import sys
from pathlib import Path

import pytest

from atelier.benchmarks.data_files import ENV_DATA_DIR, data_dir
from atelier.runs.cli import main

TINY = """
name = "t"
[benchmark]
name = "tiny"
[models.system]
model = "scripted"
[models.judge]
model = "scripted"
[[systems]]
name = "none"
memory = { backend = "none" }
[[judges]]
name = "lampqa_aspects"
"""
DEEP = "[" * 200_000 + "]" * 200_000


def atelier(capsys, monkeypatch, *args: str) -> tuple[int, str, str]:
    """Run `atelier ARGS` in this process: (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["atelier", *args])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main()
    out, err = capsys.readouterr()
    return exited.value.code or 0, out, err


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("error: ")
    return lines[0]


def the_error(err: str) -> str:
    """The one error line of a command that may say something first (`preflight ok`, `resuming ...`)."""
    assert "Traceback" not in err
    [line] = [line for line in err.splitlines() if line.startswith("error: ")]
    return line


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def run_folder(tmp_path, capsys, monkeypatch) -> tuple[Path, Path]:
    recipe = write(tmp_path / "tiny.toml", TINY)
    code, out, err = atelier(capsys, monkeypatch, "run", str(recipe), "--no-progress", "--out", str(tmp_path / "run"))
    assert code == 0, err
    return recipe, tmp_path / "run"


# ------------------------------------------------------------------------------------ recipes


def test_a_recipe_that_is_not_utf8_is_named_with_its_line(tmp_path, capsys, monkeypatch, cache_dir):
    recipe = write(
        tmp_path / "latin1.toml", TINY.replace('name = "t"', 'name = "t"\ndescription = "caf\xe9"').encode("latin-1")
    )
    code, _, err = atelier(capsys, monkeypatch, "recipe", "check", str(recipe))
    assert code == 2
    assert f"{recipe}:3: not valid UTF-8" in one_error_line(err)


def test_a_recipe_nested_200000_deep_is_one_error(tmp_path, capsys, monkeypatch, cache_dir):
    recipe = write(tmp_path / "deep.toml", TINY + f"\n[web]\nallow_hosts = {DEEP}\n")
    code, _, err = atelier(capsys, monkeypatch, "recipe", "check", str(recipe))
    assert code == 2
    assert f"{recipe}: not valid TOML: arrays or tables nested too deeply" in one_error_line(err)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("[[judges]]", "[run]\nconcurrency = true\n[[judges]]", "run.concurrency: Input should be a valid integer"),
        (
            '[models.judge]\nmodel = "scripted"',
            '[models.judge]\nmodel = "scripted?error_rate=2"',
            "models.judge.model: 'scripted?error_rate=2': error_rate: Input should be less than or equal to 1",
        ),
        (
            '[models.judge]\nmodel = "scripted"',
            '[models.judge]\nmodel = "scripted?bogus=1"',
            "models.judge.model: 'scripted?bogus=1': bogus: unknown parameter",
        ),
        ('name = "t"', 'name = "t"\nseed = 2024-01-01', "seed: a TOML date or time is not a valid value"),
    ],
    ids=["concurrency-true", "error-rate-2", "unknown-scripted-parameter", "toml-date"],
)
def test_recipe_values_lax_parsing_would_take_are_refused(tmp_path, capsys, monkeypatch, cache_dir, old, new, expected):
    assert old in TINY
    recipe = write(tmp_path / "bad.toml", TINY.replace(old, new))
    code, _, err = atelier(capsys, monkeypatch, "recipe", "check", str(recipe))
    assert code == 2
    line = one_error_line(err)
    assert str(recipe) in line and expected in line


def test_a_bad_model_flag_is_named(tmp_path, capsys, monkeypatch, cache_dir):
    recipe = write(tmp_path / "tiny.toml", TINY)
    code, _, err = atelier(
        capsys, monkeypatch, "run", str(recipe), "--model", "scripted?bogus=1", "--out", str(tmp_path / "r")
    )
    assert code == 2
    assert "--model: 'scripted?bogus=1': bogus: unknown parameter" in one_error_line(err)
    assert not (tmp_path / "r").exists()


def test_an_api_key_in_the_web_provider_options_is_kept_for_the_run_but_not_written(
    tmp_path, capsys, monkeypatch, cache_dir
):
    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    recipe = write(
        tmp_path / "keyed.toml",
        TINY + '\n[web]\nprovider = "serper"\n[web.provider_options]\napi_key = "sk-in-the-recipe"\n',
    )
    code, out, err = atelier(capsys, monkeypatch, "recipe", "check", str(recipe))
    assert code == 0 and out.startswith("ok: "), err
    code, _, err = atelier(capsys, monkeypatch, "run", str(recipe), "--no-progress", "--out", str(tmp_path / "run"))
    assert code == 0, err
    assert not any(
        "sk-in-the-recipe" in path.read_text(errors="replace")
        for path in (tmp_path / "run").rglob("*")
        if path.is_file()
    )


# ------------------------------------------------------------------------------------ data files


@pytest.fixture
def data_copy(tmp_path, monkeypatch):
    """A data directory holding copies of the real files named, for one test to damage."""

    def make(*relpaths: str) -> Path:
        root = tmp_path / "data"
        for relpath in relpaths:
            (root / relpath).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(data_dir() / relpath, root / relpath)
        monkeypatch.setenv(ENV_DATA_DIR, str(root))
        return root

    return make


def benchmark_recipe(tmp_path: Path, benchmark: str) -> Path:
    return write(tmp_path / f"{benchmark}.toml", TINY.replace('name = "tiny"', f'name = "{benchmark}"\nlimit = 1'))


def test_a_query_line_nested_200000_deep_is_named_by_file_and_line(tmp_path, capsys, monkeypatch, cache_dir, data_copy):
    root = data_copy("deep_research_bench/query.jsonl", "deep_research_bench/criteria.jsonl")
    query = root / "deep_research_bench/query.jsonl"
    lines = query.read_text().splitlines()
    lines[4] = DEEP
    query.write_text("\n".join(lines) + "\n")
    code, _, err = atelier(
        capsys, monkeypatch, "run", str(benchmark_recipe(tmp_path, "drb")), "--out", str(tmp_path / "r")
    )
    assert code == 2
    assert f"{query}:5: invalid JSON: nested too deeply" in one_error_line(err)


def test_locomo_nested_200000_deep_is_named_by_file(tmp_path, capsys, monkeypatch, cache_dir, data_copy):
    root = data_copy("locomo/locomo10.json")
    write(root / "locomo/locomo10.json", f'[{{"sample_id": {DEEP}}}]')
    code, _, err = atelier(
        capsys, monkeypatch, "run", str(benchmark_recipe(tmp_path, "locomo")), "--out", str(tmp_path / "r")
    )
    assert code == 2
    assert f"{root / 'locomo/locomo10.json'}: invalid JSON: nested too deeply" in one_error_line(err)


def test_an_empty_query_file_is_refused_not_run_as_zero_cases(tmp_path, capsys, monkeypatch, cache_dir, data_copy):
    root = data_copy("deep_research_bench/query.jsonl", "deep_research_bench/criteria.jsonl")
    write(root / "deep_research_bench/query.jsonl", "")
    code, _, err = atelier(
        capsys, monkeypatch, "run", str(benchmark_recipe(tmp_path, "drb")), "--out", str(tmp_path / "r")
    )
    assert code == 2
    assert f"{root / 'deep_research_bench/query.jsonl'}: holds no records" in one_error_line(err)
    assert not (tmp_path / "r" / "results.jsonl").exists()


# ------------------------------------------------------------------------------------ run folders


def test_a_truncated_config_json_in_a_resumed_folder_is_named(tmp_path, capsys, monkeypatch, cache_dir):
    recipe, folder = run_folder(tmp_path, capsys, monkeypatch)
    config = folder / "config.json"
    config.write_text(config.read_text()[:57])
    results = (folder / "results.jsonl").read_bytes()
    code, _, err = atelier(capsys, monkeypatch, "run", str(recipe), "--out", str(folder))
    assert code == 2
    line = one_error_line(err)
    assert f"{config}:3: invalid JSON" in line and "damaged" in line  # the line where it was cut
    assert (folder / "results.jsonl").read_bytes() == results  # nothing computed is lost


def test_a_torn_last_ledger_line_is_cut_and_the_run_resumes(tmp_path, capsys, monkeypatch, cache_dir):
    recipe, folder = run_folder(tmp_path, capsys, monkeypatch)
    ledger = folder / "ledger.jsonl"
    entries = ledger.read_text().splitlines()
    ledger.write_text("\n".join(entries) + "\n" + entries[-1][:50])  # the process died writing a line
    results = folder / "results.jsonl"
    kept = results.read_text().splitlines()[:-1]
    results.write_text("\n".join(kept) + "\n")  # ... so its episode was never recorded
    code, _, err = atelier(capsys, monkeypatch, "run", str(recipe), "--no-progress", "--out", str(folder))
    assert code == 0, err
    assert f"note: {ledger}:{len(entries) + 1}: dropped a torn last line" in err and "Traceback" not in err
    after = [json.loads(line) for line in ledger.read_text().splitlines()]  # every line parses again
    assert len(after) > len(entries)
    assert json.loads((folder / "summary.json").read_text())["ledger"]["calls"] == len(after)


def test_out_naming_a_regular_file_is_refused(tmp_path, capsys, monkeypatch, cache_dir):
    recipe = write(tmp_path / "tiny.toml", TINY)
    target = write(tmp_path / "notes.txt", "my notes")
    code, _, err = atelier(capsys, monkeypatch, "run", str(recipe), "--out", str(target))
    assert code == 2
    assert f"{target} is a file, not a run folder" in one_error_line(err)
    assert target.read_text() == "my notes"


def test_a_result_line_whose_system_is_not_its_key_is_named_by_file_and_line(tmp_path, capsys, monkeypatch, cache_dir):
    recipe, folder = run_folder(tmp_path, capsys, monkeypatch)
    results = folder / "results.jsonl"
    lines = results.read_text().splitlines()
    edited = json.loads(lines[1])
    edited["system"] = "other"  # the summary would look for a system the recipe does not have
    results.write_text("\n".join([lines[0], json.dumps(edited), *lines[2:]]) + "\n")
    for command in (["run", str(recipe), "--no-progress", "--out", str(folder)], ["report", str(folder)]):
        code, _, err = atelier(capsys, monkeypatch, *command)
        assert code == 2, err
        assert f"{results}:2 field 'key': key '{edited['key']}' is not its case, system and epoch" in the_error(err)


@pytest.mark.parametrize("damage", ["truncated", "text", "folder"])
def test_a_damaged_checkpoint_database_is_named_by_trace(tmp_path, capsys, monkeypatch, cache_dir, damage):
    _, folder = run_folder(tmp_path, capsys, monkeypatch)
    checkpoints = folder / "checkpoints.sqlite"
    raw = checkpoints.read_bytes()
    checkpoints.unlink()
    if damage == "truncated":
        checkpoints.write_bytes(raw[: len(raw) // 3])
    elif damage == "text":
        checkpoints.write_text("these are my notes, not a database\n")
    else:
        checkpoints.mkdir()
    code, _, err = atelier(capsys, monkeypatch, "trace", str(folder), "tiny:0", "--all")
    assert code == 2, err
    line = one_error_line(err)
    assert line.startswith(f"error: {checkpoints}: ")
    assert (
        "is a folder, not a checkpoint database" if damage == "folder" else "not a readable checkpoint database"
    ) in line
    if damage == "folder":  # a run resumed in that folder says the same, before any episode
        code, _, err = atelier(
            capsys,
            monkeypatch,
            "run",
            str(tmp_path / "tiny.toml"),
            "--no-progress",
            "--no-preflight",
            "--out",
            str(folder),
        )
        assert code == 2 and f"{checkpoints}: is a folder" in the_error(err)


def test_a_nan_latency_is_refused_where_it_is_read_not_copied_into_a_rescore(tmp_path, capsys, monkeypatch, cache_dir):
    """JSON has no NaN: a rescore copying one wrote `null` and then refused its own results file.
    Every latency written is finite, and a file holding a NaN is refused at once, naming its line."""
    recipe, folder = run_folder(tmp_path, capsys, monkeypatch)
    results = folder / "results.jsonl"
    lines = results.read_text().splitlines()
    assert all(math.isfinite(json.loads(line)["latency_s"]) for line in lines)
    lines[0] = re.sub(r'"latency_s": ?[0-9.e-]+', '"latency_s": NaN', lines[0])  # Python's json reads it
    assert "NaN" in lines[0]
    results.write_text("\n".join(lines) + "\n")
    out = tmp_path / "rescored"
    for command in (
        ["rescore", str(folder), "--judge", "lampqa_aspects", "--no-progress", "--out", str(out)],
        ["run", str(recipe), "--no-progress", "--out", str(folder)],
    ):
        code, _, err = atelier(capsys, monkeypatch, *command)
        assert code == 2, err
        assert f"{results}:1 field 'latency_s': Input should be a finite number" in the_error(err)
    assert not (out / "results.jsonl").exists()


# ------------------------------------------------------------------------------------ bugs


def test_an_unexpected_error_is_one_line_pointing_at_its_traceback(tmp_path, capsys, monkeypatch, cache_dir):
    from atelier.runs.folder import recipe as recipe_module

    def broken(path):
        raise KeyError("a bug in the recipe loader")

    monkeypatch.setattr(recipe_module, "load_recipe", broken)
    code, _, err = atelier(capsys, monkeypatch, "recipe", "check", str(write(tmp_path / "t.toml", TINY)))
    assert code == 1
    line = one_error_line(err)
    assert line.startswith("error: unexpected KeyError: 'a bug in the recipe loader' (a bug; full traceback in ")
    trace = Path(line.rsplit(" in ", 1)[1].rstrip(")"))
    assert trace.parent == cache_dir / "errors"
    text = trace.read_text()
    assert "Traceback (most recent call last)" in text and "def broken" not in text and "in broken" in text
