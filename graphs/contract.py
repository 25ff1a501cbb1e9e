"""The pipeline protocol's contract (graphs/pipelines.py, graphs/inputs.py), clause by clause.

- the response schema: a pipeline's graph returns `{"response": SystemResponse}`. Every episode
  holds its pipeline to it as the pipeline ends (graphs/episode.py): a missing or malformed
  response fails the episode naming the pipeline and the key (`pipeline_no_response`);
- citations only to sources read, checkpointable state, a clean interrupt/resume where it asks
  the user: `atelier check pipeline` only (runs/studies/conformance/pipeline.py), which applies
  `response_problem` to the responses of its synthetic cases as well.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from atelier.agents.response import SystemResponse
from atelier.benchmarks.common.contract import ContractBroken, ContractClause

PROTOCOL = "pipeline"
RESPONSE = ContractClause(PROTOCOL, "the response schema", "pipeline_no_response")
CITATIONS = ContractClause(PROTOCOL, "citations only to sources read")
CHECKPOINTS = ContractClause(PROTOCOL, "checkpointable state")
INTERRUPT = ContractClause(PROTOCOL, "a clean interrupt/resume where it asks the user")


def response_problem(out: Mapping[str, Any], pipeline: str) -> str | None:
    """Why `out` (what the pipeline's graph left in the state) breaks 'the response schema'; None
    when its `response` is a SystemResponse."""
    response = out.get("response")
    if isinstance(response, SystemResponse):
        return None
    if response is None:
        return (
            f'pipeline {pipeline!r} returned no `response` (a pipeline\'s graph returns {{"response": SystemResponse}})'
        )
    return (
        f"pipeline {pipeline!r} returned `response` as a {type(response).__name__}, not a SystemResponse "
        "(atelier.agents.response)"
    )


def checked_response(out: Mapping[str, Any], pipeline: str, step: str) -> SystemResponse:
    """`out`'s response; ContractBroken (the episode fails) when the pipeline broke the response schema."""
    problem = response_problem(out, pipeline)
    if problem is not None:
        raise ContractBroken(RESPONSE, problem, step)
    return out["response"]
