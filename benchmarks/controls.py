"""Counterfactual controls: what a system is given instead of its user's own context.

A judge that reads the persona rewards a good generic answer too, so a personalization score alone
cannot say how much of it comes from the user. A control answers the same case with another
context and is judged against the case's *own* user and gold, exactly as the real episode is; own
minus control is the personalization effect (`runs.reading.personalization`). The kinds:

- `swapped`: the context of another user of the same benchmark — that user's history and, where
  the setting shows it, persona. Who stands in for whom is a seeded derangement over the
  benchmark's users (`swap_donors`): a permutation with no fixed point that never maps a user to
  one whose context is the same (equal persona facets; users without a persona: equal histories).
- `no_context`: no user context at all (the history the system and its memory see is empty).
- `shuffled_history`: the user's own events, each with the content of an event of the same kind
  of another user (a seeded derangement over every user's events of that kind, so each other
  event is used once); the explicit persona, where the setting shows one, is kept. It asks
  whether the content of the history matters, or only its shape.

Everything here is pure and deterministic: the same cases and seed give the same controls in
every process (the runner records them; an episode on a worker derives them again).
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from functools import cached_property
from typing import Literal, TypeVar, get_args

from atelier.benchmarks.case import Case, CaseView, HistoryEvent, ViewAblation
from atelier.benchmarks.common.errors import ConfigError
from atelier.benchmarks.metrics.leakage import FactIndex

ControlKind = Literal["swapped", "no_context", "shuffled_history"]
CONTROL_KINDS: dict[str, str] = {
    "swapped": "answered with another user's context (history and persona), drawn by a seeded derangement "
    "over the benchmark's users; judged against the case's own user and gold",
    "no_context": "answered with no user context at all; judged against the case's own user and gold",
    "shuffled_history": "answered with the user's own events, each holding the content of another user's "
    "event of the same kind (persona kept); judged against the case's own user and gold",
}
assert set(CONTROL_KINDS) == set(get_args(ControlKind)), "every kind is described"
# A control episode runs under its system's name with this mark and its kind (`direct-full~swapped`):
# memory stores and work folders of its own, so the user's real state never mixes with a control's.
CONTROL_MARK = "~"
_TRIES = 200  # uniform draws before the constructive derangement (needed only when groups are large)

T = TypeVar("T", bound=Hashable)


class NoDerangement(ConfigError):
    """No permutation of the items avoids every item's own group."""


def control_name(system: str, kind: str) -> str:
    """The name a control episode of `system` runs under (its memory store, its budget line)."""
    return f"{system}{CONTROL_MARK}{kind}"


def derangement(items: Sequence[T], group: Mapping[T, Hashable], seed: str, what: str = "item") -> dict[T, T]:
    """A seeded permutation of `items` mapping none to itself nor to an item of its own group.

    One exists exactly when no group holds more than half of the items (Hall's condition for this
    graph); otherwise `NoDerangement` says which group is too large. Uniform draws are tried first;
    when the groups make them unlikely to succeed, the items are laid out group by group (group
    order and order within groups seeded) and each is mapped to the one `m` places on, `m` the
    largest group's size: every group is a run of at most m <= n/2 places, so its images all lie
    outside it."""
    order = list(dict.fromkeys(items))
    n = len(order)
    if n < 2:
        shown = f" ({order[0]})" if order else ""
        raise NoDerangement(f"needs two or more {what}s to exchange, and there is {n}{shown}")
    sizes = Counter(group[item] for item in order)
    largest, m = sizes.most_common(1)[0]
    if 2 * m > n:
        members = [str(item) for item in order if group[item] == largest]
        shown = ", ".join(members[:5]) + (f" and {len(members) - 5} more" if len(members) > 5 else "")
        raise NoDerangement(
            f"{m} of the {n} {what}s are alike ({shown}): more than half, so some {what} would have to be "
            f"exchanged with one alike"
        )
    rng = random.Random(seed)
    for _ in range(_TRIES):
        image = order[:]
        rng.shuffle(image)
        if all(group[a] != group[b] for a, b in zip(order, image)):
            return dict(zip(order, image))
    labels = list(sizes)
    rng.shuffle(labels)
    rank = {label: i for i, label in enumerate(labels)}
    laid = order[:]
    rng.shuffle(laid)
    laid.sort(key=lambda item: rank[group[item]])  # stable: seeded order within each group
    return {laid[i]: laid[(i + m) % n] for i in range(n)}


# ----------------------------------------------------------------------------- swapped


def context_fingerprint(case: Case) -> str:
    """What makes two users' contexts the same: their persona facets (path and value), or for a user
    with no persona, the texts of their history."""
    if case.persona is not None and case.persona.attributes:
        parts = sorted(f"{path}\0{value}" for path, value in case.persona.facets())
        kind = "persona"
    else:
        parts = sorted(event.render() for event in case.history)
        kind = "history"
    return kind + ":" + hashlib.sha256("\x1e".join(parts).encode("utf-8")).hexdigest()


