"""Offline defaults of this project, applied by the project itself rather than the user's shell.

Each is a default: a variable the user already set wins. The entry points apply them before the
libraries they drive are imported — the CLI, the graphs LangGraph Studio loads, a Ray worker, a run
started from Python (`Runner.run`) — importing a module changes nothing.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

_PROJECT_STATE = Path(os.environ.get("ATELIER_STATE_DIR") or Path.home() / ".cache" / "atelier")

DEFAULTS = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # litellm fetches its price map from GitHub otherwise
    "LITELLM_LOG": "ERROR",
    "MEM0_TELEMETRY": "False",
    "MEM0_DIR": str(_PROJECT_STATE / "mem0"),  # mem0 writes ~/.mem0 otherwise
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    "LANGGRAPH_NO_VERSION_CHECK": "true",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "ANONYMIZED_TELEMETRY": "False",  # chromadb
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # transformers' "Loading weights" bar on every model load
}


def apply_offline_defaults() -> None:
    for key, value in DEFAULTS.items():
        os.environ.setdefault(key, value)
    # litellm's acompletion builds the provider coroutine in a worker thread; a call cancelled while
    # that thread runs leaves the coroutine unstarted (no request was sent) and Python warns when it
    # is collected. Harmless, and noise on a command's stderr.
    warnings.filterwarnings("ignore", message=r"coroutine '.*acompletion' was never awaited", category=RuntimeWarning)
