"""The recipes shipped with Atelier (package data under runs/recipes/), named by their path without
`.toml` (`quickstart`, `papers/pdr_table1_systems`), and the commented recipe `atelier recipe new`
starts from."""

from __future__ import annotations

import tomllib
from importlib.resources import files
from pathlib import Path

from atelier.benchmarks.common.errors import ConfigError

TEMPLATE = "recipe_template.toml"  # beside this module
NAME_TOKEN = "__NAME__"


def shipped_dir() -> Path:
    return Path(str(files("atelier.runs") / "recipes"))


def shipped_recipes() -> dict[str, Path]:
    """Every shipped recipe by name, in name order."""
    root = shipped_dir()
    return {path.relative_to(root).with_suffix("").as_posix(): path for path in sorted(root.rglob("*.toml"))}


def describe(path: Path) -> str:
    """A shipped recipe's `description` (its first comment line when it has none)."""
    text = path.read_text(encoding="utf-8")
    try:
        description = tomllib.loads(text).get("description")
    except tomllib.TOMLDecodeError:
        description = None
    if isinstance(description, str) and description.strip():
        return description.strip()
    first = next((line for line in text.splitlines() if line.startswith("#")), "#")
    return first.lstrip("# ").strip()


def recipe_file(ref: str | Path) -> Path:
    """A recipe file: `ref` itself when it is one, else the shipped recipe of that name. A ref that is
    neither is refused, naming the shipped recipes."""
    path, shipped = Path(ref), shipped_recipes()
    if path.exists() or (path.suffix == ".toml" and str(ref) not in shipped):
        return path  # a file the user named; reading it reports what is wrong with it
    if str(ref) in shipped:
        return shipped[str(ref)]
    raise ConfigError(
        f"no recipe file {str(ref)!r} and no shipped recipe of that name; shipped: {', '.join(shipped)} "
        "(`atelier recipe list`), or give a path to a .toml file"
    )


def new_recipe_text(name: str) -> str:
    """The commented recipe `atelier recipe new NAME` writes, named NAME."""
    template = Path(__file__).with_name(TEMPLATE).read_text(encoding="utf-8")
    return template.replace(NAME_TOKEN, name)
