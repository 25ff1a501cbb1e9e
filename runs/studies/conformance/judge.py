"""The judge contract (agents/judges/base.py), checked on a judge as a run's judge graph runs it, on
cases of the bundled sample suite given every gold field a judge may need:

- scores inside the declared scale: each judgment of an answer, an empty response and a
  punctuation-only one is a score within the judge's `scale`, or a failure that says why;
- junk output gated and recorded: when the judge's model answers with output that cannot be used —
  JSON that never parses (`scripted?malformed_rate=1`), or schema-valid answers whose every text is
  punctuation — no judgment is a clean score: each fails with its reason or records what degraded;
- failures returned as failed judgments: none of those judgments raised out of the judge (each is
  taken as a run takes it, `contract.returned`: a judge that raises is a failed judgment recorded
  as `judge_raised`, which the two clauses above then read as any failure).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from atelier.agents.judges import contract
from atelier.agents.judges.base import JUDGES, Judge, JudgeEnv, JudgeResult, create_judge
from atelier.agents.models.gateway import Gateway
from atelier.agents.models.settings import ModelSettings
from atelier.agents.response import SystemResponse
from atelier.benchmarks.case import Case, Criterion, RJPair
from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.errors import ConfigError
from atelier.benchmarks.registry import load_cases
from atelier.graphs.context import BenchmarkRef, EpisodeContext, SystemSpec
from atelier.runs.studies.conformance.clauses import Clause, Report, broken, checked, held, not_applicable

BENCHMARK = "sample"
CASES = ("q01", "q05")
MALFORMED = "scripted?malformed_rate=1"
JUNK_TEXT = ","

T = TypeVar("T", bound=BaseModel)


def judge_config(ref: str, options: dict[str, Any]) -> dict[str, Any]:
    model = JUDGES.get(ref).config_model
    try:
        return model.model_validate({**options, "name": ref}).model_dump(mode="json")
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(p) for p in error["loc"]) or "(config)"
        fields = ", ".join(f for f in model.model_fields if f != "name")
        raise ConfigError(f"--option {key}: {error['msg']} (judge {ref!r} options: {fields})") from None


def with_every_gold(case: Case) -> Case:
    """`case` with what any judge may ask of a case filled in where it is missing."""
    gold = case.gold.model_copy(deep=True)
    need = gold.information_need or case.query.text
    gold.information_need = need
    gold.answer = gold.answer or "A short, practical plan that fits the user's stated constraints."
    gold.adversarial_answer = gold.adversarial_answer or "There is no way to do this."
    gold.preference = gold.preference or "I prefer short answers with bullet points."
    gold.preference_explanation = gold.preference_explanation or "A long essay would ignore the stated preference."
    if not gold.rj_pairs:
        gold.rj_pairs = [
            RJPair(response="A generic answer.", score=2, feedback="Too generic for me.", criterion=c)
            for c in ("need_alignment", "content_depth", "tone", "explanation_style")
        ]
    if not gold.criteria:
        gold.criteria = [Criterion(dimension="comprehensiveness", criterion="Covers the need", weight=1.0)]
    meta = {**case.meta, "category": case.meta.get("category", 1)}
    return case.model_copy(update={"gold": gold, "meta": meta})


def responses(case: Case) -> dict[str, SystemResponse]:
    answer = " ".join(case.gold.information_claims[:3]) or f"An answer to: {case.query.text}"
    return {
        "an answer": SystemResponse(text=f"Here is what fits you. {answer}"),
        "an empty response": SystemResponse(text=""),
        "a punctuation-only response": SystemResponse(text=" ;, ... ,"),
    }


class JunkGateway(Gateway):
    """A gateway whose structured answers keep their schema but have every text replaced by
    punctuation (where the schema allows it): the degenerate output of a weak model."""

    def __init__(self, inner: Gateway) -> None:
        super().__init__(inner.roles, cache=None, ledger=inner.ledger)
        self.junked = 0

    async def structured(self, role: str, messages: list[dict[str, Any]], schema: type[T]) -> T:
        answer = await super().structured(role, messages, schema)
        data = answer.model_dump(mode="json")
        for path in _text_leaves(data):
            trial = _replaced(data, path, JUNK_TEXT)
            try:
                schema.model_validate(trial)
            except ValidationError:
                continue
            data = trial
            self.junked += 1
        return schema.model_validate(data)


def _text_leaves(value: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(value, str):
        return [path]
    if isinstance(value, dict):
        return [p for key, item in value.items() for p in _text_leaves(item, path + (key,))]
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in _text_leaves(item, path + (i,))]
    return []


def _replaced(value: Any, path: tuple, text: str) -> Any:
    if not path:
        return text
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replaced(value[head], rest, text)}
    items = list(value)
    items[head] = _replaced(items[head], rest, text)
    return items


class JudgeKit:
    def __init__(self, ref: str, options: dict[str, Any], workdir: Path) -> None:
        self.ref = ref
        self.config = judge_config(ref, options)
        self.judge: Judge = create_judge(self.config)
        self.workdir = workdir
        self.raised: list[tuple[str, str]] = []  # (what was judged, what the judge raised)

    def context(self, model: str, tag: str) -> EpisodeContext:
        run = self.workdir / f"run-{tag}"
        no_follow.make_folders(run)
        roles = {role: ModelSettings(model=model) for role in {"judge", *self.judge.roles}}
        return EpisodeContext(
            run_id=f"check-judge-{tag}-{os.getpid()}-{id(self)}",
            run_dir=str(run),
            cache_dir=str(self.workdir / f"cache-{tag}"),
            models={"system": ModelSettings(), "user_sim": ModelSettings(), **roles},
            system=SystemSpec(name="checked", memory={"backend": "none"}),
            judges=[self.config],
            benchmark=BenchmarkRef(name=BENCHMARK),
        )

    async def run(self) -> Report:
        report = Report(contract.PROTOCOL, self.ref)
        cases = [with_every_gold(c) for c in load_cases(BENCHMARK) if c.id in CASES]
        lacking = sorted({what for c in cases for what in self.judge.missing(c)})
        if lacking:
            why = f"the kit's cases lack {', '.join(lacking)}"
            report.clauses += [
                not_applicable(clause.name, why) for clause in (contract.SCALE, contract.JUNK, contract.RETURNED)
            ]
            return report
        report.clauses.append(await checked(contract.SCALE.name, lambda: self.scale(cases)))
        report.clauses.append(await checked(contract.JUNK.name, lambda: self.junk(cases)))
        report.clauses.append(self.returned())
        return report

    async def judgments(
        self, cases: list[Case], model: str, tag: str, junk: bool = False
    ) -> tuple[list[tuple[str, JudgeResult, int]], int]:
        """Every (what was judged, its judgment, the model calls it made) on `cases` under the judge
        role's `model`; with `junk`, through a JunkGateway (and how many texts it emptied)."""
        from atelier.agents.models.ledger import capture_calls
        from atelier.graphs.inputs import forget_cases, remember_cases
        from atelier.graphs.judge import judge_env
        from atelier.graphs.resources import release, resources_for

        context = self.context(model, tag)
        remember_cases(context.run_id, cases)
        out: list[tuple[str, JudgeResult, int]] = []
        junked = 0
        try:
            resources = resources_for(context)
            judge = resources.judges[0]
            env: JudgeEnv = judge_env(resources)
            gateway = JunkGateway(resources.gateway) if junk else None
            if gateway is not None:
                env = replace(env, gateway=gateway)
            for case in cases:
                answers = responses(case)
                first = answers["an answer"]
                for what, response in answers.items():
                    with capture_calls() as calls:
                        if judge.comparative:
                            judgment = judge.judge_pair(case, response, first, env)  # type: ignore[attr-defined]
                        else:
                            judgment = judge.judge(case, response, env)
                        result = await contract.returned(judge, judgment)
                    out.append((f"case {case.id}, {what}", result, sum(c.is_model_call for c in calls)))
                    if any(d.kind == contract.RETURNED.kind for d in result.degraded):
                        said = (result.error or "").removeprefix(f"{contract.RETURNED.label} broken: ")
                        self.raised.append((f"case {case.id}, {what}", said))
            junked = gateway.junked if gateway is not None else 0
        finally:
            await release(context)
            forget_cases(context.run_id)
        return out, junked

    async def scale(self, cases: list[Case]) -> Clause:
        declared = self.judge.scale_problem()
        if declared is not None:
            return broken(contract.SCALE.name, declared)
        results, _ = await self.judgments(cases, "scripted", "scale")
        problems, scores, failed = [], [], 0
        for what, result, _ in results:
            off = contract.score_problems(result, self.judge.scale)
            if result.failed:
                failed += 1
                if not (result.error or "").strip():
                    problems.append(f"{what}: failed with no reason")
            elif off:
                problems.append(f"{what}: {'; '.join(off)}")
            elif result.score is None:
                problems.append(f"{what}: neither a score nor a failure")
            else:
                scores.append(result.score)
        if problems:
            return broken(contract.SCALE.name, "; ".join(problems[:4]))
        spread = f"scores {min(scores):.3g}–{max(scores):.3g}" if scores else "no score"
        return held(
            contract.SCALE.name,
            f"{len(results)} judgments: {spread} within {self.judge.scale}"
            + (f", {failed} failed with their reason" if failed else ""),
        )

    def returned(self) -> Clause:
        """Over every judgment the other clauses asked for: none raised out of the judge."""
        if self.raised:
            what, detail = self.raised[0]
            return broken(contract.RETURNED.name, f"{len(self.raised)} judgments raised; {what}: {detail[:300]}")
        return held(contract.RETURNED.name, "every judgment came back as a judgment (or a failure with its reason)")

    async def junk(self, cases: list[Case]) -> Clause:
        checks = []
        malformed, _ = await self.judgments(cases[:1], MALFORMED, "malformed")
        checks.append(("JSON that never parses", malformed))
        degenerate, junked = await self.judgments(cases[:1], "scripted", "degenerate", junk=True)
        if junked:
            checks.append(("every text punctuation", degenerate))
        problems, summary = [], []
        for how, everything in checks:
            results = [(what, r) for what, r, calls in everything if calls]  # judgments its model took part in
            if not results:
                summary.append(f"{how}: no judgment asked the model")
                continue
            clean = [what for what, r in results if not r.failed and not r.degraded]
            if clean:
                problems.append(f"{how}: {len(clean)} of {len(results)} judgments scored as if sound ({clean[0]})")
            else:
                failed = sum(r.failed for _, r in results)
                summary.append(f"{how}: {failed} failed with the reason, {len(results) - failed} recorded degraded")
        if problems:
            return broken(contract.JUNK.name, "; ".join(problems))
        if not junked:
            summary.append("its outputs hold no text to empty (only JSON that never parses applies)")
        return held(contract.JUNK.name, "; ".join(summary))
