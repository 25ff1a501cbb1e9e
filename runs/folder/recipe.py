"""Recipes: a TOML file naming benchmark, split, setting, limit, systems, judges, models per role,
concurrency and seed. Parsed into pydantic models; every mistake is reported with the file, the
key path (`systems[1].memory.backend`), the line when it can be found, and the valid choices.

    name = "quickstart"
    seed = 0
    [benchmark]
    name = "sample"
    setting = "context"
    limit = 8
    [models.system]
    model = "scripted"
    [[systems]]
    name = "direct-full"
    pipeline = "direct"
    memory = { backend = "full", budget_tokens = 1500 }
    [[judges]]
    name = "lampqa_aspects"
"""

from __future__ import annotations

import datetime
import re
import tomllib
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol, Union, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
)

from atelier.agents.judges.base import JUDGES, JudgeConfig
from atelier.agents.models.settings import ROLE_FALLBACK, ROLES, ModelSettings
from atelier.benchmarks.case import Case
from atelier.benchmarks.common.degradation import check_kinds
from atelier.benchmarks.common.errors import ConfigError
from atelier.benchmarks.common.json_input import validate_strictly
from atelier.benchmarks.common.named_registry import NamedRegistry, UnknownNameError
from atelier.benchmarks.common.plugins import PluginError, reference_of
from atelier.benchmarks.common.redaction import learn_secrets
from atelier.benchmarks.common.suggest import did_you_mean, fields_at, value_homes
from atelier.benchmarks.controls import ControlKind
from atelier.benchmarks.registry import BENCHMARKS, get_benchmark, load_cases
from atelier.benchmarks.rj_pairs import with_rj_pairs
from atelier.graphs.context import SystemSpec
from atelier.graphs.pipelines import PIPELINES
from atelier.memory.registry import BACKENDS
from atelier.runs.folder.controls import check_controls
from atelier.runs.folder.shipped import find_recipe, is_shipped
from atelier.tools.config import WebConfig

KNOWN_ROLES = tuple(ROLES) + tuple(ROLE_FALLBACK)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BenchmarkSection(_Strict):
    name: str
    split: str | None = None
    setting: str | None = None
    limit: int | None = Field(default=None, gt=0)
    options: dict[str, Any] = Field(default_factory=dict)
    rj_pairs_file: Path | None = Field(
        default=None, description="Response-judgment pairs added to the cases' gold (`atelier simulate feedback`)."
    )

    @field_validator("split", "setting")
    @classmethod
    def _known_to_loader(cls, value: str | None, info: ValidationInfo) -> str | None:
        name = info.data.get("name")
        if value is None or name is None:
            return value
        choices = getattr(get_benchmark(name), f"{info.field_name}s")
        if value not in choices:
            raise ValueError(f"benchmark {name!r} has no {info.field_name} {value!r}; valid: {', '.join(choices)}")
        return value

    @field_validator("options")
    @classmethod
    def _loader_options(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        if info.data.get("name") is not None:
            try:
                validate_strictly(get_benchmark(info.data["name"]).options, value)
            except ValidationError as exc:
                first = exc.errors()[0]
                key = ".".join(str(part) for part in first["loc"])
                raise ValueError(f"{key}: {first['msg']}" if key else first["msg"]) from None
        return value


class RaySection(_Strict):
    """`[run.ray]`: where and how episodes run when `executor = "ray"` (see runs/execution/executors/ray.py)."""

    address: str | None = Field(
        default=None,
        description="The cluster (`host:port` of `ray start --head`, or "
        "'auto'); unset: $RAY_ADDRESS, else a cluster started for this run alone.",
    )
    workers: int | None = Field(
        default=None, gt=0, le=1024, description="Episode workers (actors) across the cluster; unset: one per node."
    )
    cpus_per_worker: float = Field(default=1.0, ge=0, description="CPUs each worker reserves on its node.")
    max_retries: int = Field(
        default=3,
        ge=0,
        le=100,
        description="Times an episode worker is restarted when it or its node dies "
        "(its episodes in flight run again each time).",
    )
    scratch_dir: str | None = Field(
        default=None,
        description="Node-local folder for workers' memory stores and "
        "web records before they reach the driver; unset: the system's temp folder.",
    )


class RunSection(_Strict):
    concurrency: int = Field(default=4, gt=0, le=256, description="Episodes in flight at once.")
    out_dir: str = Field(default="runs/out", description="Run folders are created inside it.")
    executor: Literal["local", "ray"] = Field(
        default="local", description="local: asyncio in this process; ray: episodes on a Ray cluster's nodes."
    )
    ray: RaySection = Field(default_factory=RaySection)
    epochs: int = Field(
        default=1,
        ge=1,
        le=100,
        description="Runs of each (case, system), each with its own seeds (system-side roles' seed and the "
        "run's seed moved by epoch - 1; judges' by (epoch - 1) x 20 unless reuse_judgments) and its own memory; "
        "the summary reports per-case means over epochs and the between-epoch spread. Real models need "
        "temperature > 0 (preflight says so).",
    )
    reuse_judgments: bool = Field(
        default=False,
        description="Judge every epoch with the judges' own seeds, so a response the same as an earlier epoch's "
        "gets that epoch's judgment back (from the response cache) instead of a new one. Off (the default): each "
        "epoch's judgment is an independent sample, and the judge's noise averages over epochs. The variance "
        "decomposition then takes a case's repeated responses once, and `atelier plan` lets only repeats average "
        "the judge's noise.",
    )
    budget_usd: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="Stop starting episodes before spend could pass this "
        "(USD; each episode reserves its forecast high end until it finishes); exit 3 'budget reached', resumable "
        "with a larger budget.",
    )
    tolerate: list[str] = Field(
        default_factory=list,
        description="Degradation kinds this run accepts: still reported, no longer failing "
        "its exit code (benchmarks.common.degradation.KINDS).",
    )
    controls: list[ControlKind] = Field(
        default_factory=list,
        description="Counterfactual controls run beside every system (a system's own `controls` overrides): "
        "swapped (another user's context), no_context (none), shuffled_history (the user's events holding other "
        "users' texts); each judged against the case's own user, giving the personalization effect "
        "(benchmarks/controls.py, docs/personalization.md).",
    )

    @field_validator("tolerate")
    @classmethod
    def _known_kinds(cls, kinds: list[str]) -> list[str]:
        return check_kinds(kinds)


