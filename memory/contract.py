"""The memory protocol's contract (memory/base.py), clause by clause.

Every run holds each context a memory gives to the clauses a single context can show, on every
recall (`held_to_contract`); `atelier check memory` (runs/studies/conformance/memory.py) calls the
same functions on the contexts of its synthetic users, and tests the clauses only a controlled
experiment can show:

- budget respected: a context never takes more tokens than its budget — but for the explicit
  persona larger than the budget, kept whole as the context's only event (its text the persona's
  lines, nothing more) with a degradation saying so (memory/persona_first.py, memory/budget.py);
  broken: `memory_over_budget`, the episode fails;
- event ids only from ingested events: every id a context names is one of the user's own
  events the memory was given; broken: `memory_unknown_event`, the episode fails;
- the persona kept whole where the setting gives one: the explicit persona's facets open the
  context, every one — or its loss is recorded (`persona_not_kept`; the episode goes on);
- contexts in the UserContext schema: what `context()` returns is a UserContext whose every field
  holds what the schema says (text a str, event ids a list of str with no id twice, tokens an int >= 0, its form one
  of the forms, its degradations and share valid — a field set after the context was made, or a
  context made with `model_construct`, included) and that can be written as JSON; broken:
  `memory_bad_context`, the episode fails;
- ingest idempotent, concurrent users isolated, no gold field read, state rebuilt exactly after
  a kill: `atelier check memory` only (a resumed run refuses a memory its journal cannot rebuild
  exactly: memory/journal.py).
"""

from __future__ import annotations

from collections.abc import Collection

from pydantic import ValidationError

from atelier.benchmarks.case import ExplicitPersona
from atelier.benchmarks.common.contract import (
    ContractBroken,
    ContractClause,
    FieldProblem,
    error_problem,
    field_problem,
)
from atelier.memory.base import UserContext
from atelier.memory.budget import count_tokens
from atelier.memory.persona_first import persona_kept, persona_lines

PROTOCOL = "memory"
IDEMPOTENT = ContractClause(PROTOCOL, "ingest idempotent")
ISOLATED = ContractClause(PROTOCOL, "concurrent users isolated")
BUDGET = ContractClause(PROTOCOL, "budget respected", "memory_over_budget")
KNOWN_IDS = ContractClause(PROTOCOL, "event ids only from ingested events", "memory_unknown_event")
NO_GOLD = ContractClause(PROTOCOL, "no gold field read")
REBUILT = ContractClause(PROTOCOL, "state rebuilt exactly after a kill")
PERSONA = ContractClause(PROTOCOL, "the persona kept whole where the setting gives one", "persona_not_kept")
CONTEXT = ContractClause(PROTOCOL, "contexts in the UserContext schema", "memory_bad_context")


def context_problem(value: object, backend: str) -> str | None:
    """Why `value`, what a memory's `context()` returned, is not a context the run can read; None
    when it is a UserContext whose every field holds what the schema says and that can be written
    as JSON (a field set after the context was made, or a context or share made with
    `model_construct`, is not validated by pydantic: it is here, on every recall, before the run
    records it)."""
    if not isinstance(value, UserContext):
        return f"the {backend} memory's context() returned a {type(value).__name__}, not a UserContext (atelier.memory.base)"
    if not isinstance(value.text, str):
        return f"the {backend} memory's context has a {type(value.text).__name__} as its text, not a str"
    if not isinstance(value.event_ids, list) or not all(isinstance(i, str) for i in value.event_ids):
        return f"the {backend} memory's context has event_ids {str(value.event_ids)[:80]!r}, not a list of str"
    if len(set(value.event_ids)) != len(value.event_ids):  # a ranking's repeat would move ids in `memory eval`
        twice = next(i for n, i in enumerate(value.event_ids) if i in value.event_ids[:n])
        return (
            f"the {backend} memory's context names the event {twice!r} twice in event_ids: each event used once, "
            "most relevant first"
        )
    return _fields_problem(value, backend)


def _fields_problem(context: UserContext, backend: str) -> str | None:
    """Why `context`'s fields break the UserContext schema; None when they hold."""
    problem = field_problem(context)
    if problem is None:
        return None
    if problem.unwritable:
        return f"the {backend} memory's context cannot be written as JSON: {problem.unwritable}"
    return invalid_context(problem, f"the {backend} memory's context")


