"""PDR-Bench Table 1's recipe, row by row: each of the paper's own systems is a commented block in
runs/recipes/papers/pdr_table1_systems.toml that needs nothing but its key or its code. Uncommented
alone (its key set, its checkout in third_party/), each passes `atelier recipe check`; a
deep-research API on the sandbox web is warned about, and not on the online web the recipe names."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from atelier.runs.cli import main

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "runs" / "recipes" / "papers" / "pdr_table1_systems.toml"
KEYS = ("OPENAI_API_KEY", "PERPLEXITYAI_API_KEY", "GEMINI_API_KEY", "ANTHROPIC_API_KEY", "SERPER_API_KEY")


def commented_systems(text: str) -> dict[str, str]:
    """Each commented `# [[systems]]` block, by its name: the lines of the block, uncommented."""
    blocks: dict[str, str] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() != "# [[systems]]":
            continue
        block = []
        for following in lines[i:]:
            if not following.startswith("# ") or (block and following.strip() in ("#", "# [[systems]]")):
                break
            block.append(following[2:])
        name = re.search(r'^name = "([^"]+)"', "\n".join(block), re.MULTILINE)
        assert name, block
        blocks[name.group(1)] = "\n".join(block)
    return blocks


def with_system(text: str, block: str) -> str:
    """The recipe with `block` as a live system after the shipped ones (before [[judges]])."""
    return text.replace("[[judges]]", f"{block}\n\n[[judges]]", 1)


def online(text: str) -> str:
    """The recipe on the online web it documents instead of the sandbox."""
    text = text.replace('[web.sandbox]\ncorpus = "wiki"\n', "")
    return re.sub(r"^# (\[web\]|provider = \"serper\"|reader = \"direct\"|mode = \"record\")$", r"\1", text, flags=re.M)


def check(capsys, monkeypatch, path: Path) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["atelier", "recipe", "check", str(path)])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main()
    captured = capsys.readouterr()
    return exited.value.code or 0, captured.out, captured.err


@pytest.fixture
def keys_and_checkouts(tmp_path, monkeypatch):
    """Every row's key set, and an agent checkout in third_party/ (its interpreter this one)."""
    for key in KEYS:
        monkeypatch.setenv(key, "sk-test")
    for agent in ("OAgents", "MiroFlow"):
        interpreter = tmp_path / "third_party" / agent / ".venv" / "bin" / "python"
        interpreter.parent.mkdir(parents=True)
        interpreter.symlink_to(sys.executable)
    monkeypatch.chdir(tmp_path)  # the recipe's agent paths are relative to where it runs
    return tmp_path


SHIPPED = RECIPE.read_text(encoding="utf-8")
ROWS = commented_systems(SHIPPED)
API_ROWS = {
    "o3_deep_research",
    "perplexity_deep_research",
    "gemini_deep_research",
    "gemini_search",
    "claude_search",
    "sonar_reasoning_pro",
    "gpt41_search",
}


def test_every_paper_row_has_its_system_in_the_recipe():
    runs_as = set(re.findall(r'^runs_as = "([^"]+)"', SHIPPED, re.MULTILINE))
    assert runs_as == set(ROWS) and len(ROWS) == 10  # every row of Table 1: its own system
    assert API_ROWS < set(ROWS)


@pytest.mark.parametrize("name", sorted(ROWS))
def test_each_row_uncommented_alone_passes_recipe_check(name, keys_and_checkouts, capsys, monkeypatch):
    recipe = keys_and_checkouts / "row.toml"
    recipe.write_text(with_system(SHIPPED, ROWS[name]), encoding="utf-8")
    code, out, err = check(capsys, monkeypatch, recipe)
    assert code == 0, err
    assert f"{name} [" in out
    warned = f"systems {name!r}" in err and "[web] is the sandbox" in err
    assert warned is (name in API_ROWS), err
    if name in API_ROWS:  # on the online web the recipe documents, no warning
        recipe.write_text(online(with_system(SHIPPED, ROWS[name])), encoding="utf-8")
        code, out, err = check(capsys, monkeypatch, recipe)
        assert code == 0 and "warning" not in err, err


def test_a_row_whose_checkout_is_missing_is_refused_by_recipe_check(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    recipe = tmp_path / "row.toml"
    recipe.write_text(with_system(SHIPPED, ROWS["miroflow"]), encoding="utf-8")
    code, _, err = check(capsys, monkeypatch, recipe)
    assert code != 0 and "third_party/MiroFlow/.venv/bin/python is not an executable file" in err


def test_the_online_web_is_the_one_documented():
    lines = online(SHIPPED).splitlines()
    assert 'provider = "serper"' in lines and "[web]" in lines and "[web.sandbox]" not in lines
    assert os.path.exists(ROOT / "graphs" / "external" / "wrappers" / "oagents.py")