class PaperRow(_Strict):
    """One row of the paper table a recipe reproduces: the paper's numbers for one of its systems,
    set beside ours in the report."""

    row: str = Field(min_length=1, description="The paper's label of the row, e.g. 'OpenAI Deep Research'.")
    system: str = Field(description="Our system that stands for it (a name in [[systems]]).")
    runs_as: str | None = Field(
        default=None,
        description="The system that runs the paper's own system (its API or agent), which a recipe may keep "
        "commented out until a key or a checkout is at hand: when [[systems]] has it, the row sits beside it instead "
        "of `system`.",
    )
    judge: str | None = Field(
        default=None,
        description="The judge whose numbers these are (a name in [[judges]]); none for history-retrieval metrics.",
    )
    values: dict[str, float] = Field(
        min_length=1,
        description="Metric -> the paper's value. `score` is the judge's headline score; a criterion the judge "
        "reports (`GOAL`, `need_alignment`) or a key path into its details (`scaled.tone`), averaged over our cases; "
        "`history.ndcg@10` ranks the recalled history against the gold; `kendall_tau(a,b)` relates two criteria "
        "(see runs.comparisons.versus_paper).",
    )


class ReportSection(_Strict):
    baseline: str | None = Field(
        default=None, description="The system others are compared against (default: the first)."
    )
    reproduces: str | None = Field(default=None, description="The paper table this recipe reproduces, as a citation.")
    note: str = Field(default="", description="How our setting differs from the paper's, shown with its numbers.")
    paper: list[PaperRow] = Field(default_factory=list)


class CacheSection(_Strict):
    enabled: bool = True
    dir: str | None = Field(default=None, description="Default: $ATELIER_CACHE_DIR/llm (~/.cache/atelier/llm).")
    url: str | None = Field(
        default=None,
        pattern=r"^(redis|rediss|unix)://",
        description="A Redis server holding the cache instead of `dir`: one cache for every node of a cluster.",
    )

    @property
    def location(self) -> str | None:
        """Where the response cache lives (a Redis URL or a directory), or None when disabled."""
        if not self.enabled:
            return None
        from atelier.benchmarks.data_files import cache_dir

        return self.url or self.dir or str(cache_dir() / "llm")


class UserSimSection(_Strict):
    """The simulated user in runs (`[user_sim]`; its model is `[models.user_sim]`)."""

    clarify: bool = Field(
        default=False,
        description="Answer systems' clarifying questions (deep_research's clarify interrupt) with the simulated user; "
        "off: systems skip the step and record it as skipped.",
    )


