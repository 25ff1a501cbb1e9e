"""litellm as every call of the project makes it: set up once per process (the scripted provider
registered, unsupported parameters dropped, no telemetry, its tokenizer loaded once), and the scope a
call runs in when nothing consumes litellm's own logging. Its own module so that what prices and
bounds calls (`pricing`, `spend`) reaches litellm without importing the gateway that uses them."""

from __future__ import annotations

import contextlib
import contextvars
import threading

from atelier.agents.models.scripted import register_with_litellm

_litellm_ready = False
_litellm_lock = threading.Lock()
_litellm_internal_call: contextvars.ContextVar[bool] | None = None


def configured_litellm():
    """litellm, set up as the gateway calls it (once per process): the scripted provider registered,
    unsupported parameters dropped, no telemetry."""
    global _litellm_ready, _litellm_internal_call
    import litellm

    if _litellm_ready:  # set last, under the lock: everything above it is in place
        return litellm
    with _litellm_lock:
        if not _litellm_ready:
            litellm.suppress_debug_info = True
            # providers that reject `seed` still answer; output-mode parameters are only sent to
            # providers litellm knows take them (`supported_modes`), so none is dropped unseen
            litellm.drop_params = True
            litellm.telemetry = False
            register_with_litellm()
            # litellm loads its tokenizer lazily, in whichever of its worker threads first needs it,
            # and unlocked: a run's first concurrent calls each loaded it again (~0.3 s of CPU apiece)
            litellm.encoding  # noqa: B018 - loaded once, here
            try:
                from litellm._internal_context import is_internal_call

                _litellm_internal_call = is_internal_call
            except ImportError:  # another litellm: its logging then always runs (slower, same answers)
                _litellm_internal_call = None
            _litellm_ready = True
    return litellm


_LITELLM_CONSUMERS = (
    "callbacks",
    "input_callback",
    "success_callback",
    "failure_callback",
    "service_callback",
    "_async_input_callback",
    "_async_success_callback",
    "_async_failure_callback",
    "max_budget",
)


def _litellm_logs_for_someone(litellm) -> bool:
    """Whether anything consumes litellm's own logging: a callback (an observability integration
    a user registered, litellm's cache) or the budget litellm tracks (`litellm.max_budget`)."""
    return any(getattr(litellm, name, None) for name in _LITELLM_CONSUMERS)


@contextlib.contextmanager
def litellm_call_scope():
    """Around a litellm call: when nothing consumes litellm's own logging, the call runs as litellm
    runs its internal calls, without it. litellm otherwise builds a logging payload and runs its
    success handlers for every call, callback or not: 1-2 ms of CPU per call on this machine, for
    nothing, as the gateway's ledger records the call itself. Answers, usage and the response's
    price (set before logging) are the same either way; with a callback registered nothing changes."""
    litellm = configured_litellm()
    if _litellm_internal_call is None or _litellm_logs_for_someone(litellm):
        yield
        return
    token = _litellm_internal_call.set(True)
    try:
        yield
    finally:
        _litellm_internal_call.reset(token)
