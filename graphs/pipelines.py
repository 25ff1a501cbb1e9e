"""Pipelines (the systems' graphs) by name, each with a typed options model.

A pipeline module registers a `PipelineSpec`: its graph builder and its options (`pipeline_options`
in a recipe's `[[systems]]`, validated against that model, so a typo is refused with its key path).
Every pipeline graph takes `graphs.inputs.PipelineInput` and returns `PipelineOutput`.

Options shared by several pipelines are base classes here: `PipelineOptions` (every pipeline:
LaMP-QA's random-profile control), `AnswerBudgetOptions` (a cap on the writer's answer) and
`GoldContextOptions` (BESPOKE's gold information with noise, for pipelines that would otherwise
search).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from atelier.benchmarks.common.errors import ConfigError
from atelier.benchmarks.common.named_registry import NamedRegistry
from atelier.benchmarks.common.plugins import PluginKindError, is_reference


class PipelineOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    random_profile: bool = Field(
        default=False,
        description="Answer with another user's context instead of the asker's (LaMP-QA's random-profile "
        "control): the memory backend reads a different user's history, chosen with the seed.",
    )
    seed: int | None = Field(default=None, description="Seed of this system's random choices (default: the run's).")

    def output_tokens(self) -> dict[str, int]:
        """Per role, the most tokens one answer may take (the budget on the text a pipeline writes)."""
        return {}

    def check_available(self) -> None:
        """Raise ConfigError when a system with these options cannot run on this machine (an
        optional extra not installed); called before a run's first episode."""


class AnswerBudgetOptions(PipelineOptions):
    answer_tokens: int | None = Field(default=None, ge=50, le=32_000, description="Most tokens the answer may take.")

    def output_tokens(self) -> dict[str, int]:
        return {"writer": self.answer_tokens} if self.answer_tokens else {}


class GoldContextOptions(PipelineOptions):
    gold_context: bool = Field(
        default=False,
        description="Replace search with the case's gold information (BESPOKE Table 6); cases without any fail.",
    )
    noise_ratio: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="With gold_context: the share of gold items replaced by other cases' gold information (seeded).",
    )

    @model_validator(mode="after")
    def _noise_needs_gold(self) -> GoldContextOptions:
        if self.noise_ratio and not self.gold_context:
            raise ValueError("noise_ratio only applies with gold_context = true")
        return self


@dataclass(frozen=True)
class PipelineSpec:
    name: str
    description: str
    build: Callable[[], Any]  # -> a compiled LangGraph graph (PipelineInput -> PipelineOutput)
    options: type[PipelineOptions] = PipelineOptions
    variant_option: str | None = None  # the option `<name>:<value>` sets (`external:gpt_researcher`: agent)
    bench_figures: Callable[[Any, str], dict[str, Any]] | None = None  # (context, case id) -> more bench figures
    uses_web: bool = True  # searches or fetches pages (a run's preflight then checks the web answers)
    # a one-step pipeline's step: the episode graph runs it as its own node rather than nesting the
    # one-node graph `build` makes (served alone in Studio), which costs each episode ~5 ms of CPU
    step: Callable[..., Any] | None = None
    # roles the pipeline asks only as a model that researches the web itself (`Gateway.grounded`):
    # a run's preflight does not probe a system's own model for them with its text and structured
    # probe, which to a deep-research API is a paid research run that cannot answer a schema
    research_roles: tuple[str, ...] = ()
    # types of its own its graph state holds (pydantic models, dataclasses), which the checkpoint
    # serializer must know to give them back after a resume (graphs/serde.py)
    state_types: tuple[type, ...] = ()


def plugin_pipeline(value: Any, name: str) -> PipelineSpec:
    """A plugin as the pipeline registered as `name` (a researcher's own graph,
    benchmarks/common/plugins.py): a `PipelineSpec` (its name replaced), a graph factory — a
    function called with no argument that returns a compiled LangGraph graph, as `langgraph.json`
    takes one; its `options` attribute, if any, is its options model — or a compiled graph itself.
    The graph takes `PipelineInput` and returns `{"response": SystemResponse}` (graphs/inputs.py)."""
    if isinstance(value, PipelineSpec):
        return replace(value, name=name)
    if _is_compiled_graph(value):
        graph = value
        return PipelineSpec(name, _first_line(value) or f"graph {name}", lambda: graph)
    if inspect.isclass(value) or not callable(value):
        raise PluginKindError(
            "a pipeline is a graph factory (a function of no argument returning a compiled LangGraph graph), a "
            f"compiled graph or a PipelineSpec; this is {_described(value)}"
        )
    try:
        required = [
            p
            for p in inspect.signature(value).parameters.values()
            if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        ]
    except (TypeError, ValueError):  # a callable with no signature to read
        required = []
    if required:
        raise PluginKindError(
            f"a graph factory takes no argument; {_described(value)} requires {', '.join(p.name for p in required)}"
        )
    options = getattr(value, "options", PipelineOptions)
    if not (inspect.isclass(options) and issubclass(options, PipelineOptions)):
        raise PluginKindError(f"{_described(value)}: its `options` must subclass PipelineOptions")
    state_types = tuple(getattr(value, "state_types", ()))
    if not all(inspect.isclass(t) for t in state_types):
        raise PluginKindError(f"{_described(value)}: its `state_types` must be a tuple of classes")
    return PipelineSpec(
        name,
        _first_line(value) or f"graph factory {name}",
        _checked_factory(value, name),
        options,
        uses_web=bool(getattr(value, "uses_web", True)),
        state_types=state_types,
    )


