"""The memory protocol's contract (memory/contract.py: the clauses every run holds each recall to,
and these), checked on a backend on the scripted model:

- ingest idempotent: ingesting the same events again (whole, or some of them, in another order)
  leaves the state digest and the context as one ingest made them, with no event id twice;
- concurrent users isolated: two users ingested at once never see each other's words or ids, and
  each user's state is what ingesting that user alone makes;
- budget respected: a context never takes more tokens than the budget it was asked for (but for
  the persona alone, kept whole over a budget it exceeds: asked of a user whose only event is the
  persona, as the `persona` setting gives it);
- event ids only from ingested events: every id a context names is an event of that user;
- no gold field read: on a case whose gold fields all carry a canary, the canary reaches neither
  the context nor any model request (run through the memory graph, as an episode runs it);
- state rebuilt exactly after a kill: a process doing a run's memory work is killed (`kill -9`);
  a new process rebuilds the state from the run's memory journal (memory/journal.py) or the
  backend's own store, to the same digest, with every model call answered by the response cache;
- the persona kept whole where the setting gives one (`persona+context`): the explicit persona's
  every facet in the context and its event first — or its loss recorded as a degradation;
- contexts in the UserContext schema: every context asked above is one a run can read (the run's
  own check, `memory.contract.checked_context`, on each).

Backends whose state holds times read them through `MemoryBackend.now()`; the kit fixes their
clock, so that two instances fed alike hold equal state.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from atelier.agents.models.cache import ResponseCache
from atelier.agents.models.gateway import Gateway
from atelier.agents.models.ledger import Ledger, capture_calls
from atelier.agents.models.settings import ModelSettings
from atelier.benchmarks.case import (
    Case,
    ChatMessage,
    ChatSession,
    ExplicitPersona,
    Gold,
    HistoryEvent,
    MemorySnippet,
    PTKBStatement,
    Query,
    RJPair,
    RubricAspect,
    SearchQueryRecord,
    SearchSession,
    persona_facets,
)
from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.contract import ContractBroken
from atelier.benchmarks.common.errors import ConfigError
from atelier.memory import contract
from atelier.memory.base import MemoryBackend, MemoryConfig, MemoryEnv, MemoryQuery, UserContext
from atelier.memory.budget import count_tokens
from atelier.memory.journal import journaled
from atelier.memory.registry import BACKENDS, create_backend
from atelier.runs.studies.conformance.clauses import Clause, Report, broken, checked, held, not_applicable, verdict

USERS = {"alice": "ALICEWORD", "bob": "BOBWORD"}
QUERY = MemoryQuery(text="Suggest a vegetarian dinner plan for a runner on a tight budget")
BROAD = "vegetarian soy marathon budget Lisbon cats index funds tea"
BUDGETS = (24, 80, 300, 1200)
CLOCK = 1_750_000_000.0  # every instance's clock: equal feeds make equal state
CANARY = "GOLD-CANARY-5d1e"
CHILD_TIMEOUT_S = 600


def history(user: str, marker: str) -> list[HistoryEvent]:
    """A user's history of every common kind; each text carries the user's marker so a leak shows."""
    return [
        MemorySnippet(id=f"{user}:m1", text=f"{marker} I am vegetarian and allergic to soy.", timestamp="2025-01-03"),
        MemorySnippet(id=f"{user}:m2", text=f"{marker} I run a half marathon every spring.", timestamp="2025-02-10"),
        MemorySnippet(
            id=f"{user}:m3", text=f"{marker} My budget for travel is tight this year.", timestamp="2025-03-01"
        ),
        PTKBStatement(id=f"{user}:p1", text=f"{marker} I live in Lisbon with my two cats."),
        ChatSession(
            id=f"{user}:c1",
            timestamp="2025-03-05",
            messages=[
                ChatMessage(role="user", content=f"{marker} Explain index funds to me simply, please."),
                ChatMessage(role="assistant", content="An index fund tracks a market index at low cost."),
            ],
        ),
        SearchSession(
            id=f"{user}:s1",
            timestamp="2025-03-09",
            queries=[SearchQueryRecord(query=f"{marker} cheap vegetarian restaurants lisbon")],
        ),
        MemorySnippet(
            id=f"{user}:m4", text=f"{marker} 我喜欢喝乌龙茶 🍵 — und lese gern Krimis.", timestamp="2025-03-12"
        ),
    ]


def persona(user: str) -> ExplicitPersona:
    """An explicit persona, as the `persona+context` setting gives it (first, before the history)."""
    return ExplicitPersona(
        id=f"{user}:persona",
        attributes={
            "Basic Attributes": {"Occupation": "marine biologist", "Home": "Porto, Portugal"},
            "Preferences and Interests": {"Diet": "pescatarian, no dairy", "Hobbies": ["surfing", "chess"]},
        },
    )


def feed(user: str, marker: str) -> list[HistoryEvent]:
    """What a `persona+context` case gives a memory: the explicit persona first, then the history."""
    return [persona(user), *history(user, marker)]


def short(digest: str | None) -> str:
    return "none" if digest is None else digest[:12]


def config_for(ref: str, options: dict[str, Any]) -> MemoryConfig:
    """The backend's typed config from `--option` values; one ConfigError naming the bad option."""
    model = BACKENDS.get(ref).config_model
    try:
        return model.model_validate({**options, "backend": ref})
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(p) for p in error["loc"]) or "(config)"
        fields = ", ".join(f for f in model.model_fields if f != "backend")
        raise ConfigError(f"--option {key}: {error['msg']} (memory backend {ref!r} options: {fields})") from None


