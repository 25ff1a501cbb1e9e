"""The benchmark protocol's contract (benchmarks/registry.py, benchmarks/case.py), clause by clause.

What a run holds every case source to — a shipped loader, a JSON Lines file, a researcher's own
loader — and `atelier check benchmark` checks on a loader:

- cases in the Case schema: each history's event ids unique, none the id its explicit persona takes
  in the persona settings (case ids are checked as cases load);
- one user's events the same in every case: an event id of a user names one event, whatever case
  it comes with (else which text a memory keeps depends on which case it ingested first);
- settings expose what they say: the setting a recipe asks for is the cases' setting (stamped by
  `load_cases` on every case, whatever its loader wrote), and each system's view shows what it
  says — `task_only` no history, `persona` only the explicit persona, `persona+context` the persona
  first; a persona setting on a case with no persona is refused, not silently left out;
- the limit respected, loading repeatable (`atelier check` only).

The first three are checked on the cases a run loads (a `DataError` naming the clause, the cases
and the event: nothing starts), and the views on every episode (`setting_not_applied`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from atelier.benchmarks.case import Case, CaseView, ExplicitPersona, HistoryEvent, ViewAblation
from atelier.benchmarks.common.contract import ContractClause
from atelier.benchmarks.common.errors import DataError

PROTOCOL = "benchmark"
SCHEMA = ContractClause(PROTOCOL, "cases in the Case schema")
USER_EVENTS = ContractClause(PROTOCOL, "one user's events the same in every case")
SETTINGS = ContractClause(PROTOCOL, "settings expose what they say", "setting_not_applied")
LIMIT = ContractClause(PROTOCOL, "the limit respected")
REPEATABLE = ContractClause(PROTOCOL, "loading is repeatable")

PERSONA_SETTINGS = ("persona", "persona+context")


def with_setting(cases: Sequence[Case], setting: str) -> list[Case]:
    """`cases` with `setting` as their setting: what the recipe asked for is what every case says,
    whichever loader made it (a loader that never copies `request.setting` cannot bypass it)."""
    return [case if case.setting == setting else case.model_copy(update={"setting": setting}) for case in cases]


def view_problem(case: Case, view: CaseView, setting: str, hide: ViewAblation | None = None) -> str | None:
    """What `view` (a system's view of `case` under `setting`, minus `hide`) shows that its setting
    does not say; None when it shows what it says."""
    if view.setting != setting:
        return f"case {case.id}: the system's view says setting {view.setting!r}, the run asked for {setting!r}"
    if setting == "task_only" and view.history:
        return f"case {case.id}: setting task_only shows {len(view.history)} history events"
    if setting not in PERSONA_SETTINGS:
        return None
    personas = [i for i, e in enumerate(view.history) if isinstance(e, ExplicitPersona)]
    if setting == "persona" and len(personas) != len(view.history):
        return (
            f"case {case.id}: setting persona shows {len(view.history) - len(personas)} events other than the persona"
        )
    hidden = hide is not None and ("persona" in hide.history_kinds or bool(hide.facets))
    if case.persona is not None and case.persona.attributes and not personas and not hidden:
        return f"case {case.id}: setting {setting} shows no persona, though the case has one"
    if personas and personas[0] != 0:
        return f"case {case.id}: setting {setting} shows the persona after {personas[0]} other events, not first"
    return None


def setting_problems(cases: Iterable[Case], setting: str) -> list[str]:
    """Cases `setting` cannot be applied to: a persona setting on a case without a persona."""
    if setting not in PERSONA_SETTINGS:
        return []
    lacking = [c.id for c in cases if c.persona is None or not c.persona.attributes]
    if not lacking:
        return []
    return [
        f"setting {setting!r} gives each system the user's explicit persona, but {len(lacking)} case(s) have none "
        f"(the `persona` field), e.g. {', '.join(lacking[:3])}"
    ]


def history_problems(cases: Iterable[Case]) -> list[str]:
    """A case's explicit persona of another user, event ids repeated within a case's history (or
    taking the id of its explicit persona), and a
    user's event id naming different events in two cases (the first such pair, naming both cases
    and the event)."""
    problems: list[str] = []
    first: dict[tuple[str, str], tuple[HistoryEvent, str]] = {}
    conflicts = 0
    for case in cases:
        ids: set[str] = set()
        persona_id = case.persona.as_event().id if case.persona is not None else None
        if case.persona is not None and case.persona.user_id != case.user_id:
            problems.append(
                f"{SCHEMA.name}: case {case.id}: field persona.user_id is {case.persona.user_id!r}, not the case's "
                f"user {case.user_id!r} (a memory would hold another user's persona as this user's)"
            )
        for event in case.history:
            if event.id in ids:
                problems.append(f"{SCHEMA.name}: case {case.id}: history event id {event.id!r} is repeated")
                break
            if event.id == persona_id and not isinstance(event, ExplicitPersona):
                problems.append(
                    f"{SCHEMA.name}: case {case.id}: history event id {event.id!r} is the id the persona settings give "
                    "the case's explicit persona (a memory would keep only one of the two): give the event another id"
                )
                break
            ids.add(event.id)
            seen = first.setdefault((case.user_id, event.id), (event, case.id))
            if seen[0] is not event and seen[0] != event:
                conflicts += 1
                if conflicts == 1:
                    before, now = told_apart(seen[0], event)
                    problems.append(
                        f"{USER_EVENTS.name}: the event {event.id!r} of user {case.user_id!r} is {before} in case "
                        f"{seen[1]} but {now} in case {case.id} (a memory would keep whichever case it "
                        "ingested first): give each version its own id"
                    )
    if conflicts > 1:
        problems[-1] += f" ({conflicts} such events in all)"
    return problems


def told_apart(one: HistoryEvent, other: HistoryEvent) -> tuple[str, str]:
    """Two versions of an event as a reader tells them apart: their texts from a little before the
    first difference, else (the same text) the fields that differ."""
    texts = [" ".join(e.render().split()) for e in (one, other)]
    if texts[0] != texts[1]:
        at = next((i for i, (a, b) in enumerate(zip(*texts)) if a != b), min(map(len, texts)))
        start = texts[0].rfind(" ", 0, max(0, at - 20)) + 1  # from a word's start
        cut = [("…" if start else "") + t[start : start + 60] + ("…" if len(t) > start + 60 else "") for t in texts]
        return repr(cut[0]), repr(cut[1])
    dumps = [e.model_dump(mode="json") for e in (one, other)]
    fields = [k for k in dict.fromkeys([*dumps[0], *dumps[1]]) if dumps[0].get(k) != dumps[1].get(k)]
    said = ["; ".join(f"{k} {d.get(k)!r}" for k in fields) for d in dumps]
    return said[0][:120], said[1][:120]


def check_cases(cases: Sequence[Case], settings: Iterable[str], where: str, *, histories: bool = True) -> None:
    """The clauses checked on loaded cases (`histories`: their histories too), for each setting a
    system sees them under: a DataError naming `where` (the benchmark), the clause, the cases and
    the event; nothing starts."""
    problems = history_problems(cases) if histories else []
    for setting in dict.fromkeys(settings):
        problems += [f"{SETTINGS.name}: {p}" for p in setting_problems(cases, setting)]
    if problems:
        raise DataError(f"{where}: the benchmark contract is broken: " + "; ".join(problems[:4]))
