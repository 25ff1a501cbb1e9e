"""OAgents (OPPO-PersonalAI/OAgents) as a command agent: its deep-research `run.py` on the job's brief.

    command = ["third_party/OAgents/.venv/bin/python", "graphs/external/wrappers/oagents.py",
               "--checkout", "third_party/OAgents"]

Runs `python run.py <brief> --model-id <model>` in the checkout's `example/oagents_deep_research`
(OAgents' own entry: a smolagents manager agent with a web-browsing search agent) and takes its
answer from the line it prints last, `Got this answer: <answer>` (everything after it).

What it maps: the brief (task and the user's context) is OAgents' question; its model, a LiteLLM
model id (`settings.model_id`, default `openai/gpt-5-mini`), reaches the run's endpoint through
`OPENAI_API_BASE` / `OPENAI_API_KEY` (every call ledgered under the name after `openai/`), and
search tools that take `SERPER_BASE_URL` / `JINA_BASE_URL` search and read the run's web. Job
settings: `model_id`, `entry` (the script, relative to the checkout; default
`example/oagents_deep_research/run.py`). Written against OAgents' `run.py` as of its 2025 release;
tested against a fake following it (tests/fixtures/agents/fake_oagents).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from wrapped import emit, fail, run, start

DEFAULT_ENTRY = "example/oagents_deep_research/run.py"
DEFAULT_MODEL = "openai/gpt-5-mini"
ANSWER = "Got this answer:"


def main() -> None:
    root, job, settings = start(__doc__.splitlines()[0])
    entry = root / str(settings.get("entry") or DEFAULT_ENTRY)
    if not entry.is_file():
        fail(f"OAgents' entry {entry} is not a file")
    model_id = str(settings.get("model_id") or DEFAULT_MODEL)
    env = {**os.environ, "OPENAI_API_BASE": os.environ.get("OPENAI_BASE_URL", "")}
    out = run([sys.executable, entry.name, job["brief"], "--model-id", model_id], Path(entry.parent), env, "oagents")
    if ANSWER not in out:
        fail(f"OAgents printed no '{ANSWER}' line; its stdout ends: {out.strip()[-300:]}")
    emit(out.rsplit(ANSWER, 1)[1].strip(), {"model_id": model_id, "entry": str(entry.relative_to(root))})


if __name__ == "__main__":
    main()
