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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from atelier.benchmarks.common.errors import ConfigError
from atelier.benchmarks.common.named_registry import NamedRegistry


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
)


def register_pipeline(spec: PipelineSpec) -> PipelineSpec:
    return PIPELINES.register(spec.name, spec)


def pipeline_names() -> list[str]:
    return PIPELINES.names()


def pipeline_variant(name: str) -> tuple[str, dict[str, Any]]:
    """`deep_research` -> (deep_research, {}); `external:gpt_researcher` -> (external, {"agent": ...})."""
    pipeline, _, variant = name.partition(":")
    if not variant:
        return pipeline, {}
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
