"""`ExternalOptions`: the typed `pipeline_options` of an `external` system."""

from __future__ import annotations

from datetime import date
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from atelier.graphs.external.child.guard import LIMITS
from atelier.graphs.external.interrupt_answers import ResumeAs
from atelier.graphs.external.launcher import Isolation
from atelier.graphs.pipelines import PipelineOptions

AgentName = Literal["open_deep_research", "gpt_researcher", "openai_agents", "command", "langgraph"]
JobVia = Literal["stdin", "file"]
InterruptAnswer = Literal["simulated_user", "fail"]
# the options only one kind of agent reads: named in a recipe for another, they are refused
COMMAND_OPTIONS = ("command", "job_via", "cwd")
LANGGRAPH_OPTIONS = (
    "url",
    "assistant_id",
    "input",
    "context",
    "config",
    "report",
    "citations",
    "interrupts",
    "max_interrupts",
    "resume_as",
)


class JobLimits(BaseModel):
    """What one job of an agent may use inside its boundary (`isolation = "namespaces"`); defaults:
    `guard.LIMITS`."""

    model_config = ConfigDict(extra="forbid")

    processes: int = Field(default=LIMITS["processes"], ge=8, description="Processes and threads of the job at once.")
    memory_mb: int = Field(default=LIMITS["memory_mb"], ge=256, description="Address space of each of its processes.")
    file_mb: int = Field(default=LIMITS["file_mb"], ge=1, description="Size of any file it writes (its log too).")
    tmp_mb: int = Field(default=LIMITS["tmp_mb"], ge=1, description="Size of its own /tmp.")
    shm_mb: int = Field(default=LIMITS["shm_mb"], ge=1, description="Size of its own /dev/shm.")


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

    max_searches: int | None = Field(
        default=None,
        ge=0,
        description="The most web searches the run's web answers the agent per case (past them each is refused, "
        "counted in meta.searches_refused); unset: the agent's own cap where it has one (openai_agents: its "
        "settings' max_searches, default 5), else none.",
    )

    limits: JobLimits = Field(
        default_factory=JobLimits,
        description="What one job may use inside its boundary: processes, memory, file size, /tmp and /dev/shm sizes.",
    )
    max_report_chars: int = Field(
        default=400_000,
        ge=1000,
        description="The longest report the run keeps of the agent; a longer one is cut there (`output_truncated`).",
    )
    isolation: Isolation = Field(
        default="namespaces",
        description="namespaces: the agent's processes run in their own Linux network, PID and mount namespaces and "
        "reach only the run's endpoint (a machine that cannot make them refuses the system); none: no OS boundary, "
        "only an audit hook in the agent's Python that refuses its own lookups and connections off this machine.",
    )

    # agent = "command": any program, the command protocol (graphs/external/child/run_command.py)
    command: list[str] | None = Field(
        default=None,
        min_length=1,
        description='agent = "command": the program and its arguments (argv), run inside the agents\' boundary.',
    )
    job_via: JobVia = Field(default="stdin", description='agent = "command": the job on its stdin, or only in a file.')
    cwd: str | None = Field(default=None, description='agent = "command": its working folder (default: the run\'s).')

    # agent = "langgraph": a LangGraph server's assistant (graphs/external/langgraph_agent.py)
    url: str | None = Field(default=None, description='agent = "langgraph": the LangGraph server\'s URL.')
    assistant_id: str | None = Field(default=None, description='agent = "langgraph": the assistant (or graph) id.')
    input: dict[str, Any] = Field(
        default_factory=lambda: {"messages": [{"role": "user", "content": "{brief}"}]},
        description='agent = "langgraph": the run\'s input; strings name the case with {brief}, {task}, '
        "{user_context}, {case_id}, {benchmark}, and the run's endpoint with {openai_base}, {api_key}, {search_url}, {mcp_url}.",
    )
    context: dict[str, Any] = Field(
        default_factory=dict, description='agent = "langgraph": the run\'s runtime context (same placeholders).'
    )
    config: dict[str, Any] = Field(
        default_factory=dict,
        description='agent = "langgraph": the run\'s config, e.g. {configurable = {...}} (same placeholders).',
    )
    report: str = Field(
        default="final_report",
        description='agent = "langgraph": where the report is in the final state: a dotted path ("final_report", '
        '"response.text", "messages.-1.content").',
    )
    citations: str | None = Field(
        default=None,
        description='agent = "langgraph": where its citations are in the final state (a list of URLs, or of objects with "url").',
    )
    interrupts: InterruptAnswer = Field(
        default="simulated_user",
        description='agent = "langgraph": who answers an interrupt: the simulated user (recorded in the response), '
        "or nobody (the episode fails naming it).",
    )
    max_interrupts: int = Field(default=3, ge=0, le=20, description='agent = "langgraph": interrupts answered at most.')
    resume_as: ResumeAs = Field(
        default="answers",
        description='agent = "langgraph": the protocol the graph\'s interrupts take their answers in: "answers" (a '
        "clarify request's {answers = [...]}, else the text) or \"deerflow\" (DeerFlow's plan review: the user reviews "
        "the thread's current_plan; [ACCEPTED] or [EDIT_PLAN] ...).",
    )

    @model_validator(mode="after")
    def _options_of_the_agent(self) -> ExternalOptions:
        # set to other than its default (a resolved recipe spells out every option: set is not enough)
        fields = type(self).model_fields
        given = [
            n
            for n in (*COMMAND_OPTIONS, *LANGGRAPH_OPTIONS)
            if getattr(self, n) != fields[n].get_default(call_default_factory=True)
        ]
        for agent, names in (("command", COMMAND_OPTIONS), ("langgraph", LANGGRAPH_OPTIONS)):
            stray = [n for n in names if n in given] if self.agent != agent else []
            if stray:
                raise ValueError(
                    f"{', '.join(stray)}: only for agent = {agent!r} (this system's agent is {self.agent!r})"
                )
        from atelier.graphs.external.agents import AGENTS

        setting = AGENTS[self.agent].searches_setting if self.agent in AGENTS else None
        if setting is not None and setting[0] in self.settings:
            value = self.settings[setting[0]]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"settings.{setting[0]}: {value!r} is not a number of searches (an integer >= 0)")
        if self.agent == "command" and not self.command:
            raise ValueError('agent = "command" needs command = ["program", "arg", ...]')
        if self.agent == "langgraph" and not (self.url and self.assistant_id):
            raise ValueError('agent = "langgraph" needs url (the LangGraph server) and assistant_id')
        return self

    def search_cap(self) -> int | None:
        """The web searches the agent's session answers at most (see `max_searches`)."""
        from atelier.graphs.external.agents import AGENTS

        setting = AGENTS[self.agent].searches_setting if self.agent in AGENTS else None
        if self.max_searches is not None or setting is None:
            return self.max_searches
        name, default = setting
        return int(self.settings.get(name, default))

    def check_available(self) -> None:
        from atelier.graphs.external.agents import AGENTS, check_command, check_installed
        from atelier.graphs.external.launcher import require_boundary

        if self.agent == "langgraph":
            return  # a server elsewhere: the episode reaches it, or fails naming why
        if self.agent == "command":
            assert self.command is not None  # checked above
            check_command(self.command, self.cwd)
        else:
            check_installed(AGENTS[self.agent], self.python)
        if self.isolation == "namespaces":
            require_boundary(self.python)
