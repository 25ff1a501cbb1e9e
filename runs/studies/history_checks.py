"""How well `simulate check` finds what it looks for, measured on crafted histories with their labels.

`agents/user_sim/history_checks.jsonl` holds items written for PDR personas (User1, User8, User17,
User24), one a line, each labelled with what a reviewer would say of it: its `kind` — `consistent`,
`harmless` (numbers, places and jobs that say nothing against the persona: "I was born in
October", "my cousin works as a nurse"), `paraphrase` (a persona value in other words),
`verbatim` (a value word for word), `edited` (a value copied with a word put in here and there),
`contradiction-place`, `-age`, `-profession` (another city of the same province, an age the
persona is not, a job it does not hold), `duplicate` (an earlier item said again in other words)
— and the three verdicts it should get: `contradiction`, `verbatim`, `duplicate_of`.

`measure_checks` puts each persona's items into one history (notes, in file order) and runs the
checks `simulate check` runs on it — the offline rules, the copy check, the near-duplicate check
with the local sentence embedder — and, given a checker model, the model judge of contradictions
(`--judge-model`). Per check it reports what it flagged of the items that should and should not
be flagged: recall on the first, false positives on the second, for the items the rules were
tuned on (`set: tuning`: they flag none of its consistent, harmless or paraphrased items) and,
apart, for items written after the rules and never used to tune them (`set: held-out`).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from atelier.agents.models.embeddings import get_embedder
from atelier.agents.models.gateway import Gateway, ModelCallError, answers_whole
from atelier.agents.models.settings import ModelSettings
from atelier.agents.user_sim.contradiction import judge_contradictions
from atelier.agents.user_sim.protocol import check_protocol, person_text, record_items
from atelier.benchmarks.common.errors import DataError
from atelier.benchmarks.common.json_input import parse_json, validation_error
from atelier.benchmarks.loaders.pdr import ContextMemory, ContextRecord
from atelier.runs.studies.simulate_history import pdr_personas

LABELLED = Path(__file__).resolve().parents[2] / "agents" / "user_sim" / "history_checks.jsonl"
EMBEDDER = "local"  # the MiniLM the near-duplicate check uses (`agents.models.embeddings`)


class LabelledItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user: str
    id: str
    kind: str
    text: str = Field(min_length=1)
    contradiction: bool
    verbatim: bool
    duplicate_of: str | None = None
    set: Literal["tuning", "held-out"] = Field(
        description="tuning: the rules were written with it in view; held-out: written after them, never used to tune"
    )


def read_labelled(path: Path = LABELLED) -> list[LabelledItem]:
    """The labelled items of `path`; a line that is not one is named (file and line)."""
    items = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            items.append(LabelledItem.model_validate(parse_json(line, file=path, line=number)))
        except ValidationError as exc:
            raise validation_error(exc, file=path, line=number, prefix="not a labelled item: ") from None
    return items


def history_of(user: str, items: list[LabelledItem]) -> ContextRecord:
    """A persona's labelled items as one history of notes, in file order."""
    notes = [ContextMemory(id=item.id, title="", content=item.text) for item in items if item.user == user]
    return ContextRecord(userid=user, memories=notes)


def _flags(found: set[str], items: list[LabelledItem], expected: dict[str, bool]) -> dict[str, Any]:
    """What a check flagged: per kind (flagged of n), recall over the items it should flag and the
    false positives among those it should not."""
    by_kind: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for item in items:
        by_kind[item.kind][0] += item.id in found
        by_kind[item.kind][1] += 1
    positives = [item for item in items if expected[item.id]]
    negatives = [item for item in items if not expected[item.id]]
    caught = sum(item.id in found for item in positives)
    wrong = sorted(item.id for item in negatives if item.id in found)
    return {
        "recall": round(caught / len(positives), 4) if positives else None,
        "caught": caught,
        "should_flag": len(positives),
        "false_positives": wrong,
        "should_not_flag": len(negatives),
        "by_kind": {kind: {"flagged": f, "of": n} for kind, (f, n) in sorted(by_kind.items())},
    }


def _contradicted(protocol: Any) -> set[str]:
    return {
        i for i, problems in protocol.content_failures.items() if any(p.startswith("contradiction") for p in problems)
    }


def _duplicated(protocol: Any) -> set[str]:
    return {i for i, problems in protocol.content_failures.items() if any(p.startswith("duplicate") for p in problems)}


async def measure_checks(
    path: Path = LABELLED, judge: ModelSettings | None = None, language: str = "en"
) -> dict[str, Any]:
    """The checks' figures on the labelled set (module docstring); `judge`: also the model judge's."""
    items = read_labelled(path)
    personas = pdr_personas(language)
    unknown = sorted({item.user for item in items} - set(personas))
    if unknown:
        raise DataError(f"user {unknown[0]!r} has no {language} persona", file=path, field="user")
    embedder = get_embedder(EMBEDDER)
    contradicted: set[str] = set()
    verbatim: set[str] = set()
    duplicated: set[str] = set()
    judged: set[str] = set()
    failed: dict[str, str] = {}  # user -> why the model judge could not judge their items
    gateway = Gateway({"history_checker": judge}) if judge is not None else None
    try:
        for user in dict.fromkeys(item.user for item in items):
            record = history_of(user, items)
            protocol = check_protocol(personas[user], record, embed=embedder.embed)
            contradicted |= _contradicted(protocol)
            duplicated |= _duplicated(protocol)
            verbatim |= set(protocol.verbatim_items)
            if gateway is not None:
                said = [(i, person_text(item)) for i, item in record_items(record)]
                try:
                    with answers_whole(gateway, "history_checker"):  # a cut verdict is no measurement
                        judged |= set(await judge_contradictions(gateway, "history_checker", personas[user], said))
                except ModelCallError as exc:  # its items count as not flagged, and the failure is said
                    failed[user] = str(exc)
    finally:
        if gateway is not None:
            await gateway.aclose()
    checks = {
        "offline_contradictions": (contradicted, lambda i: i.contradiction),
        "copies": (verbatim, lambda i: i.verbatim),
        "near_duplicates": (duplicated, lambda i: i.duplicate_of is not None),
    }
    if judge is not None:
        checks["judge_contradictions"] = (judged, lambda i: i.contradiction)
    figures: dict[str, Any] = {"labelled": str(path), "items": len(items), "embedder": embedder.name}
    for part in ("tuning", "held-out"):
        chosen = [i for i in items if i.set == part]
        figures[part] = {
            name: _flags(found, chosen, {i.id: truth(i) for i in chosen}) for name, (found, truth) in checks.items()
        }
    if judge is not None:
        figures["judge"] = {"model": judge.model, "dry_run": judge.is_scripted, "failed": failed}
    return figures


def run_measure_checks(path: Path = LABELLED, judge: ModelSettings | None = None) -> dict[str, Any]:
    return asyncio.run(measure_checks(path, judge))