def scripted_gateway(cache: Path | None = None, ledger: Ledger | None = None) -> Gateway:
    settings = ModelSettings()
    return Gateway(
        {"system": settings, "memory": settings},
        cache=ResponseCache(cache) if cache is not None else None,
        ledger=ledger or Ledger(None),
    )


class MemoryKit:
    def __init__(self, ref: str, options: dict[str, Any], workdir: Path) -> None:
        self.ref = ref
        self.config = config_for(ref, options)
        self.cls = BACKENDS.get(ref)
        self.workdir = workdir
        self._stores = 0
        self._open: list[MemoryBackend] = []
        self._contexts = 0  # contexts the instances gave
        self._unreadable: list[str] = []  # what was wrong with those that were no UserContext

    def backend(self, store: Path | None = None, gateway: Gateway | None = None) -> MemoryBackend:
        """A fresh instance in a store folder of its own, its clock fixed."""
        if store is None:
            self._stores += 1
            store = self.workdir / "stores" / str(self._stores)
        instance = create_backend(self.config, MemoryEnv(gateway=gateway or scripted_gateway(), store_dir=store))
        instance.clock = lambda: CLOCK
        context = instance.context

        async def read_as_a_run_reads(user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:
            self._contexts += 1
            try:
                return contract.checked_context(await context(user_id, query, budget), instance.name)
            except ContractBroken as exc:
                self._unreadable.append(exc.detail)
                raise

        instance.context = read_as_a_run_reads  # type: ignore[method-assign]
        self._open.append(instance)
        return instance

    async def close(self) -> None:
        for instance in self._open:
            try:
                await instance.aclose()
            except Exception:  # noqa: BLE001 - closing after a check; what the check found is what counts
                pass
        self._open.clear()

    async def run(self) -> Report:
        report = Report(contract.PROTOCOL, self.ref)
        contexts: list[tuple[str, UserContext, set[str]]] = []  # every context the checks made: (user, it, ingested)
        alone: dict[str, str | None] = {}
        try:
            report.clauses.append(await checked(contract.IDEMPOTENT.name, lambda: self.idempotent(contexts, alone)))
            report.clauses.append(await checked(contract.ISOLATED.name, lambda: self.isolated(contexts, alone)))
            report.clauses.append(await checked(contract.BUDGET.name, lambda: self.budget(contexts)))
            report.clauses.append(self.known_ids(contexts))
            report.clauses.append(await checked(contract.NO_GOLD.name, self.no_gold))
            report.clauses.append(await checked(contract.REBUILT.name, self.rebuilt))
            report.clauses.append(await checked(contract.PERSONA.name, self.persona))
            report.clauses.append(self.context_schema())
        finally:
            await self.close()
        return report

    # ------------------------------------------------------------------ clauses

    async def idempotent(self, contexts: list, alone: dict[str, str | None]) -> Clause:
        events = feed("alice", USERS["alice"])
        once, again = self.backend(), self.backend()
        await once.ingest("alice", events)
        await again.ingest("alice", events)
        await again.ingest("alice", events)
        await again.ingest("alice", list(reversed(events[:3])) + events[:1])  # some again, reordered, repeated
        alone["alice"] = digest_once = await once.state_digest("alice")
        digest_again = await again.state_digest("alice")
        first = await once.context("alice", QUERY, 300)
        second = await again.context("alice", QUERY, 300)
        ids = {e.id for e in events}
        contexts += [("alice", first, ids), ("alice", second, ids)]
        self._budget_backend = once
        problems = []
        if digest_once != digest_again:
            problems.append(
                f"state digest {short(digest_once)} after one ingest, {short(digest_again)} after the same events again"
            )
        if (first.text, first.event_ids) != (second.text, second.event_ids):
            problems.append(
                f"the context differs: {first.tokens} tokens, ids {first.event_ids[:5]} after one ingest; "
                f"{second.tokens} tokens, ids {second.event_ids[:5]} after the same events again"
            )
        repeated = sorted({i for i in second.event_ids if second.event_ids.count(i) > 1})
        if repeated:
            problems.append(f"the context names event ids twice: {', '.join(repeated[:5])}")
        if problems:
            return broken(contract.IDEMPOTENT.name, "; ".join(problems))
        digest = f"state digest {short(digest_once)} both times" if digest_once else "no state digest (None)"
        return held(
            contract.IDEMPOTENT.name,
            f"{len(events)} events ingested once vs. three times (whole, then 4 again reordered): {digest}; "
            f"the same context ({len(first.event_ids)} event ids, {count_tokens(first.text)} tokens)",
        )

    async def isolated(self, contexts: list, alone: dict[str, str | None]) -> Clause:
        both = self.backend()
        feeds = {user: feed(user, marker) for user, marker in USERS.items()}
        await asyncio.gather(*(both.ingest(user, events) for user, events in feeds.items()))
        digests = {user: await both.state_digest(user) for user in USERS}
        asked = await asyncio.gather(*(both.context(user, BROAD, 2000) for user in USERS))
        problems = []
        for (user, ctx), other in zip(zip(USERS, asked), reversed(list(USERS))):
            contexts.append((user, ctx, {e.id for e in feeds[user]}))
            if USERS[other] in ctx.text:
                problems.append(f"{user}'s context holds {other}'s word {USERS[other]}")
            leaked = [i for i in ctx.event_ids if i.startswith(f"{other}:")]
            if leaked:
                problems.append(f"{user}'s context names {other}'s events {', '.join(leaked[:4])}")
        if alone.get("alice") != digests["alice"]:
            problems.append(
                f"alice's state digest is {short(digests['alice'])} beside bob's ingest, "
                f"{short(alone.get('alice'))} when ingested alone"
            )
        if problems:
            return broken(contract.ISOLATED.name, "; ".join(problems))
        return held(
            contract.ISOLATED.name,
            f"alice and bob ingested at once: neither context ({', '.join(str(c.tokens) for c in asked)} tokens) "
            f"holds the other's words or ids; alice's digest {short(digests['alice'])} equals hers ingested alone",
        )

    async def budget(self, contexts: list) -> Clause:
        backend = getattr(self, "_budget_backend", None) or self.backend()
        events = feed("alice", USERS["alice"])
        given = persona("alice")
        if getattr(self, "_budget_backend", None) is None:
            await backend.ingest("alice", events)
        ids = {e.id for e in events}
        measured = []
        over = []
        for budget in BUDGETS:
            ctx = await backend.context("alice", QUERY, budget)
            contexts.append(("alice", ctx, ids))
            tokens = count_tokens(ctx.text)
            problem = contract.over_budget(ctx, budget, given)
            if problem is not None:
                over.append(problem)
            elif tokens > budget:
                measured.append(f"{tokens}/{budget} (the persona alone, kept whole over the budget, recorded)")
            else:
                measured.append(f"{tokens}/{budget}")
        default = await backend.context("alice", QUERY)
        contexts.append(("alice", default, ids))
        problem = contract.over_budget(default, self.config.budget_tokens, given)
        if problem is not None:
            over.append(f"{problem} (its default budget_tokens)")
        # the `persona` setting: the persona alone, larger than the smallest budget
        lone = persona("pat")
        await backend.ingest("pat", [lone])
        alone = await backend.context("pat", QUERY, BUDGETS[0])
        contexts.append(("pat", alone, {lone.id}))
        problem = contract.over_budget(alone, BUDGETS[0], lone)
        if problem is not None:
            over.append(f"{problem} (a persona alone, as the `persona` setting gives it)")
        else:
            measured.append(f"{count_tokens(alone.text)}/{BUDGETS[0]} (a persona alone)")
        if over:
            return broken(contract.BUDGET.name, "; ".join(over))
        return held(
            contract.BUDGET.name,
            f"tokens/budget: {', '.join(measured)}; default budget {self.config.budget_tokens}: ok",
        )

    def context_schema(self) -> Clause:
        if self._unreadable:
            return broken(contract.CONTEXT.name, "; ".join(dict.fromkeys(self._unreadable)))
        return held(contract.CONTEXT.name, f"{self._contexts} contexts asked, each a UserContext a run can read")

    def known_ids(self, contexts: Sequence[tuple[str, UserContext, set[str]]]) -> Clause:
        unknown: dict[str, list[str]] = {}
        for user, ctx, ingested in contexts:
            for event_id in contract.unknown_ids(ctx, ingested):
                if event_id not in unknown.setdefault(user, []):
                    unknown[user].append(event_id)
        unknown = {user: ids for user, ids in unknown.items() if ids}
        if not contexts:
            return not_applicable(contract.KNOWN_IDS.name, "no context was made (an earlier clause failed first)")
        if unknown:
            named = "; ".join(f"user {user}: {', '.join(map(repr, ids[:5]))}" for user, ids in unknown.items())
            return broken(contract.KNOWN_IDS.name, f"ids never ingested for that user: {named}")
        total = sum(len(ctx.event_ids) for _, ctx, _ in contexts)
        return held(
            contract.KNOWN_IDS.name,
            f"{len(contexts)} contexts named {total} event ids, each one the user's ingested event",
        )

    async def no_gold(self) -> Clause:
        from atelier.graphs.context import EpisodeContext, SystemSpec
        from atelier.graphs.inputs import forget_cases, remember_cases
        from atelier.graphs.memory import build_memory_graph
        from atelier.graphs.resources import release

        case = canary_case()
        run = self.workdir / "gold-run"
        no_follow.make_folders(run)
        context = EpisodeContext(
            run_id=f"check-memory-{os.getpid()}-{id(self)}",
            run_dir=str(run),
            cache_dir=str(self.workdir / "gold-cache"),
            system=SystemSpec(name="checked", memory=self.config.model_dump(mode="json")),
            judges=[],
        )
        remember_cases(context.run_id, [case])  # where a backend reaching for the whole case would find it
        try:
            with capture_calls() as calls:
                try:
                    out = await build_memory_graph().ainvoke(
                        {"benchmark": case.benchmark, "case_id": case.id}, context=context
                    )
                    user_context: UserContext = out["user_context"]
                except ContractBroken as exc:  # another clause (the budget, ...): its own line says so
                    if not isinstance(exc.subject, UserContext):
                        raise
                    user_context = exc.subject
        finally:
            await release(context)
            forget_cases(context.run_id)
        cache = ResponseCache(self.workdir / "gold-cache")
        try:
            requests = [cache.get(c.request_key) for c in calls if c.request_key]
        finally:
            cache.close()
        leaked = [i for i, r in enumerate(requests) if r is not None and CANARY in json.dumps(r.get("messages"))]
        where = []
        if CANARY in user_context.model_dump_json():
            where.append("the context")
        if leaked:
            where.append(f"{len(leaked)} of {len(requests)} model requests")
        if where:
            return broken(contract.NO_GOLD.name, f"the canary of the case's gold fields reached {' and '.join(where)}")
        return held(
            contract.NO_GOLD.name,
            f"a case whose gold fields carry a canary, through the memory graph: not in the context "
            f"({user_context.tokens} tokens) nor in any of its {len(requests)} model requests",
        )

    async def rebuilt(self) -> Clause:
        if not self.cls.keeps_state:
            return held(contract.REBUILT.name, "keeps nothing (keeps_state = False): nothing to rebuild")
        store, cache = self.workdir / "kill-store", self.workdir / "kill-cache"
        first = await asyncio.to_thread(first_process_killed, self.config, store, cache)
        ledger = Ledger(None)
        later = journaled(self.backend(store=store, gateway=scripted_gateway(cache, ledger)))
        self._open.append(later)
        with capture_calls() as calls:
            digests = {user: await later.state_digest(user) for user in ("u1", "u2")}
            probe = None if self.cls.recall_changes_state else await later.context("u1", PROBE)
        if any(d is None for d in first["digests"].values()):
            return broken(
                contract.REBUILT.name,
                "state_digest returns None, so a resumed run cannot check that it rebuilt this memory exactly "
                "(implement state_digest: a digest of everything the backend holds about a user)",
            )
        problems = []
        for user, digest in first["digests"].items():
            if digests[user] != digest:
                problems.append(
                    f"{user}'s state digest {short(digest)} before the kill, {short(digests[user])} rebuilt"
                )
        if probe is not None and UserContext.model_validate(first["probe"]) != probe:
            problems.append("the rebuilt memory gives another context for the same query")
        uncached = [c for c in calls if not c.cache_hit and c.is_model_call]
        if uncached:
            problems.append(
                f"{len(uncached)} of the rebuild's {len(calls)} model calls were new (not the first process's, "
                "answered by the response cache)"
            )
        if problems:
            return broken(contract.REBUILT.name, "; ".join(problems))
        how = "its own store reopened" if self.cls.persists_state else "the run's memory journal replayed"
        return held(
            contract.REBUILT.name,
            f"a process killed (kill -9) after 5 memory operations; a new one, {how}, holds digests "
            f"{', '.join(f'{u} {short(d)}' for u, d in digests.items())} as before the kill"
            + (", the same context for the probe query" if probe is not None else "")
            + f"; {len(calls)} model calls, all from the response cache",
        )

    async def persona(self) -> Clause:
        if not self.cls.keeps_state:
            return not_applicable(
                contract.PERSONA.name, "keeps nothing (keeps_state = False): no context at all, by design"
            )
        given = persona("carol")
        backend = self.backend()
        await backend.ingest("carol", feed("carol", "CAROLWORD"))
        ctx = await backend.context("carol", QUERY, 400)
        values = [value for _, value in persona_facets(given.attributes)]
        missing = [value for value in values if value not in ctx.text]
        first = ctx.event_ids[:1] == [given.id]
        lost = contract.persona_problem(ctx, given)
        recorded = [d for d in ctx.degraded if d.kind == contract.PERSONA.kind]
        if lost is None and not recorded and first:
            return held(
                contract.PERSONA.name,
                f"all {len(values)} facets in the context, the persona's event first (budget 400)",
            )
        if recorded:
            return held(
                contract.PERSONA.name, f"the persona's loss is recorded: {recorded[0].kind}: {recorded[0].detail}"
            )
        problems = [] if lost is None else [f"the {lost}"]
        if missing:
            problems.append(f"{len(missing)} of {len(values)} facets missing from the context (e.g. {missing[0]!r})")
        if not first:
            problems.append(f"the persona's event is not first ({ctx.event_ids[:3] or 'no event ids'})")
        return verdict(
            contract.PERSONA.name, False, "; ".join(problems) + " at a budget of 400, and no degradation records it"
        )


PROBE = MemoryQuery(text="Where should I travel this spring?")


def canary_case() -> Case:
    """A `persona+context` case whose every gold field (and the traits systems never see) carries the canary."""
    events = history("gold-user", "GOLDUSERWORD")
    return Case(
        id="canary",
        benchmark="conformance",
        user_id="gold-user",
        setting="persona+context",
        query=Query(text="What should I cook for friends this weekend?"),
        history=events,
        persona=None,
        history_traits={e.id: f"{CANARY} trait" for e in events},
        gold=Gold(
            information_need=f"{CANARY} need",
            narrative=f"{CANARY} narrative",
            rubric_aspects=[RubricAspect(aspect=f"{CANARY} aspect", reason=CANARY, evidence=CANARY)],
            information_claims=[f"{CANARY} claim"],
            rj_pairs=[RJPair(response=f"{CANARY} response", feedback=CANARY)],
            relevant_history_ids=[events[0].id],
            answer=f"{CANARY} answer",
            preference=f"{CANARY} preference",
        ),
    )


# ----------------------------------------------------------------------------- the process killed


def first_process_killed(config: MemoryConfig, store: Path, cache: Path) -> dict[str, Any]:
    """Run `first_process` in a child process doing a run's memory work, and kill it (SIGKILL) once it
    has reported what its memory holds; that report."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    child = subprocess.Popen(
        [sys.executable, "-m", "atelier.runs.studies.conformance.memory", "--first-process"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(
            json.dumps({"config": config.model_dump(mode="json"), "store": str(store), "cache": str(cache)}) + "\n"
        )
        child.stdin.flush()
        line = _read_line(child, CHILD_TIMEOUT_S)
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    if not line:
        err = (child.stderr.read() if child.stderr else "").strip().splitlines()
        raise RuntimeError(f"the first process ended before reporting its state: {err[-1] if err else 'no output'}")
    return json.loads(line)


def _read_line(child: subprocess.Popen, timeout: float) -> str:
    import selectors

    assert child.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(child.stdout, selectors.EVENT_READ)
    if not selector.select(timeout):
        raise TimeoutError(f"the first process reported nothing within {timeout:.0f} s")
    return child.stdout.readline()


async def first_process(config: dict[str, Any], store: Path, cache: Path) -> dict[str, Any]:
    """A run's memory work as a process does it (journaled in its store): two ingests of u1 with a
    recall between, u2, a probe recall; then what the memory holds, before anything is closed."""
    memory = journaled(create_backend(config, MemoryEnv(gateway=scripted_gateway(cache), store_dir=store)))
    events = feed("u1", "UONEWORD")
    await memory.ingest("u1", events[1:4])
    await memory.context("u1", QUERY)
    await memory.ingest("u1", events)
    await memory.ingest("u2", history("u2", "UTWOWORD")[:2])
    probe = await memory.context("u1", PROBE)
    return {
        "digests": {user: await memory.state_digest(user) for user in ("u1", "u2")},
        "probe": probe.model_dump(mode="json"),
    }


def _child_main() -> None:
    from atelier.benchmarks.common.offline import apply_offline_defaults

    apply_offline_defaults()
    job = json.loads(sys.stdin.readline())
    report = asyncio.run(first_process(job["config"], Path(job["store"]), Path(job["cache"])))
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()
    sys.stdin.read()  # wait to be killed, holding everything open as a running process would


if __name__ == "__main__" and "--first-process" in sys.argv:
    _child_main()
