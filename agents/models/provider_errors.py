"""What a failed provider call means: retry it, or stop — and the server's own words for why.

Three verdicts:

- `retry`   timeouts, 429, lost connections and 5xx server trouble: waiting may help;
- `refused` the server read the request and will not serve it (400/422, or a request-validation
            error whatever its status: llama.cpp's server answers those under 500). Retrying the
            same request cannot help; a structured call may try a weaker output mode instead;
- `fatal`   nothing about this request can help: bad credentials (401/403, or a missing key whatever
            status litellm gives it), an unknown model (404), a prompt longer than the model's
            context, a content-policy refusal.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Literal

Verdict = Literal["retry", "refused", "fatal"]

# Phrases of request-validation errors (pydantic/FastAPI, OpenAI-style servers) that some servers
# send with a 5xx status.
_VALIDATION = re.compile(
    r"validation error|Input should be|Field required|Extra inputs are not permitted|extra_forbidden"
    r"|literal_error|invalid_request_error|unprocessable|not supported|unsupported|unrecognized request argument",
    re.IGNORECASE,
)
# Credentials that cannot work, as providers and litellm word it under any status (litellm raises a
# missing OpenAI or Perplexity key as an InternalServerError, 500): never retried.
_CREDENTIALS = re.compile(
    r"missing credentials|api_key client option must be set|no api key provided|incorrect api key|invalid api key"
    r"|invalid_api_key|invalid x-api-key|authentication_error|permission_denied|missing \w+ api key",
    re.IGNORECASE,
)
_LITELLM_PREFIX = re.compile(
    r"^(?:(?:litellm\.)?\w+(?:Error|Exception):\s*)*(?:\w*Exception - )?(?:Error code: \d+ - )?"
)


def status_of(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def server_message(exc: BaseException) -> str:
    """The error as the server worded it, without litellm's class-name prefixes."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"]
        return json.dumps(body, ensure_ascii=False)
    if isinstance(body, str) and body.strip():
        return body.strip()
    message = str(getattr(exc, "message", None) or exc)
    return _LITELLM_PREFIX.sub("", message).strip() or type(exc).__name__


def bad_credentials(exc: BaseException) -> bool:
    """Whether the provider (or litellm, before asking it) says the credentials cannot work."""
    return status_of(exc) in (401, 403) or bool(_CREDENTIALS.search(server_message(exc)))


def classify(exc: BaseException) -> Verdict:
    import httpx
    import litellm
    import openai

    from atelier.agents.models.answer_contract import IncompleteAnswer
    from atelier.agents.models.grounding import ResponsesStreamError

    if isinstance(exc, IncompleteAnswer):  # a stream cut off may come whole next time; a queued job will not
        return "retry" if exc.retryable else "fatal"
    if isinstance(exc, (asyncio.TimeoutError, litellm.Timeout, litellm.RateLimitError, ResponsesStreamError)):
        return "retry"
    if _CREDENTIALS.search(server_message(exc)):  # whatever the status it came with
        return "fatal"
    if isinstance(
        exc,
        (
            litellm.AuthenticationError,
            litellm.PermissionDeniedError,
            litellm.NotFoundError,
            litellm.ContextWindowExceededError,
            litellm.ContentPolicyViolationError,
        ),
    ):
        return "fatal"
    status = status_of(exc)
    # the OpenAI SDK's (the Responses API's) and httpx's (the Interactions API's) lost connections and timeouts too
    lost = (litellm.APIConnectionError, openai.APIConnectionError, httpx.TransportError)
    if isinstance(exc, lost) and not _looks_like_validation(exc):
        return "retry"  # connection refused or reset, an unparseable body: the server may recover
    if status in (401, 403, 404):
        return "fatal"
    if status == 429:
        return "retry"
    if isinstance(exc, (litellm.BadRequestError, litellm.UnprocessableEntityError)) or status in (400, 413, 422):
        return "refused"
    if status is not None and status >= 500:
        return "refused" if _looks_like_validation(exc) else "retry"
    if isinstance(exc, (litellm.InternalServerError, litellm.ServiceUnavailableError, litellm.BadGatewayError)):
        return "retry"
    return "fatal"


def _looks_like_validation(exc: BaseException) -> bool:
    return bool(_VALIDATION.search(server_message(exc)))