def _checked_factory(factory: Callable[[], Any], name: str) -> Callable[[], Any]:
    """`factory`, whose result must be a compiled graph: anything else is a ConfigError naming it."""

    def build() -> Any:
        graph = factory()
        if not _is_compiled_graph(graph):
            raise ConfigError(
                f"pipeline {name!r}: its factory returned {_described(graph)}, not a compiled LangGraph graph "
                "(call .compile() on the StateGraph)"
            )
        return graph

    build.__doc__ = factory.__doc__
    return build


def _is_compiled_graph(value: Any) -> bool:
    from langgraph.pregel import Pregel

    return isinstance(value, Pregel)


def _first_line(value: Any) -> str:
    """The first line of a function's own docstring ('' for anything else: a graph's is its class's)."""
    doc = inspect.getdoc(value) if inspect.isfunction(value) else None
    return (doc or "").strip().split("\n")[0]


def _described(value: Any) -> str:
    kind = "class" if inspect.isclass(value) else type(value).__name__
    return f"a {kind} {getattr(value, '__qualname__', repr(value)[:60])}"


PIPELINES: NamedRegistry[PipelineSpec] = NamedRegistry(
    "pipeline",
    modules=(
        "atelier.graphs.direct",
        "atelier.graphs.rag",
        "atelier.graphs.planpers",
        "atelier.graphs.deep_research.graph",
        "atelier.graphs.research_api",
        "atelier.graphs.external.graph",
    ),
    adapt=plugin_pipeline,
)


def declared_state_types() -> tuple[type, ...]:
    """The state types the pipelines registered so far declare (a plugin's own, graphs/serde.py)."""
    return tuple(t for spec in PIPELINES.loaded().values() for t in spec.state_types)


def node_name(pipeline: str) -> str:
    """The graph node a pipeline runs as: its name, with `:` (which LangGraph reserves in node names)
    as `.` — a plugin named `mylab.graphs:build` runs as node `mylab.graphs.build`."""
    return pipeline.replace(":", ".")


def register_pipeline(spec: PipelineSpec) -> PipelineSpec:
    return PIPELINES.register(spec.name, spec)


def pipeline_names() -> list[str]:
    return PIPELINES.names()


def pipeline_variant(name: str) -> tuple[str, dict[str, Any]]:
    """`deep_research` -> (deep_research, {}); `external:gpt_researcher` -> (external, {"agent": ...});
    a plugin reference (`mylab.graphs:build`, whose module is no registered pipeline) -> (it, {})."""
    pipeline, _, variant = name.partition(":")
    if not variant or (is_reference(name) and pipeline not in PIPELINES.known()):
        return (name if variant else pipeline), {}
    option = PIPELINES.get(pipeline).variant_option
    if option is None:
        raise ConfigError(f"pipeline {pipeline!r} has no variants ({name!r})")
    return pipeline, {option: variant}


def pipeline_options(pipeline: str, options: dict[str, Any] | PipelineOptions | None) -> PipelineOptions:
    """The typed options of `pipeline`; a bad key or value raises ConfigError naming it."""
    model = PIPELINES.get(pipeline).options
    if isinstance(options, model):
        return options
    try:
        return model.model_validate(options or {})
    except ValidationError as exc:
        problems = "; ".join(
            f"pipeline_options.{'.'.join(str(p) for p in err['loc']) or '(all)'}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(f"pipeline {pipeline!r}: {problems}") from None


def check_systems_available(systems: Sequence[Any]) -> None:
    """Each system's `check_available`, before any episode; the error names the system."""
    for index, system in enumerate(systems):
        try:
            pipeline_options(system.pipeline, system.pipeline_options).check_available()
        except ConfigError as exc:
            raise ConfigError(f"systems[{index}] ({system.name}): {exc}") from None


def sandbox_web_notes(systems: Sequence[Any], roles: dict[str, Any], web: Any) -> list[str]:
    """Why a run's sandbox web cannot serve what its systems cite: a system whose model researches
    the real web itself (a deep-research API: the pipeline's `research_roles`, on a model that is
    neither `scripted` nor local) cites real pages, which the sandbox (its corpus only) cannot
    read, so each is `fetch_failed` and R counts its claims unsupported. `roles`: the recipe's
    models by role; `web`: its `WebConfig`. None when the web is not the sandbox."""
    from atelier.agents.models.settings import settings_for_role

    if not web.uses_sandbox:
        return []
    notes = []
    for system in systems:
        spec = PIPELINES.get(system.pipeline) if system.pipeline in PIPELINES.known() else None
        for role in spec.research_roles if spec is not None else ():
            settings = settings_for_role({**roles, **system.models}, role)
            if not (settings.is_scripted or settings.is_local):
                notes.append(
                    f"systems {system.name!r} ({system.pipeline}, {role} {settings.model}) cites the real web, but "
                    f"[web] is the sandbox (corpus {web.sandbox_settings.corpus!r}), which serves only its corpus: "
                    "every other cited page will be fetch_failed and R will count its claims unsupported; set "
                    '[web] provider = "serper" (or tavily, brave) with reader = "direct" for real citations '
                    "(docs/real-models.md, 'An online web')"
                )
                break
    return notes
