"""The recipes shipped with Atelier (package data under runs/recipes/), named by their path without
`.toml` (`quickstart`, `papers/pdr_table1_systems`), how a recipe named on the command line is found
(`find_recipe`), and the commented recipe `atelier recipe new` starts from.

A shipped recipe reads its relative paths (`contexts_file`, `data_dir`, ...) from the current
directory, as a copy of it there would, and as its run folders go to `runs/out` there; a recipe
file of the user's reads them from its own folder."""

from __future__ import annotations

import tomllib
from importlib.resources import files
from pathlib import Path
from typing import NamedTuple

from atelier.benchmarks.common.errors import ConfigError
from atelier.benchmarks.common.suggest import did_you_mean

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


class RecipeRef(NamedTuple):
    path: Path
    shipped: str | None  # the shipped recipe's name; None for a file the user named


def find_recipe(ref: str | Path) -> RecipeRef:
    """Where a recipe named on the command line (or to `atelier.run`) lies. One rule, wherever the
    command runs:

    - a ref ending in `.toml` is a file path (a relative one from the current directory);
    - any other ref is a shipped recipe's name when one is so named (`quickstart`,
      `papers/pdr_table1_systems`), whatever files or folders stand in the current directory;
    - else a ref with a `/` is a file path;
    - else it is refused, with the closest shipped names.

    A file path that is missing says where it was looked for, and names the shipped recipe it
    matches (`runs/recipes/quickstart.toml` from outside the checkout -> `quickstart`)."""
    text, shipped = str(ref), shipped_recipes()
    if not text.endswith(".toml") and text in shipped:
        return RecipeRef(shipped[text], text)
    path = Path(text).expanduser()
    if text.endswith(".toml") or "/" in text:
        if not path.exists():
            message = f"no recipe file {text} (looked for {path.absolute()})"
            if (name := _shipped_name_in(text, shipped)) is not None:
                message += f"; the shipped recipe {name!r} is named so: `atelier run {name}` runs it from any directory"
            raise ConfigError(message)
        return RecipeRef(path, None)
    hint = did_you_mean(text, shipped)
    raise ConfigError(
        f"no shipped recipe {text!r}" + (f"; {hint}" if hint else "") + f" (shipped: {', '.join(shipped)}; "
        "`atelier recipe list`); a recipe file is named by a path ending in .toml"
    )


def recipe_file(ref: str | Path) -> Path:
    """The file of the recipe `ref` names (`find_recipe`)."""
    return find_recipe(ref).path


def _shipped_name_in(text: str, shipped: dict[str, Path]) -> str | None:
    """The shipped recipe a path names by its tail (`.../recipes/papers/pdr_table1_systems.toml`)."""
    stem = text.removesuffix(".toml")
    names = [name for name in shipped if stem == name or stem.endswith("/" + name)]
    return max(names, key=len) if names else None


def is_shipped(path: str | Path) -> bool:
    """Whether a recipe file is one of the shipped ones (inside the installed package)."""
    try:
        Path(path).resolve().relative_to(shipped_dir().resolve())
    except ValueError:
        return False
    return True


def new_recipe_text(name: str) -> str:
    """The commented recipe `atelier recipe new NAME` writes, named NAME."""
    template = Path(__file__).with_name(TEMPLATE).read_text(encoding="utf-8")
    return template.replace(NAME_TOKEN, name)