class Recipe(_Strict):
    """The validated recipe (see module docstring). Systems hold their memory config as a dict
    already validated against the backend's typed config."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    seed: int = 0
    benchmark: BenchmarkSection
    models: dict[str, ModelSettings] = Field(default_factory=dict)
    systems: list[SystemSpec] = Field(min_length=1)
    judges: list[dict[str, Any]] = Field(default_factory=list)
    run: RunSection = Field(default_factory=RunSection)
    cache: CacheSection = Field(default_factory=CacheSection)
    report: ReportSection = Field(
        default_factory=ReportSection, description="The [report] table: baseline, paper numbers."
    )
    user_sim: UserSimSection = Field(default_factory=UserSimSection, description="The [user_sim] table.")
    web: WebConfig = Field(default_factory=WebConfig, description="The [web] table: provider, cache mode, caps.")
    source: str | None = Field(default=None, description="The file it was read from.")

    def cases(self, *, limited: bool = True) -> list[Case]:
        """The benchmark's cases for this recipe (split, setting, options, seed; its limit unless
        `limited` is false), with the R-J pairs of `rj_pairs_file` added to their gold."""
        b = self.benchmark
        self.check_data_paths()
        cases = load_cases(b.name, b.split, b.setting, b.limit if limited else None, b.options, seed=self.seed)
        return with_rj_pairs(cases, b.rj_pairs_file) if b.rj_pairs_file is not None else cases

    def check_data_paths(self) -> None:
        """Every data path the recipe names exists (read relative to the recipe's folder): else one
        line naming the recipe file, the line and key, and where that data comes from."""
        for loc, value in data_paths(self.benchmark.model_dump(mode="python")):
            path = Path(value)
            directory = str(loc[-1]).endswith("_dir")
            if path.is_dir() if directory else path.is_file():
                continue
            key = ".".join(str(part) for part in ("benchmark", *loc))
            line = _line_of(_source_text(self.source), ("benchmark", *loc), None)
            where = f"{self.source}:{line}" if line else (self.source or "recipe")
            what = "is not a directory" if directory else "is not a file"
            from atelier.benchmarks.data_fetch import where_to_get

            raise ConfigError(
                f"{where}: {key}: {path} {what} ({_RELATIVE_TO[is_shipped(self.source or '')]}); "
                f"{where_to_get(self.benchmark.name, str(loc[-1]) if loc[0] == 'options' else None)}"
            )

    def role_models(self) -> dict[str, ModelSettings]:
        roles = {role: ModelSettings() for role in ROLES}
        roles.update(self.models)
        return roles

    def roles_used(self) -> dict[str, list[str]]:
        """The roles this run calls, each with the settings it would fall back to, in order: a role
        of its own, then `system` (systems' roles), `judge` (judges' roles) or `user_sim`."""
        used: dict[str, list[str]] = {"system": ["system"]}
        for judge in self.judges:
            for role in JUDGES.get(str(judge.get("name"))).roles:
                used[role] = [role, "judge"] if role != "judge" else ["judge"]
        if self.user_sim.clarify or any(s.conversation is not None for s in self.systems):
            used["user_sim"] = ["user_sim"]
        return used

    def check_roles_named(self) -> None:
        """No role is silently answered by the offline `scripted` model: when any role names a real
        model, every role the run uses must be set — `scripted` included, when that is meant."""
        explicit = {**self.models}
        real = [f"models.{role} = {s.model!r}" for role, s in explicit.items() if not s.is_scripted]
        real += [
            f"systems[{i}].models.{role} = {m.model!r}"
            for i, system in enumerate(self.systems)
            for role, m in system.models.items()
            if not m.is_scripted
        ]
        if not real:
            return
        unset = []
        for role, chain in self.roles_used().items():
            if role == "system":  # each system may name its own
                if "system" not in explicit and not all("system" in s.models for s in self.systems):
                    unset.append("system")
            elif not any(name in explicit for name in chain):
                unset.append(chain[-1])
        unset = list(dict.fromkeys(unset))
        if unset:
            raise ConfigError(
                f"{self.source or 'recipe'}: {', '.join(f'[models.{r}]' for r in unset)} not set, so "
                f"{'those roles' if len(unset) > 1 else 'the ' + unset[0] + ' role'} would be answered by the offline "
                f"`scripted` model while {real[0]}; set {'them' if len(unset) > 1 else 'it'} "
                '(model = "scripted" to mean it), or give --model for every role'
            )

    def with_overrides(
        self,
        *,
        model: str | None = None,
        api_base: str | None = None,
        api_key: str | None = None,
        limit: int | None = None,
        out_dir: str | None = None,
        concurrency: int | None = None,
        seed: int | None = None,
        systems: list[str] | None = None,
        executor: str | None = None,
        ray_address: str | None = None,
        epochs: int | None = None,
        budget_usd: float | None = None,
        cache: bool | None = None,
    ) -> Recipe:
        """Command-line overrides: `model`/`api_base`/`api_key` apply to every role and system;
        `systems` keeps only the named systems (in the recipe's order)."""
        update: dict[str, Any] = {
            k: v for k, v in (("model", model), ("api_base", api_base), ("api_key", api_key)) if v
        }
        try:
            ModelSettings.model_validate(update)
        except ValidationError as exc:
            first = exc.errors()[0]
            flag = "--" + str(first["loc"][0]).replace("_", "-")
            raise ConfigError(f"{flag}: {first['msg'].removeprefix('Value error, ')}") from None
        data = self.model_dump(mode="python")
        if update:
            data["models"] = {
                role: {**s.model_dump(exclude_unset=True), **update} for role, s in self.role_models().items()
            }
            for system in data["systems"]:
                system["models"] = {role: {**s, **update} for role, s in system["models"].items()}
        if limit is not None:
            data["benchmark"]["limit"] = limit
        if out_dir is not None:
            data["run"]["out_dir"] = out_dir
        if concurrency is not None:
            data["run"]["concurrency"] = concurrency
        if seed is not None:
            data["seed"] = seed
        if systems:
            known = [s["name"] for s in data["systems"]]
            unknown = [name for name in systems if name not in known]
            if unknown:
                raise ConfigError(
                    f"--systems: no system {', '.join(map(repr, unknown))} in recipe {self.name!r}; "
                    f"valid: {', '.join(known)}"
                )
            data["systems"] = [s for s in data["systems"] if s["name"] in systems]
        if executor is not None:
            data["run"]["executor"] = executor
        if ray_address is not None:
            data["run"]["ray"]["address"] = ray_address
        if epochs is not None:
            data["run"]["epochs"] = epochs
        if budget_usd is not None:
            data["run"]["budget_usd"] = budget_usd
        if cache is not None:
            data["cache"]["enabled"] = cache
        try:
            return Recipe.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(_format_errors(exc, "command line", None, Recipe)) from None


# ----------------------------------------------------------------------------- registry-typed parts


def _registered() -> tuple[tuple[str, ...], ...]:
    """What the registries hold now (the plugins a recipe names are loaded before it is checked)."""
    return tuple(tuple(r.known()) for r in (BACKENDS, JUDGES, PIPELINES, BENCHMARKS))


def _validator_model() -> type[BaseModel]:
    return _validator_model_for(_registered())


@lru_cache(maxsize=8)
def _validator_model_for(registered: tuple[tuple[str, ...], ...]) -> type[BaseModel]:
    """A mirror of `Recipe` whose registry-typed tables are discriminated unions over what is
    registered (`registered`: the names, which key the cache), so pydantic itself reports unknown
    names with the valid choices."""
    memory_configs = tuple(BACKENDS.get(n).config_model for n in BACKENDS.known())
    judge_configs = tuple(JUDGES.get(n).config_model for n in JUDGES.known())
    # types built at runtime from the registries: no static type to give them
    MemoryUnion: Any = Annotated[Union[memory_configs], Field(discriminator="backend")]  # noqa: UP007 (`|` cannot unpack a tuple)
    JudgeUnion: Any = Annotated[Union[judge_configs], Field(discriminator="name")]  # noqa: UP007
    Pipeline: Any = Literal[tuple(PIPELINES.known())]
    Benchmark: Any = Literal[tuple(BENCHMARKS.known())]
    Role: Any = Literal[KNOWN_ROLES]

    def typed_pipeline_options(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        pipeline = info.data.get("pipeline")
        if pipeline is None:  # the pipeline name itself is wrong: reported on its own
            return value
        return PIPELINES.get(pipeline).options.model_validate(value).model_dump()

    system = create_model(
        "SystemCheck",
        __base__=SystemSpec,
        __validators__={"_typed_pipeline_options": field_validator("pipeline_options")(typed_pipeline_options)},
        pipeline=(Pipeline, "direct"),
        pipeline_options=(dict[str, Any], Field(default_factory=dict, validate_default=True)),  # defaults resolved
        memory=(MemoryUnion, ...),
        models=(dict[Role, ModelSettings], {}),
    )
    benchmark = create_model("BenchmarkCheck", __base__=BenchmarkSection, name=(Benchmark, ...))
    return create_model(
        "RecipeCheck",
        __base__=Recipe,
        benchmark=(benchmark, ...),
        models=(dict[Role, ModelSettings], {}),
        systems=(list[system], Field(min_length=1)),
        judges=(list[JudgeUnion], []),
    )


class _CheckedSystem(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def memory(self) -> BaseModel: ...  # the backend's config model


class _CheckedRecipe(Protocol):
    """What `parse_recipe` reads of a `_validator_model()` instance: a `Recipe` whose systems' memory
    tables and judges are the registered config models (dicts in `Recipe`)."""

    @property
    def systems(self) -> Sequence[_CheckedSystem]: ...
    @property
    def judges(self) -> Sequence[JudgeConfig]: ...
    @property
    def report(self) -> ReportSection: ...
    def model_dump(self, *, mode: str) -> dict[str, Any]: ...


def parse_recipe(data: dict[str, Any], source: str = "<recipe>", text: str | None = None) -> Recipe:
    """Validate recipe data strictly, as TOML spells it (`concurrency = true` is not a number). The
    command's redactor learns the recipe's keys first: no message about it may show one."""
    learn_secrets(data)
    _check_values(data, source)
    data = cases_file_as_benchmark(data, source, text)
    load_plugins(data, source, text)
    try:
        # its output is what `_CheckedRecipe` describes
        checked = cast(_CheckedRecipe, validate_strictly(_validator_model(), data))
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, source, text, _validator_model())) from None
    except ConfigError as exc:  # raised as is by validators that know their own field ([web])
        raise ConfigError(f"invalid recipe: {source}: {exc}") from None
    names = [s.name for s in checked.systems]
    folded = Counter(n.casefold() for n in names)  # a folder each: `A` and `a` are one on many file systems
    duplicates = sorted({n for n in names if folded[n.casefold()] > 1})
    if duplicates:
        raise ConfigError(
            f"{source}: systems: names must be unique (ignoring case); repeated: {', '.join(map(repr, duplicates))}"
        )
    _check_report(checked.report, names, [j.name for j in checked.judges], source)
    resolved = checked.model_dump(mode="python")
    for row in resolved["report"]["paper"]:  # beside the paper's own system, when this run has it
        if row.get("runs_as") in names:
            row["system"] = row["runs_as"]
    for system, checked_system in zip(resolved["systems"], checked.systems):
        system["memory"] = checked_system.memory.model_dump()
    resolved["judges"] = [j.model_dump() for j in checked.judges]
    resolved["source"] = source
    recipe = Recipe.model_validate(resolved)
    check_controls(recipe.systems, recipe.run.controls, recipe.benchmark.setting, source)
    return recipe


# Where a recipe names something a registry holds: (key path pattern, registry); "*" is each item.
PLUGIN_PLACES: tuple[tuple[tuple[str, ...], NamedRegistry[Any]], ...] = (
    (("systems", "*", "pipeline"), PIPELINES),
    (("systems", "*", "memory", "backend"), BACKENDS),
    (("judges", "*", "name"), JUDGES),
    (("benchmark", "name"), BENCHMARKS),
)


def _named_at(
    data: Any, pattern: tuple[str, ...], loc: tuple[Any, ...] = (), strings_only: bool = True
) -> list[tuple[tuple[Any, ...], Any]]:
    """The string values (any values, unless `strings_only`) at `pattern` in recipe data, with their
    key paths."""
    if not pattern:
        return [(loc, data)] if isinstance(data, str) or not strings_only else []
    head, rest = pattern[0], pattern[1:]
    if head == "*":
        items = list(enumerate(data)) if isinstance(data, list) else []
        return [found for i, item in items for found in _named_at(item, rest, loc + (i,), strings_only)]
    if isinstance(data, dict) and head in data:
        return _named_at(data[head], rest, loc + (head,), strings_only)
    return []


def _invalid(problems: list[str]) -> ConfigError:
    """One error for a recipe's problems: on one line, or one line each under a count."""
    if len(problems) == 1:
        return ConfigError(f"invalid recipe: {problems[0]}")
    return ConfigError(f"invalid recipe ({len(problems)} problems)\n  " + "\n  ".join(problems))


def named_plugin_objects(data: dict[str, Any], source: str = "<dict>") -> dict[str, Any]:
    """Recipe data from Python with the objects it holds where a recipe names a plugin (a memory
    backend or judge class, a pipeline's graph factory or compiled graph, a benchmark's loader or
    BenchmarkSpec) replaced by their import paths (`module:attr`), as a TOML recipe names them and
    config.json records them. An object with no import path is refused naming its key. The
    caller's data is not changed."""

    def copied(value: Any) -> Any:  # the tables and lists anew, the leaves as they are
        if isinstance(value, dict):
            return {key: copied(item) for key, item in value.items()}
        return [copied(item) for item in value] if isinstance(value, list) else value

    out = copied(data)
    problems = []
    for pattern, _ in PLUGIN_PLACES:
        for loc, value in _named_at(out, pattern, strings_only=False):
            if isinstance(value, str):
                continue
            try:
                reference = reference_of(value)
            except PluginError as exc:
                problems.append(f"{source}: {_key_path(loc)}: {exc}")
                continue
            table = out
            for part in loc[:-1]:
                table = table[part]
            table[loc[-1]] = reference
    if problems:
        raise _invalid(problems)
    return out


def load_plugins(data: dict[str, Any], source: str, text: str | None) -> None:
    """Load every plugin the recipe names (`module:attr` or an entry-point name) into its registry,
    before validation checks its options like a built-in's. One that cannot be loaded is a
    ConfigError naming the recipe line, the key and the module."""
    problems = []
    for pattern, registry in PLUGIN_PLACES:
        for loc, name in _named_at(data, pattern):
            try:
                registry.get(name)
            except UnknownNameError:
                continue  # validation reports it, with the valid choices
            except PluginError as exc:
                line = _line_of(text, loc, name)
                problems.append(f"{source}:{line}" if line else source)
                problems[-1] += f": {_key_path(loc)}: {exc}"
    if problems:
        raise _invalid(problems)


def plugins_used(recipe: Recipe) -> list[dict[str, Any]]:
    """The plugins a recipe names, for its run's config: kind, name, what it loads, and the
    distribution (with its version) an entry point came from."""
    from importlib.metadata import PackageNotFoundError, version

    data = recipe.model_dump(mode="python")
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for pattern, registry in PLUGIN_PLACES:
        for _, name in _named_at(data, pattern):
            origin = registry.origin(name)
            if origin is None or (registry.kind, name) in out:
                continue
            entry: dict[str, Any] = {"kind": registry.kind, "name": name, "target": origin.target}
            if origin.distribution:
                try:
                    entry["distribution"] = f"{origin.distribution} {version(origin.distribution)}"
                except PackageNotFoundError:
                    entry["distribution"] = origin.distribution
            out[(registry.kind, name)] = entry
    return list(out.values())


CASES_FILE_BENCHMARK = "jsonl"  # benchmarks/loaders/cases_file.py


def cases_file_as_benchmark(data: dict[str, Any], source: str, text: str | None = None) -> dict[str, Any]:
    """`[benchmark] path = "cases.jsonl"`: a JSON Lines file of cases, i.e. the `jsonl` benchmark with
    `options.path`."""
    benchmark = data.get("benchmark")
    if not isinstance(benchmark, dict) or "path" not in benchmark:
        return data
    benchmark = dict(benchmark)
    path = benchmark.pop("path")
    options = benchmark.get("options")
    line = _line_of(text, ("benchmark", "path"), None)
    where = f"{source}:{line}" if line else source
    if benchmark.get("name", CASES_FILE_BENCHMARK) != CASES_FILE_BENCHMARK:
        raise ConfigError(
            f"invalid recipe: {where}: benchmark.path: a file of cases is read by itself, so give either "
            f"`name` ({benchmark['name']!r}) or `path`, not both"
        )
    if isinstance(options, dict) and "path" in options:
        raise ConfigError(f"invalid recipe: {where}: benchmark.path: also given as benchmark.options.path; give one")
    benchmark["name"] = CASES_FILE_BENCHMARK
    benchmark["options"] = {**(options if isinstance(options, dict) else {}), "path": path}
    return {**data, "benchmark": benchmark}


def _check_report(report: ReportSection, systems: list[str], judges: list[str], source: str) -> None:
    problems = []
    if report.baseline is not None and report.baseline not in systems:
        problems.append(f"report.baseline: no system {report.baseline!r}; valid: {', '.join(systems)}")
    for i, row in enumerate(report.paper):
        if row.system not in systems:
            problems.append(f"report.paper[{i}].system: no system {row.system!r}; valid: {', '.join(systems)}")
        only_history = all(metric.startswith("history.") for metric in row.values)
        if (row.judge is None and not only_history) or (row.judge is not None and row.judge not in judges):
            problems.append(
                f"report.paper[{i}].judge: no judge {row.judge!r} in [[judges]]; valid: {', '.join(judges) or 'none'}"
            )
    if problems:
        raise ConfigError(f"invalid recipe: {source}: " + "; ".join(problems))


MAX_DEPTH = 16  # tables and arrays within each other; a recipe needs a handful


def _check_values(data: dict[str, Any], source: str) -> None:
    """What TOML can hold but no recipe setting is: dates and times, NUL characters, and nesting
    deep enough to trip a parser (the strict validation reads the recipe as JSON)."""
    pending: list[tuple[tuple[Any, ...], Any]] = [((), data)]
    while pending:
        loc, value = pending.pop()
        if len(loc) > MAX_DEPTH:
            raise ConfigError(
                f"invalid recipe: {source}: {_key_path(loc[:MAX_DEPTH])}: nested more than {MAX_DEPTH} levels deep"
            )
        if isinstance(value, dict):
            pending.extend((loc + (key,), item) for key, item in value.items())
        elif isinstance(value, list):
            pending.extend((loc + (i,), item) for i, item in enumerate(value))
        elif isinstance(value, str) and "\x00" in value:
            raise ConfigError(f"invalid recipe: {source}: {_key_path(loc)}: a NUL character is not valid in a value")
        elif isinstance(value, (datetime.date, datetime.time)):
            raise ConfigError(
                f"invalid recipe: {source}: {_key_path(loc)}: a TOML date or time is not a valid value "
                "here (quote it if it is meant as text)"
            )
        elif not isinstance(value, (str, int, float, bool, Path, SecretStr)) and value is not None:
            raise ConfigError(
                f"invalid recipe: {source}: {_key_path(loc)}: {_described(value)} is not a recipe value (strings, "
                "numbers, booleans, lists and tables); an object goes only where a recipe names a plugin "
                "(pipeline, memory.backend, judges[].name, benchmark.name), and only in a dict given to atelier.run"
            )


def _described(value: Any) -> str:
    kind = "class" if isinstance(value, type) else type(value).__name__
    return f"a {kind} {getattr(value, '__qualname__', '')}".rstrip()


def _path_options(benchmark: str) -> set[str]:
    """The loader options of `benchmark` that name a file or folder (typed `Path`)."""
    try:
        options = get_benchmark(benchmark).options
    except UnknownNameError:  # its validation says so
        return set()
    return {name for name, field in options.model_fields.items() if "Path" in str(field.annotation)}


def data_paths(benchmark: dict[str, Any]) -> list[tuple[tuple[str, ...], str]]:
    """The data paths a `[benchmark]` table names: (key path within it, value)."""
    out: list[tuple[tuple[str, ...], str]] = []
    options = benchmark.get("options")
    if isinstance(options, dict) and isinstance(benchmark.get("name"), str):
        for key in sorted(_path_options(benchmark["name"])):
            if isinstance(options.get(key), (str, Path)):
                out.append((("options", key), str(options[key])))
    if isinstance(benchmark.get("rj_pairs_file"), (str, Path)):
        out.append((("rj_pairs_file",), str(benchmark["rj_pairs_file"])))
    return out


_RELATIVE_TO = {
    False: "a relative path is read from the recipe's folder",
    True: "a shipped recipe reads a relative path from the current directory",
}


def resolve_data_paths(data: dict[str, Any], folder: Path) -> dict[str, Any]:
    """Recipe data with its data paths (`[benchmark]` path options, `rj_pairs_file`) made absolute:
    a relative one is read from `folder` (the recipe's), `~` is the user's home."""
    benchmark = data.get("benchmark")
    if not isinstance(benchmark, dict):
        return data
    benchmark = (
        {**benchmark, "options": dict(benchmark.get("options") or {})} if "options" in benchmark else dict(benchmark)
    )
    for loc, value in data_paths(benchmark):
        path = Path(value).expanduser()
        resolved = str(path if path.is_absolute() else (folder / path).resolve())
        if loc[0] == "options":
            benchmark["options"][loc[1]] = resolved
        else:
            benchmark[loc[0]] = resolved
    return {**data, "benchmark": benchmark}


def _source_text(source: str | None) -> str | None:
    """The text of the recipe file a recipe was read from, for error lines (None if unreadable)."""
    if not source or source.startswith("<"):
        return None
    try:
        return Path(source).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def load_recipe(ref: str | Path) -> Recipe:
    """A recipe from a TOML file, or the shipped recipe of that name (`quickstart`): `find_recipe`'s
    rule. Relative data paths are read from the recipe file's folder, and a shipped recipe's from
    the current directory (as a copy of it there would read them)."""
    path, shipped = find_recipe(ref)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read recipe {path}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{path}:{line}: not valid UTF-8 (byte {exc.start}); save the recipe as UTF-8") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid TOML: arrays or tables nested too deeply to parse") from None
    data = cases_file_as_benchmark(data, str(path), text)
    folder = Path.cwd() if shipped else path.resolve().parent
    return parse_recipe(resolve_data_paths(data, folder), source=str(path), text=text)


# ----------------------------------------------------------------------------- error messages


def _key_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]")


