"""Offline defaults of this project, applied by the project itself rather than the user's shell.

Each is a default: a variable the user already set wins. Importing any Atelier package that
talks to a library applies them before that library is imported.
"""

from __future__ import annotations

import os
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


apply_offline_defaults()