def users_of(cases: Iterable[Case]) -> dict[str, list[Case]]:
    """Each user's cases, users and cases in id order."""
    out: dict[str, list[Case]] = {}
    for case in sorted(cases, key=lambda c: c.id):
        out.setdefault(case.user_id, []).append(case)
    return dict(sorted(out.items()))


def swap_donors(cases: Iterable[Case], seed: int | str) -> dict[str, str]:
    """User id -> the user whose context stands in for theirs (`swapped`): a seeded derangement over
    the users of `cases` (a benchmark's), never between users with the same context. A
    `NoDerangement` names the users when none exists (one user; most users alike)."""
    users = users_of(cases)
    fingerprints = {user: context_fingerprint(mine[0]) for user, mine in users.items()}
    try:
        return derangement(list(users), fingerprints, f"{seed}:swapped", what="user")
    except NoDerangement as exc:
        raise NoDerangement(f"the swapped control {exc}") from None


def donor_case(case: Case, users: Mapping[str, list[Case]], donors: Mapping[str, str]) -> Case:
    """The case whose context answers `case` in the swapped control: of the donor user, the one of
    the same task when there is one (only the user changes), else the donor's first case."""
    donor = donors.get(case.user_id)
    if donor is None:
        raise ConfigError(
            f"swapped control: user {case.user_id!r} of case {case.id!r} is not among the benchmark's users "
            "the derangement was drawn over"
        )
    theirs = users[donor]
    same_task = [c for c in theirs if case.task_id is not None and c.task_id == case.task_id]
    return (same_task or theirs)[0]


# ----------------------------------------------------------------------------- shuffled_history

EventKey = tuple[str, str]  # (user id, event id)


def shuffled_events(cases: Iterable[Case], seed: int | str) -> dict[EventKey, HistoryEvent]:
    """(user id, event id) -> the event that stands in for it (`shuffled_history`): for each kind of
    event, a seeded derangement over every user's events of that kind that never keeps an event
    with its own user; the stand-in keeps the own event's id and time. An explicit persona is not
    shuffled. A `NoDerangement` names the kind that cannot be shuffled."""
    events: dict[EventKey, HistoryEvent] = {}
    for user, mine in users_of(cases).items():
        for case in mine:
            for event in case.history:
                events.setdefault((user, event.id), event)
    by_kind: dict[str, list[EventKey]] = {}
    for key, event in events.items():
        if event.kind != "persona":
            by_kind.setdefault(event.kind, []).append(key)
    out: dict[EventKey, HistoryEvent] = {}
    for kind, keys in sorted(by_kind.items()):
        try:
            image = derangement(keys, {key: key[0] for key in keys}, f"{seed}:shuffled:{kind}", what=f"{kind} event")
        except NoDerangement as exc:
            raise NoDerangement(
                f"the shuffled_history control cannot shuffle the {kind} events across users: it {exc}"
            ) from None
        for own, other in image.items():
            out[own] = events[other].model_copy(update={"id": events[own].id, "timestamp": events[own].timestamp})
    return out


# ----------------------------------------------------------------------------- a benchmark's controls


class ControlPlan:
    """The controls of one benchmark's cases under one seed: each drawn on first use, then kept."""

    def __init__(self, cases: Iterable[Case], seed: int | str) -> None:
        self.cases = list(cases)
        self.users = users_of(self.cases)
        self.seed = seed

    @cached_property
    def donors(self) -> dict[str, str]:
        return swap_donors(self.cases, self.seed)

    @cached_property
    def shuffled(self) -> dict[EventKey, HistoryEvent]:
        return shuffled_events(self.cases, self.seed)

    @cached_property
    def facts(self) -> FactIndex:
        """Every user's specific phrases, for the leak check of a control's answer."""
        return FactIndex(self.cases)

    def check(self, kind: str) -> None:
        """Draw the control now: a `NoDerangement` when this benchmark cannot have it."""
        if kind == "swapped":
            self.donors  # noqa: B018 - drawn (and kept) now, or the reason it cannot be
        elif kind == "shuffled_history":
            self.shuffled  # noqa: B018

    def view(self, view: CaseView, case: Case, kind: str, hide: ViewAblation | None = None) -> CaseView:
        """`view` (the case's own, under the system's setting and ablation) as control `kind` shows it:
        the query and the case's other fields stay; the user and the history change."""
        if kind == "no_context":
            return view.model_copy(update={"history": []})
        if kind == "swapped":
            donor = donor_case(case, self.users, self.donors)
            theirs = donor.view(view.setting, hide=hide)
            return view.model_copy(update={"user_id": donor.user_id, "history": theirs.history})
        if kind == "shuffled_history":
            return view.model_copy(
                update={"history": [self.shuffled.get((case.user_id, e.id), e) for e in view.history]}
            )
        raise ValueError(f"unknown control {kind!r}; valid: {', '.join(CONTROL_KINDS)}")