def _table_paths(lines: list[str]) -> list[tuple[Any, ...]]:
    """The table each line belongs to, as a key path with array indices, e.g. for the lines under
    the second `[[systems]]`'s `[systems.models.system]`: ("systems", 1, "models", "system")."""
    counts: dict[tuple[Any, ...], int] = {}
    current: tuple[Any, ...] = ()
    paths = []
    for line in lines:
        header = _HEADER.match(line)
        if header:
            current = ()
            for part in (p.strip().strip('"') for p in header.group(2).split(".")):
                current += (part,)
                if current in counts:  # an array of tables: its latest element
                    current += (counts[current] - 1,)
            if header.group(1) == "[[":
                array = current[:-1] if current[:-1] in counts else current
                counts[array] = counts.get(array, 0) + 1
                current = array + (counts[array] - 1,)
        paths.append(current)
    return paths


def _line_of(text: str | None, loc: tuple[Any, ...], value: Any) -> int | None:
    """The line that sets the key at `loc` (to `value`, when given), when it can be told apart:
    looked for within the key's own table first, then in the whole file."""
    keys = [part for part in loc if isinstance(part, str)]
    if text is None or not keys:
        return None
    rendered = str(value).lower() if isinstance(value, bool) else str(value) if value is not None else None
    shown = rf"\s*\"?{re.escape(rendered)}\"?\s*($|[,}}#])" if rendered is not None else ""
    pattern = re.compile(rf"(^|[\s{{,]){re.escape(keys[-1])}\s*={shown}")
    lines = text.splitlines()
    paths = _table_paths(lines)
    tables = [loc[:n] for n in range(len(loc) - 1, -1, -1) if loc[:n] in set(paths)]
    for table in tables[:1] + [None]:  # the innermost table that has lines, then anywhere
        hits = [
            i
            for i, line in enumerate(lines, start=1)
            if (table is None or paths[i - 1] == table) and pattern.search(line)
        ]
        if len(hits) == 1:
            return hits[0]
    return None


