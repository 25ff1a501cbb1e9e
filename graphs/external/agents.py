"""The external agents this pipeline can run, and how each is started.

Each runs in a child process (`graphs/external/child`, forked by a preloaded agent server:
`graphs.external.launcher`) — its own interpreter, so an agent can live in another virtual
environment (`python` option), and its own environment variables, the only configuration some
agents read. The child's environment is built from nothing: offline switches (`base_env`), the
endpoint's URLs and the session's token (`session_env`), and no key of the user's. The one
address those URLs name (`endpoint_address`) is all an isolated child can reach.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

CHILD = Path(__file__).resolve().parent / "child"
SESSION_URLS = ("OPENAI_BASE_URL", "OPENAI_API_BASE", "SEARX_URL", "HTTP_PROXY", "http_proxy")
ENDPOINT_HOSTS = ("127.0.0.1", "localhost")


@dataclass(frozen=True)
class AgentSpec:
    name: str
    package: str  # the distribution (pip name) that provides it
    module: str | None  # imported in the child; checked before a run when the child uses this interpreter
    call_roles: dict[str, str] = field(default_factory=dict)  # the agent's call names -> model roles
    # the agent's own setting that caps its web searches, and its default (the child runner's):
    # the run's agent web enforces it, whatever the agent's tools do
    searches_setting: tuple[str, int] | None = None


AGENTS: dict[str, AgentSpec] = {
    "open_deep_research": AgentSpec(
        "open_deep_research",
        "open-deep-research==0.0.16",
        "open_deep_research",
        {
            "research": "researcher",
            "summarization": "researcher",
            "compression": "researcher",
            "final_report": "writer",
        },
    ),
    "gpt_researcher": AgentSpec(
        "gpt_researcher",
        "gpt-researcher==0.15.1",
        "gpt_researcher",
        {"fast": "researcher", "strategic": "planner", "smart": "writer"},
    ),
    # the OpenAI Agents SDK's research bot (child/run_openai_agents.py); its top-level package is
    # `agents`, which a checkout's own folder of that name shadows: installed is checked by distribution
    "openai_agents": AgentSpec(
        "openai_agents",
        "openai-agents==0.20.0",
        "agents",
        {"planner": "planner", "search": "researcher", "writer": "writer"},
        searches_setting=("max_searches", 5),  # child/run_openai_agents.py's DEFAULTS
    ),
    # any program speaking the command protocol (child/run_command.py); its calls' names are the
    # `model` it asks the endpoint for
    "command": AgentSpec("command", "", None),
}


def check_installed(spec: AgentSpec, python: str | None) -> None:
    """Fail before the agent starts when it cannot: no such interpreter, or (in this one) no agent."""
    from atelier.benchmarks.common.errors import ConfigError

    if python is not None and not os.access(python, os.X_OK):
        raise ConfigError(f"pipeline_options.python: {python} is not an executable interpreter")
    if python is None and spec.module is not None and not _installed(spec):
        raise ConfigError(
            f'external agent {spec.name!r} is not installed: pip install -e ".[agents]" '
            f"(or set pipeline_options.python to an interpreter that has {spec.package})"
        )


def _installed(spec: AgentSpec) -> bool:
    """The agent's distribution is installed in this interpreter, and its module importable."""
    import importlib.metadata

    try:
        importlib.metadata.version(spec.package.split("==", 1)[0])
    except importlib.metadata.PackageNotFoundError:
        return False
    return spec.module is None or importlib.util.find_spec(spec.module) is not None


def check_command(argv: list[str], cwd: str | None) -> None:
    """Fail before the first episode when a command agent's program or working folder is not there."""
    from atelier.benchmarks.common.errors import ConfigError

    if cwd is not None and not os.path.isdir(cwd):
        raise ConfigError(f"pipeline_options.cwd: {cwd} is not a folder")
    program = argv[0]
    if os.sep in program:
        where = program if os.path.isabs(program) else os.path.join(cwd or os.getcwd(), program)
        if not os.access(where, os.X_OK):
            raise ConfigError(f"pipeline_options.command: {program} is not an executable file")
    elif shutil.which(program, path=base_env()["PATH"]) is None:
        raise ConfigError(f"pipeline_options.command: {program} is not on the agents' PATH ({base_env()['PATH']})")


def _tiktoken_cache() -> str | None:
    """litellm ships tiktoken's encodings (cl100k, o200k, p50k); tiktoken would download them."""
    found = importlib.util.find_spec("litellm")
    if found is None or not found.submodule_search_locations:
        return None
    folder = Path(next(iter(found.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"
    return str(folder) if folder.is_dir() else None


def base_env() -> dict[str, str]:
    """The environment an agent's process starts with: offline switches, no key of the user's."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",  # set and dict orders the agents' prompts depend on stay the same run to run
        "PYTHONUNBUFFERED": "1",
        "PYTHONIOENCODING": "utf-8",
        "NO_PROXY": "127.0.0.1,localhost,::1",
        "no_proxy": "127.0.0.1,localhost,::1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "LANGSMITH_TRACING": "false",
        "LANGCHAIN_TRACING_V2": "false",
        "ANONYMIZED_TELEMETRY": "False",
        "DO_NOT_TRACK": "1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    cache = _tiktoken_cache()
    if cache:
        env["TIKTOKEN_CACHE_DIR"] = cache
    if os.environ.get("TMPDIR"):
        env["TMPDIR"] = os.environ["TMPDIR"]
    return env


def session_env(openai_base: str, token: str, web_root: str, proxy: str) -> dict[str, str]:
    """What one agent run is pointed at: the endpoint's model API (the session's token as its key),
    its SearXNG search, and (`proxy`) the endpoint as the HTTP proxy its scraper reads pages through."""
    return {
        "OPENAI_BASE_URL": openai_base,
        "OPENAI_API_BASE": openai_base,
        "OPENAI_API_KEY": token,
        "SEARX_URL": web_root,
        "HTTP_PROXY": proxy,
        "http_proxy": proxy,
    }


def endpoint_address(env: dict[str, str]) -> tuple[str, int]:
    """The endpoint (host, port) a session's URLs all name: what an isolated agent may reach."""
    from atelier.benchmarks.common.errors import AtelierError

    named = {(parts.hostname, parts.port) for key in SESSION_URLS if key in env for parts in [urlsplit(env[key])]}
    if len(named) != 1:
        raise AtelierError(
            f"an agent's session must name one endpoint address in {', '.join(SESSION_URLS)}; "
            f"it names {', '.join(sorted(f'{h}:{p}' for h, p in named)) or 'none'}"
        )
    host, port = named.pop()
    if host not in ENDPOINT_HOSTS or port is None:
        raise AtelierError(f"an agent's endpoint must be on 127.0.0.1 with a port; its session names {host}:{port}")
    return "127.0.0.1", port


def child_command(python: str | None, *args: str) -> list[str]:
    return [python or sys.executable, str(CHILD), *args]