def invalid_context(problem: FieldProblem, what: str) -> str:
    """`problem` as what breaks the schema of `what` (a context): the field and the value."""
    field = problem.field or "(context)"
    if problem.missing:
        return f"{what} has no field {field!r}"
    return f"{what} has its field {field!r} invalid: {problem.message} (got {problem.shown})"


# What a memory's context is made of: a ValidationError of one of these raised inside its
# `context()` is a context made outside the schema (memory/registry.py holds plugins to it).
CONTEXT_MODELS = frozenset({"UserContext", "ContextShare"})


def made_invalid(exc: ValidationError, backend: str) -> ContractBroken | None:
    """The ContractBroken for `exc`, raised inside `backend`'s `context()`, when it is the context's
    own schema refusing what the backend made (tokens=-1, ...); None for another model's error."""
    if exc.title not in CONTEXT_MODELS:
        return None
    return ContractBroken(
        CONTEXT,
        invalid_context(error_problem(exc), f"the {backend} memory's context() made a context that"),
        "recall",
    )


def checked_context(value: object, backend: str, step: str = "recall") -> UserContext:
    """`value` as a UserContext; ContractBroken (the episode fails) when `context_problem` says it is not one."""
    problem = context_problem(value, backend)
    if problem is not None:
        raise ContractBroken(CONTEXT, problem, step)
    assert isinstance(value, UserContext)
    return value


def persona_alone_kept(context: UserContext, persona: ExplicitPersona | None) -> bool:
    """The one way over a budget (memory/budget.py pack_events, memory/persona_first.py): the explicit
    persona larger than the budget, kept whole as the context's only event — its text the persona's
    lines and nothing else — with a degradation saying so."""
    return (
        persona is not None
        and context.event_ids == [persona.id]
        and persona_kept(context.text, persona)
        and len(context.text.split("\n")) == len(persona_lines(persona))
        and any("persona" in d.detail.lower() for d in context.degraded)
    )


def context_tokens(context: UserContext, budget: int) -> int | None:
    """The context's tokens when they may exceed `budget`; None when its UTF-8 bytes alone fit (a
    token is at least one byte: no tokenizer needed)."""
    if len(context.text) <= budget and len(context.text.encode("utf-8")) <= budget:
        return None
    return count_tokens(context.text)


def over_budget(context: UserContext, budget: int, persona: ExplicitPersona | None) -> str | None:
    """Why `context` breaks 'budget respected' for `budget`; None when it holds."""
    tokens = context_tokens(context, budget)
    if tokens is None or tokens <= budget or persona_alone_kept(context, persona):
        return None
    return f"{tokens} tokens for a budget of {budget}"


def unknown_ids(context: UserContext, known: Collection[str]) -> list[str]:
    """The event ids `context` names that are not among `known` (the user's ingested events), in order, once each."""
    return list(dict.fromkeys(i for i in context.event_ids if i not in known))


def persona_problem(context: UserContext, persona: ExplicitPersona | None) -> str | None:
    """Why `context` breaks 'the persona kept whole' when the setting gave `persona`; None when it
    holds, or when its backend recorded the loss itself."""
    if persona is None or persona_kept(context.text, persona) or any(d.kind == PERSONA.kind for d in context.degraded):
        return None
    return "context does not open with the persona's facets, whole"


def held_to_contract(
    context: UserContext,
    *,
    user_id: str,
    budget: int,
    known: Collection[str],
    persona: ExplicitPersona | None,
    step: str = "recall",
) -> UserContext:
    """`context`, the memory's answer for `user_id` under `budget`, held to the clauses one context
    shows: ContractBroken (the episode fails) for a context over its budget or naming events not
    among `known`; a `persona_not_kept` added when the setting's persona was lost without a word.
    (`checked_context` comes first, where the memory's answer is first read.)"""
    problem = over_budget(context, budget, persona)
    if problem is not None:
        raise ContractBroken(BUDGET, f"the {context.backend} memory's context takes {problem}", step, subject=context)
    unknown = unknown_ids(context, known)
    if unknown:
        raise ContractBroken(
            KNOWN_IDS,
            f"the {context.backend} memory's context for user {user_id!r} names {len(unknown)} event(s) that are not "
            f"the user's ingested events: {', '.join(map(repr, unknown[:5]))}",
            step,
            subject=context,
        )
    lost = persona_problem(context, persona)
    if lost is None or persona is None:
        return context
    detail = f"the setting gave the explicit persona ({persona.id}), but the {context.backend} memory's {lost}"
    return context.model_copy(update={"degraded": [*context.degraded, PERSONA.broken(detail, step)]})
