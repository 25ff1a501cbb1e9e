"""The pipeline protocol's contract (graphs/pipelines.py, graphs/inputs.py), clause by clause.

- the response schema: a pipeline's graph returns `{"response": SystemResponse}`. Every episode
  holds its pipeline to it as the pipeline ends (graphs/episode.py): a missing or malformed
  response — or one whose fields do not hold what they say (set after it was made), or that
  cannot be written as JSON — fails the episode naming the pipeline and the key or field
  (`pipeline_no_response`);
- citations only to sources read, checkpointable state, a clean interrupt/resume where it asks
  the user: `atelier check pipeline` only (runs/studies/conformance/pipeline.py), which applies
  `response_problem` to the responses of its synthetic cases as well.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from atelier.agents.response import SystemResponse
from atelier.benchmarks.common.contract import ContractBroken, ContractClause

PROTOCOL = "pipeline"
RESPONSE = ContractClause(PROTOCOL, "the response schema", "pipeline_no_response")
CITATIONS = ContractClause(PROTOCOL, "citations only to sources read")
CHECKPOINTS = ContractClause(PROTOCOL, "checkpointable state")
INTERRUPT = ContractClause(PROTOCOL, "a clean interrupt/resume where it asks the user")


def response_problem(out: Mapping[str, Any], pipeline: str) -> str | None:
    """Why `out` (what the pipeline's graph left in the state) breaks 'the response schema'; None
    when its `response` is a SystemResponse whose fields hold what they say and can be written as
    JSON (a field set after the response was made, or one made with `model_construct`, is not
    validated by pydantic: it is here, before a results file is written that could not be read)."""
    response = out.get("response")
    if isinstance(response, SystemResponse):
        return _fields_problem(response, pipeline)
    if response is None:
        return (
            f'pipeline {pipeline!r} returned no `response` (a pipeline\'s graph returns {{"response": SystemResponse}})'
        )
    return (
        f"pipeline {pipeline!r} returned `response` as a {type(response).__name__}, not a SystemResponse "
        "(atelier.agents.response)"
    )


def _fields_problem(response: SystemResponse, pipeline: str) -> str | None:
    try:
        type(response).model_validate(response.model_dump(warnings=False)).model_dump_json()
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"]) or "(response)"
        if error["type"] == "missing":
            return f"pipeline {pipeline!r} returned a `response` without its field {field!r}"
        return (
            f"pipeline {pipeline!r} returned a `response` whose field {field!r} is invalid: {error['msg']} "
            f"(got {_shown(error.get('input'))})"
        )
    except PydanticSerializationError as exc:
        return f"pipeline {pipeline!r} returned a `response` that cannot be written as JSON: {exc}"
    return None


def _shown(value: Any) -> str:
    said = repr(value)
    return said if len(said) <= 80 else said[:79] + "…"


def checked_response(out: Mapping[str, Any], pipeline: str, step: str) -> SystemResponse:
    """`out`'s response; ContractBroken (the episode fails) when the pipeline broke the response schema."""
    problem = response_problem(out, pipeline)
    if problem is not None:
        raise ContractBroken(RESPONSE, problem, step)
    return out["response"]
