"""`ExternalOptions`: the typed `pipeline_options` of an `external` system."""

from __future__ import annotations

from datetime import date
from typing import Any, Literal

from pydantic import Field

from atelier.graphs.external.launcher import Isolation
from atelier.graphs.pipelines import PipelineOptions

AgentName = Literal["open_deep_research", "gpt_researcher"]


class ExternalOptions(PipelineOptions):
    """Which external agent runs, how long it may take, and its own settings.

    In a recipe: `pipeline = "external"`, `pipeline_options = { agent = "gpt_researcher" }`.
    """

    agent: AgentName = Field(default="open_deep_research", description="The external agent that runs.")
    python: str | None = Field(
        default=None,
        description="The interpreter of an environment with the agent installed; unset: this one (the `agents` extra).",
    )
    today: date | None = Field(
        default=None,
        description="The date the agent lives on (its prompts carry it); set it for runs that replay exactly on any day.",
    )
    timeout_s: float = Field(default=1800.0, gt=0, description="The agent's whole run on one case.")
    call_roles: dict[str, str] = Field(
        default_factory=dict,
        description="The agent's call name -> model role (e.g. final_report = 'writer'); adds to the agent's defaults.",
    )
    max_results: int = Field(default=5, ge=1, le=20, description="Search results per query the agent is given.")
    page_chars: int = Field(default=2000, ge=200, description="Characters of each page's text put in a search answer.")
    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="The agent's own configuration keys (open_deep_research: Configuration fields; "
        "gpt_researcher: config keys such as MAX_ITERATIONS), over the adapter's defaults.",
    )

    isolation: Isolation = Field(
        default="namespaces",
        description="namespaces: the agent's processes run in their own Linux network, PID and mount namespaces and "
        "reach only the run's endpoint (a machine that cannot make them refuses the system); none: no OS boundary, "
        "only an audit hook in the agent's Python that refuses its own lookups and connections off this machine.",
    )

    def check_available(self) -> None:
        from atelier.graphs.external.agents import AGENTS, check_installed
        from atelier.graphs.external.launcher import require_boundary

        check_installed(AGENTS[self.agent], self.python)
        if self.isolation == "namespaces":
            require_boundary(self.python)
