"""Model calls as LangChain chat-model runs, so graph traces show each call's prompt and answer.

Inside a LangGraph node, the node's callback handlers (Studio's event stream, `astream_events`,
the `messages` stream mode, LangSmith when configured) receive one `on_chat_model_start` /
`on_llm_end` pair per gateway request, tagged with the node like any LangChain model call.
Nothing is written to graph state, so checkpoints do not grow. Outside a graph, or when no
handler listens (a plain `ainvoke` in a run), this costs one context-variable lookup.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

R = TypeVar("R")
log = logging.getLogger(__name__)


def _listening_manager(model: str, role: str):
    """The current node's async callback manager when something is listening, else None."""
    from langchain_core.runnables.config import var_child_runnable_config

    config = var_child_runnable_config.get()
    if not config:
        return None
    callbacks = config.get("callbacks")
    if not callbacks or (hasattr(callbacks, "handlers") and not callbacks.handlers):
        return None
    from langchain_core.callbacks.manager import AsyncCallbackManager

    return AsyncCallbackManager.configure(
        inheritable_callbacks=callbacks,
        inheritable_tags=config.get("tags"),
        inheritable_metadata=config.get("metadata"),
        local_metadata={"ls_model_name": model, "atelier_role": role},
    )


async def _start(self: Any, role: str, messages: list[dict[str, Any]], kwargs: dict[str, Any]):
    from langchain_core.messages import convert_to_messages

    settings = self.settings(role)
    manager = _listening_manager(settings.model, role)
    if manager is None:
        return None
    [run] = await manager.on_chat_model_start(
        {"name": f"atelier.{role}", "id": ["atelier", "gateway", role]},
        [convert_to_messages(messages)],
        name=f"{role}:{kwargs.get('kind', 'text')}",
        invocation_params={
            "model": settings.model,
            "role": role,
            "kind": kwargs.get("kind"),
            "structured_mode": kwargs.get("mode"),
        },
    )
    return run


def traced_request(request: Callable[..., Awaitable[tuple[str, R]]]) -> Callable[..., Awaitable[tuple[str, R]]]:
    """Decorates `Gateway._request(self, role, messages, *, mode, schema, kind, ...)`."""

    @functools.wraps(request)
    async def wrapper(self: Any, role: str, messages: list[dict[str, Any]], **kwargs: Any) -> tuple[str, R]:
        try:
            run = await _start(self, role, messages, kwargs)
        except Exception:
            log.warning("could not trace a %s model call; the call goes on untraced", role, exc_info=True)
            run = None
        if run is None:
            return await request(self, role, messages, **kwargs)
        from langchain_core.messages import AIMessage
        from langchain_core.outputs import ChatGeneration, LLMResult

        try:
            content, extra = await request(self, role, messages, **kwargs)
        except BaseException as exc:
            await run.on_llm_error(exc)
            raise
        await run.on_llm_end(LLMResult(generations=[[ChatGeneration(message=AIMessage(content=content))]]))
        return content, extra

    return wrapper