def _instead(homes: list[str]) -> str:
    """`did you mean retrieval with method = 'bm25'?`: where a value given as a name is an option."""
    return f"did you mean {' or '.join(homes)}?" if homes else ""


def _format_errors(exc: ValidationError, source: str, text: str | None, model: type[BaseModel] | None = None) -> str:
    """One line per problem: the recipe file and line, the key path, what is wrong, and the closest
    valid name or key (`did you mean 'concurrency'?`)."""
    lines = []
    for err in exc.errors():
        loc = list(err["loc"])
        hint = ""
        message = err["msg"]
        value = err.get("input")
        ctx = err.get("ctx") or {}
        if err["type"] == "union_tag_invalid":
            key = ctx.get("discriminator", "").strip("'")
            loc.append(key)
            kind = "memory backend" if key == "backend" else "judge"
            tags = sorted(t.strip("'") for t in str(ctx.get("expected_tags", "")).split(", "))
            message = f"unknown {kind} {ctx.get('tag')!r}; valid: {', '.join(tags)}"
            value = ctx.get("tag")
            registry = BACKENDS if key == "backend" else JUDGES
            configs = {name: registry.get(name).config_model for name in registry.known()}
            hint = did_you_mean(str(value), tags) or _instead(value_homes(value, configs))
        elif err["type"] == "union_tag_not_found":
            key = ctx.get("discriminator", "").strip("'")
            loc.append(key)
            message = f"missing '{key}'"
        else:
            # a discriminated union puts the tag in the path (memory.full.budget); drop it
            loc = [
                p
                for i, p in enumerate(loc)
                if not (i > 0 and loc[i - 1] in ("memory",) and isinstance(p, str) and p in BACKENDS.known())
            ]
            if len(loc) >= 3 and loc[0] == "judges" and isinstance(loc[1], int) and loc[2] in JUDGES.known():
                loc.pop(2)
            if loc and loc[-1] == "[key]":
                loc.pop()
                message = "unknown role; " + message.replace("Input should be", "must be one of:")
                hint = did_you_mean(str(value), re.findall(r"'([^']*)'", str(ctx.get("expected", ""))))
            elif err["type"] == "literal_error":
                message = message.replace("Input should be", "must be one of:")
                hint = did_you_mean(str(value), re.findall(r"'([^']*)'", str(ctx.get("expected", ""))))
            elif err["type"] == "extra_forbidden":
                message = "unknown key (not allowed here)"
                hint = did_you_mean(str(err["loc"][-1]), fields_at(model, err["loc"][:-1])) if model else ""
            elif err["type"] == "value_error":
                message = message.removeprefix("Value error, ")
        line = _line_of(text, tuple(loc), value if isinstance(value, (str, int, float)) else None)
        where = f"{source}:{line}" if line else source
        lines.append(f"{where}: {_key_path(tuple(loc))}: {message}" + (f"; {hint}" if hint else ""))
    head = "invalid recipe" if len(lines) == 1 else f"invalid recipe ({len(lines)} problems)"
    return head + "\n  " + "\n  ".join(lines) if len(lines) > 1 else f"{head}: {lines[0]}"
