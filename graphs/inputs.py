"""What a system's graph receives, and how it is prepared from a case.

Every pipeline graph takes `PipelineInput`: the case by reference (`benchmark`, `case_id`) and,
inside an episode, the memory's `UserContext`; alone (e.g. in Studio) its first node asks the
memory backend itself. The system's `CaseView` is derived from the reference when a node needs it
(`case_view`: the system's setting, minus what its `hide` ablation hides), so checkpoints never
carry the user's history; a caller that builds its own view may pass it inline as `view`, and a
simulated conversation's later turn passes just its `query` (the user's message and the turns so far).

Two options change what a system is given, both prepared here from the full case so the pipeline
never touches gold:

- `random_profile` (LaMP-QA's control): `profile_case_id` names a case of another user, drawn with
  the seed; the memory reads that user's history for the asker's query (`memory_view`);
- `gold_context` (BESPOKE Table 6): the case's gold information items, a seeded `noise_ratio` of
  them replaced by items of other users' unrelated cases, become the sources instead of search.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping
from functools import lru_cache
from typing import Any

from cachetools import LRUCache
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from atelier.agents.citations import SourceRef
from atelier.agents.response import SystemResponse
from atelier.benchmarks.case import Case, CaseView, Query
from atelier.benchmarks.common.contract import ContractBroken
from atelier.benchmarks.common.errors import AtelierError
from atelier.benchmarks.contract import SETTINGS, view_problem
from atelier.benchmarks.controls import ControlPlan
from atelier.benchmarks.registry import load_cases
from atelier.graphs.context import BenchmarkRef, EpisodeContext, SystemSpec
from atelier.graphs.pipelines import GoldContextOptions, PipelineOptions, pipeline_options
from atelier.graphs.sources import SourceStore
from atelier.memory.base import UserContext


class GraphInputError(AtelierError, ValueError):
    """Bad input to a graph: an unknown case, a missing field, a case a system option cannot use.
    (A ValueError, so LangGraph's server passes its message to the client.)"""


class GoldContext(BaseModel):
    """The gold information a system is given instead of search (references; texts in the store)."""

    sources: list[SourceRef]
    noise: int = Field(default=0, description="How many items were replaced by other cases' gold information.")
    noise_ratio: float = 0.0


class CaseReference(TypedDict, total=False):
    benchmark: str  # with case_id: the case by reference, e.g. {"benchmark": "sample", "case_id": "q01"}
    case_id: str


class PipelineInput(CaseReference, total=False):
    view: CaseView  # inline (a caller's own view); else derived from the case reference
    query: Query  # replaces the view's query (a simulated conversation's later turn, graphs/simulate.py)
    user_context: UserContext
    profile_case_id: str  # random_profile: the memory reads this other case's user history
    gold_context: GoldContext


class PipelineOutput(TypedDict):
    response: SystemResponse


# ----------------------------------------------------------------------------- cases by reference

# The cases a run loaded, by (run id, benchmark, case id): episodes carry only the reference in
# their state (a case with its history and gold is the largest thing a checkpoint would hold).
_remembered: dict[tuple[str, str, str], Case] = {}


# Every event id of each user in a run's cases (the explicit persona's included), by run id: what
# the user's memory may name (memory/contract.py), made once per run from the cases remembered.
_user_events: dict[str, dict[str, frozenset[str]]] = {}


def remember_cases(run_id: str, cases: list[Case]) -> None:
    for case in cases:
        key = (run_id, case.benchmark, case.id)
        if _remembered.get(key) is not case:
            _remembered[key] = case
            _user_events.pop(run_id, None)


def remembered_cases(run_id: str) -> list[Case]:
    """The cases remembered for a run (a remote worker remembers the same ones)."""
    return [case for (run, _, _), case in _remembered.items() if run == run_id]


def forget_cases(run_id: str) -> None:
    for key in [k for k in _remembered if k[0] == run_id]:
        del _remembered[key]
    for view in [k for k in list(_views) if k[0] == run_id]:  # a later run of the same id is another run
        _views.pop(view, None)
    _user_events.pop(run_id, None)


def user_event_ids(run_id: str, owner: CaseView) -> Collection[str]:
    """The ids of every event `owner`'s user has in the run's cases (whichever case's episode gave
    them to the memory), and those of `owner`'s own history: what the user's memory may name."""
    users = _user_events.get(run_id)
    if users is None:
        gathered: dict[str, set[str]] = {}
        for case in remembered_cases(run_id):
            ids = gathered.setdefault(case.user_id, set())
            ids.update(e.id for e in case.history)
            if case.persona is not None:
                ids.add(case.persona.as_event().id)
        users = _user_events[run_id] = {user: frozenset(ids) for user, ids in gathered.items()}
    known = users.get(owner.user_id, frozenset())
    own = [e.id for e in owner.history if e.id not in known]
    return known.union(own) if own else known


@lru_cache(maxsize=16)
def _cases(name: str, split: str | None, options_json: str) -> dict[str, Case]:
    import json

    return {c.id: c for c in load_cases(name, split, options=json.loads(options_json))}


def benchmark_cases(ref: BenchmarkRef) -> dict[str, Case]:
    import json

    try:
        return _cases(ref.name, ref.split, json.dumps(ref.options, sort_keys=True))
    except AtelierError as exc:
        raise GraphInputError(f"cannot load benchmark {ref.name!r}: {exc}") from None


def _ref_for(benchmark: str, context: EpisodeContext) -> BenchmarkRef:
    ref = context.benchmark
    return ref if ref is not None and ref.name == benchmark else BenchmarkRef(name=benchmark)


def case_from_input(state: Mapping[str, Any], context: EpisodeContext) -> Case:
    """The case a graph's input names: `case` itself, or `{"benchmark", "case_id"}` (a case the run
    remembered, else loaded from the benchmark)."""
    case = state.get("case")
    if case is not None:
        return case if isinstance(case, Case) else Case.model_validate(case)
    benchmark, case_id = state.get("benchmark") or "sample", state.get("case_id")
    if not case_id:
        raise GraphInputError('give the case: {"benchmark": "sample", "case_id": "q01"} (or a whole case under "case")')
    remembered = _remembered.get((context.run_id, benchmark, case_id))
    if remembered is not None:
        return remembered
    cases = benchmark_cases(_ref_for(benchmark, context))
    if case_id not in cases:
        some = ", ".join(list(cases)[:5])
        raise GraphInputError(f"no case {case_id!r} in benchmark {benchmark!r} ({len(cases)} cases, e.g. {some})")
    return cases[case_id]


_views: LRUCache[tuple[str, str, str, str, str, str | None], CaseView] = LRUCache(maxsize=256)


def setting_of(case: Case, system: SystemSpec) -> str:
    """The setting `system` sees `case` under: its own, else the run's (which `load_cases` gave every case)."""
    return system.setting or case.setting


def system_view(case: Case, system: SystemSpec) -> CaseView:
    """`case` as `system` sees it: under its setting, minus what its ablation hides; held to the
    benchmark contract's 'settings expose what they say' (ContractBroken otherwise: the episode fails)."""
    setting = setting_of(case, system)
    view = case.view(setting, hide=system.hide)
    problem = view_problem(case, view, setting, system.hide)
    if problem is not None:
        raise ContractBroken(SETTINGS, problem, step="view")
    return view


def case_view(state: Mapping[str, Any], context: EpisodeContext) -> CaseView:
    """The system's view: the inline `view`, else the referenced case under the system's setting and
    ablation (`system_view`: held to the benchmark contract's settings clause), and in a control
    episode, the control's context (`control_plan`); with a `query` in the state, that query in
    place of the case's."""
    view = state.get("view")
    if view is not None:
        view = view if isinstance(view, CaseView) else CaseView.model_validate(view)
    else:
        case = case_from_input(state, context)
        hide, control = context.system.hide, context.control
        key = (
            context.run_id,
            case.benchmark,
            case.id,
            setting_of(case, context.system),
            hide.model_dump_json(),
            control.model_dump_json() if control else None,
        )
        view = _views.get(key)
        if view is None:
            view = system_view(case, context.system)
            if control is not None:  # after the settings clause: a control changes the context on purpose
                view = control_plan(case, context).view(view, case, control.kind, hide)
            _views[key] = view
    query = state.get("query")
    if query is not None:
        view = view.model_copy(update={"query": query if isinstance(query, Query) else Query.model_validate(query)})
    return view


def memory_view(state: Mapping[str, Any], context: EpisodeContext) -> CaseView:
    """Whose history the memory reads — the asker's, or with `random_profile` another user's —
    asked the asker's query."""
    view = case_view(state, context)
    donor_id = state.get("profile_case_id")
    if not donor_id:
        return view
    donor = case_from_input({"benchmark": view.benchmark, "case_id": donor_id}, context)
    history = donor.view(view.setting, hide=context.system.hide).history
    return view.model_copy(update={"user_id": donor.user_id, "history": history})


# ----------------------------------------------------------------------------- system options


_options: dict[tuple[int, str], tuple[EpisodeContext, PipelineOptions]] = {}


def options_for(context: EpisodeContext, pipeline: str) -> PipelineOptions:
    """The options of `pipeline` in this context (a graph run alone takes the context's options)."""
    known = _options.get((id(context), pipeline))
    if known is not None and known[0] is context:
        return known[1]
    try:
        options = pipeline_options(pipeline, context.system.pipeline_options)
    except AtelierError as exc:
        raise GraphInputError(str(exc)) from None
    if len(_options) > 4096:
        _options.clear()
    _options[(id(context), pipeline)] = (context, options)
    return options


def _seed(options: PipelineOptions, context: EpisodeContext) -> int:
    return options.seed if options.seed is not None else context.seed


def _other_cases(case: Case, context: EpisodeContext) -> list[Case]:
    pool = benchmark_cases(_ref_for(case.benchmark, context))
    return [c for c in pool.values() if c.user_id != case.user_id]


_plans: LRUCache[tuple[str, int], ControlPlan] = LRUCache(maxsize=8)


def control_plan(case: Case, context: EpisodeContext) -> ControlPlan:
    """The counterfactual controls (benchmarks/controls.py) over every case of `case`'s benchmark,
    drawn with the control's seed: the same in every process that loads the same benchmark."""
    ref = _ref_for(case.benchmark, context)
    seed = context.control.seed if context.control is not None else context.seed
    key = (ref.model_dump_json(), seed)
    plan = _plans.get(key)
    if plan is None:
        plan = _plans[key] = ControlPlan(benchmark_cases(ref).values(), seed)
    return plan


def random_profile_donor(case: Case, context: EpisodeContext, seed: int) -> Case:
    """A case of another user (one per user, drawn with the seed), whose history stands in."""
    donors = sorted({c.user_id: c for c in _other_cases(case, context)}.values(), key=lambda c: c.user_id)
    if not donors:
        raise GraphInputError(f"random_profile: benchmark {case.benchmark!r} has no user other than {case.user_id!r}")
    return random.Random(f"{seed}:{case.id}:random-profile").choice(donors)


def gold_context(case: Case, context: EpisodeContext, noise_ratio: float, seed: int, store: SourceStore) -> GoldContext:
    items = list(dict.fromkeys(c.strip() for c in case.gold.information_claims if c.strip()))
    if not items:
        raise GraphInputError(
            f"gold_context: case {case.id!r} has no gold information (gold.information_claims is empty)"
        )
    noise = round(noise_ratio * len(items))
    if noise:
        unrelated = [
            c
            for c in _other_cases(case, context)
            if c.query.text != case.query.text and (c.task_id is None or c.task_id != case.task_id)
        ]
        pool = sorted({claim for c in unrelated for claim in c.gold.information_claims} - set(items))
        if len(pool) < noise:
            raise GraphInputError(
                f"gold_context: noise_ratio {noise_ratio} needs {noise} items from other users' unrelated cases; "
                f"benchmark {case.benchmark!r} has {len(pool)}"
            )
        rng = random.Random(f"{seed}:{case.id}:gold-noise")
        for position, claim in zip(rng.sample(range(len(items)), noise), rng.sample(pool, noise)):
            items[position] = claim
    sources = [store.gold_source(text, number) for number, text in enumerate(items, start=1)]
    return GoldContext(sources=sources, noise=noise, noise_ratio=noise_ratio)


def system_inputs(case: Case, context: EpisodeContext, pipeline: str, store: SourceStore) -> dict[str, Any]:
    """The state a system starts from: the case reference, and what its options add."""
    options = options_for(context, pipeline)
    update: dict[str, Any] = {"benchmark": case.benchmark, "case_id": case.id}
    if options.random_profile:
        update["profile_case_id"] = random_profile_donor(case, context, _seed(options, context)).id
    if isinstance(options, GoldContextOptions) and options.gold_context:
        update["gold_context"] = gold_context(case, context, options.noise_ratio, _seed(options, context), store)
    return update


def input_meta(state: Mapping[str, Any], context: EpisodeContext) -> dict[str, Any]:
    """What a response's meta records about its inputs (the random profile used, gold noise)."""
    meta: dict[str, Any] = {}
    if state.get("profile_case_id"):
        meta["random_profile"] = {"case_id": state["profile_case_id"], "user_id": memory_view(state, context).user_id}
    gold = state.get("gold_context")
    if gold is not None:
        meta["gold_context"] = {"items": len(gold.sources), "noise": gold.noise, "noise_ratio": gold.noise_ratio}
    return meta
