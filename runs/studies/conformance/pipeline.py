"""The pipeline contract (graphs/contract.py: the clause every episode holds its pipeline to, and
these), checked on a pipeline run as a run runs it — inside the episode graph, checkpointed in a run folder's SQLite database, on cases of the
bundled sample suite, the scripted model and the sandbox web:

- the response schema: the graph returns `{"response": SystemResponse}` with some text, and nothing
  else of the episode's state (the episode graph refuses it otherwise: graphs/contract.py `output_problem`);
- citations only to sources read: every citation is a page this run fetched or found or a text in
  the run's source store (by its sha256) — what every run holds each response to (graphs/contract.py
  `unread_citations`) — and, here only, every `[n]` marker names one of them;
- checkpointable state: every checkpoint is written by a run's serializer and read back with each
  value's type (a type the serializer does not know comes back as a dict after a resume);
- a clean interrupt/resume where it asks the user: a graph that interrupts asks with a
  `ClarifyRequest`; a resume it cannot use is asked again, the typed `ClarifyAnswers` finish it.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
from pathlib import Path
from typing import Any, cast

from atelier.agents.clarify import ClarifyAnswers, ClarifyRequest
from atelier.agents.response import SystemResponse
from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.contract import ContractBroken
from atelier.benchmarks.common.errors import AtelierError
from atelier.benchmarks.registry import load_cases
from atelier.graphs import contract
from atelier.graphs.context import BenchmarkRef, EpisodeContext, SystemSpec
from atelier.graphs.pipelines import PIPELINES, pipeline_options
from atelier.runs.studies.conformance.clauses import Clause, Report, broken, checked, held, not_applicable, verdict
from atelier.tools.config import WebConfig

BENCHMARK = "sample"
CASES = ("q01", "q05")
MARKER = re.compile(r"\[(\d+)\]")


class _TypeWarnings(logging.Handler):
    """LangGraph's log lines for a checkpoint value of a type its serializer does not know."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "unregistered type" in message or "Blocked deserialization" in message:
            self.lines.append(message)


class PipelineKit:
    def __init__(self, ref: str, options: dict[str, Any], workdir: Path) -> None:
        self.ref = ref
        self.spec = PIPELINES.get(ref)
        self.options = pipeline_options(ref, options)  # a bad option: ConfigError naming it
        self.workdir = workdir
        self.system = SystemSpec(
            name="checked",
            pipeline=ref,
            memory={"backend": "full"},
            pipeline_options=self.options.model_dump(mode="json"),
        )
        self.responses: dict[str, Any] = {}
        self.web: Any = None  # the run's web, once a case opened it
        self.unwritable: list[str] = []  # episodes failed on a state value no checkpoint can hold

    def context(self, answerer: str) -> EpisodeContext:
        run = self.workdir / "run"
        return EpisodeContext(
            run_id=f"check-pipeline-{os.getpid()}-{id(self)}",
            run_dir=str(run),
            cache_dir=str(self.workdir / "cache"),
            system=self.system,
            judges=[],
            web=WebConfig(cache_dir=self.workdir / "web"),
            benchmark=BenchmarkRef(name=BENCHMARK),
            clarify_answerer=answerer,
        )

    async def run(self) -> Report:
        from atelier.graphs.episode import episode_graph_for
        from atelier.graphs.inputs import forget_cases, remember_cases
        from atelier.graphs.persistence import run_checkpointer
        from atelier.graphs.resources import release

        report = Report(contract.PROTOCOL, self.ref)
        no_follow.make_folders(self.workdir / "run")
        cases = {c.id: c for c in load_cases(BENCHMARK) if c.id in CASES}
        warnings = _TypeWarnings()
        serde_log = logging.getLogger("langgraph.checkpoint.serde.jsonplus")
        serde_log.addHandler(warnings)
        context = self.context("none")
        remember_cases(context.run_id, list(cases.values()))
        try:
            async with run_checkpointer(self.workdir / "run") as saver:
                try:
                    graph = episode_graph_for([self.system], checkpointer=saver)
                except contract.PipelineOutputError as exc:  # it would return more than its response
                    report.clauses.append(broken(contract.RESPONSE.name, str(exc)))
                    report.clauses += [
                        not_applicable(c.name, "the episode graph refuses the pipeline (the response schema)")
                        for c in (contract.CITATIONS, contract.CHECKPOINTS, contract.INTERRUPT)
                    ]
                    return report
                report.clauses.append(
                    await checked(contract.RESPONSE.name, lambda: self.schema(graph, context, list(cases)))
                )
                report.clauses.append(await checked(contract.CITATIONS.name, lambda: self.citations(context)))
                clarify = self.context("person")
                try:
                    interrupt = await checked(contract.INTERRUPT.name, lambda: self.interrupt(graph, clarify))
                finally:
                    await release(clarify)
            report.clauses.append(await checked(contract.CHECKPOINTS.name, lambda: self.checkpoints(warnings.lines)))
            report.clauses.append(interrupt)
        finally:
            serde_log.removeHandler(warnings)
            await release(context)
            forget_cases(context.run_id)
        return report

    # ------------------------------------------------------------------ clauses

    async def schema(self, graph: Any, context: EpisodeContext, case_ids: list[str]) -> Clause:
        from atelier.graphs.resources import resources_for

        problems, seen = [], []
        for case_id in case_ids:
            config = {"configurable": {"thread_id": f"{case_id}::checked"}}
            try:  # the episode holds the pipeline to the clause as it ends, as in a run
                out = await _ended(graph, {"benchmark": BENCHMARK, "case_id": case_id}, config, context)
                problem = contract.response_problem(out, self.ref)
            except ContractBroken as exc:
                if exc.clause is contract.CHECKPOINTS:  # the episode failed as a run's would: that clause says it
                    self.unwritable.append(f"case {case_id}: {exc.detail}")
                    continue
                if exc.clause is not contract.RESPONSE:
                    raise
                out, problem = {}, exc.detail
            response = out.get("response")
            self.responses[case_id] = response
            if problem is not None:
                problems.append(f"case {case_id}: {problem}")
            elif isinstance(response, SystemResponse) and not response.text.strip():
                problems.append(f"case {case_id}: the response's text is empty")
            elif isinstance(response, SystemResponse):
                seen.append(f"{case_id}: {len(response.text)} chars, {len(response.citations)} citations")
        self.web = resources_for(context).opened_web()
        if not problems and not seen and self.unwritable:
            return not_applicable(
                contract.RESPONSE.name, f"no episode reached its end ({contract.CHECKPOINTS.name} is broken)"
            )
        if problems:
            return broken(contract.RESPONSE.name, "; ".join(problems))
        return held(contract.RESPONSE.name, f"SystemResponse with text on {len(seen)} cases ({'; '.join(seen)})")

    async def citations(self, context: EpisodeContext) -> Clause:
        from atelier.graphs.sources import SourceStore

        responses = {k: r for k, r in self.responses.items() if isinstance(r, SystemResponse)}
        if not responses:
            return not_applicable(contract.CITATIONS.name, "no response to check (the response schema is broken)")
        store = SourceStore.for_run(context.run_dir)
        web = self.web
        problems, count = [], 0
        for case_id, response in responses.items():
            numbers = {c.number for c in response.citations if c.number is not None}
            count += len(response.citations)
            # what a run holds every response to (graphs/contract.py), on the run's own store and web
            unread = contract.unread_citations(response, store.has, web.saw if web is not None else lambda url: False)
            problems += [f"case {case_id}: {line}" for line in unread]
            if numbers:
                body = response.text.split("## Sources")[0]
                stray = sorted({int(n) for n in MARKER.findall(body)} - numbers)
                if stray:
                    problems.append(f"case {case_id}: markers {', '.join(f'[{n}]' for n in stray)} name no citation")
        if problems:
            return broken(contract.CITATIONS.name, "; ".join(problems[:4]))
        if not count:
            return held(
                contract.CITATIONS.name, f"no citation in {len(responses)} responses (nothing cited, nothing to check)"
            )
        return held(
            contract.CITATIONS.name,
            f"{count} citations, each a page this run fetched or found or a text in its source store",
        )

    async def checkpoints(self, warnings: list[str]) -> Clause:
        from atelier.graphs.episode import episode_graph_for
        from atelier.graphs.persistence import InlineSqliteSaver, RunSerializer

        if self.unwritable:  # as a run finds it: the episode fails as its step is checkpointed
            return broken(contract.CHECKPOINTS.name, "; ".join(self.unwritable[:2]))
        path = self.workdir / "run" / "checkpoints.sqlite"
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        try:
            saver = InlineSqliteSaver(conn, serde=RunSerializer(conn))
            saver.is_setup = True
            graph = episode_graph_for([self.system], checkpointer=saver)
            count, problems = 0, []
            for case_id, returned in self.responses.items():
                config = {"configurable": {"thread_id": f"{case_id}::checked"}}
                # every checkpoint of the thread, the pipeline's own (a subgraph's namespace) included,
                # with its pending writes: each value deserialized as a resumed run would
                count += len(list(saver.list(cast(Any, config))))
                stored = (await graph.aget_state(config)).values.get("response")
                if isinstance(returned, SystemResponse) and stored != returned:
                    problems.append(
                        f"case {case_id}: the response read back from the checkpoint is a {type(stored).__name__}"
                        + (", not equal to the one returned" if isinstance(stored, SystemResponse) else "")
                    )
        finally:
            conn.close()
        if warnings:
            problems.insert(
                0,
                f"{len(warnings)} checkpoint values of a type the run's serializer does not know (they come back as "
                f"dicts after a resume; declare them: the factory's `state_types`): {warnings[0][:200]}",
            )
        if not count:
            problems.append("no checkpoint was written")
        if problems:
            return broken(contract.CHECKPOINTS.name, "; ".join(problems))
        return held(
            contract.CHECKPOINTS.name,
            f"{count} checkpoints written by a run's serializer to SQLite and read back, every value with its type",
        )

    async def interrupt(self, graph: Any, context: EpisodeContext) -> Clause:
        from langgraph.types import Command

        config = {"configurable": {"thread_id": f"{CASES[0]}::checked-clarify"}}
        try:
            out = await _ended(graph, {"benchmark": BENCHMARK, "case_id": CASES[0]}, config, context)
        except ContractBroken as exc:
            if exc.clause is contract.CHECKPOINTS:
                return not_applicable(
                    contract.INTERRUPT.name, f"it never reached an end ({contract.CHECKPOINTS.name} is broken)"
                )
            if exc.clause is not contract.RESPONSE:
                raise
            return not_applicable(
                contract.INTERRUPT.name,
                f"it never asked the user; it answered with no usable response ({contract.RESPONSE.name})",
            )
        pending = out.get("__interrupt__")
        if not pending:
            return not_applicable(
                contract.INTERRUPT.name,
                f"it never asked the user (case {CASES[0]}, a person to answer; options as given)",
            )
        request = pending[0].value
        if not isinstance(request, ClarifyRequest):
            return broken(
                contract.INTERRUPT.name,
                f"it interrupted with a {type(request).__name__}, not a ClarifyRequest: the simulated user and "
                "Studio answer a ClarifyRequest with ClarifyAnswers",
            )
        try:
            again = await _ended(graph, Command(resume={"answer": "not the resume's shape"}), config, context)
        except AtelierError as exc:
            return broken(contract.INTERRUPT.name, f"a resume it cannot use ended the episode: {exc}")
        repeated = again.get("__interrupt__")
        if not repeated or not isinstance(repeated[0].value, ClarifyRequest):
            return broken(
                contract.INTERRUPT.name,
                "a resume it cannot use was taken as an answer (it should ask again, saying what was wrong)",
            )
        answers = ClarifyAnswers(answers=["I don't mind; keep it short."] * len(request.questions))
        done = await _ended(graph, Command(resume=answers), config, context)
        response = done.get("response")
        ok = isinstance(response, SystemResponse) and not done.get("__interrupt__")
        return verdict(
            contract.INTERRUPT.name,
            ok,
            f"asked {len(request.questions)} question(s) with a ClarifyRequest; an unusable resume was asked again; "
            + (
                "the typed ClarifyAnswers resumed it to a response"
                if ok
                else "the typed ClarifyAnswers did not finish it"
            ),
        )


async def _ended(graph: Any, value: Any, config: dict[str, Any], context: EpisodeContext) -> dict[str, Any]:
    """The episode's end state, as `graph.ainvoke` gives it; an episode that ended on a citation to
    nothing read gives the state it ended with (its response): the citations clause reports it."""
    try:
        return await graph.ainvoke(value, config, context=context)
    except ContractBroken as exc:
        if exc.clause is not contract.CITATIONS:
            raise
        return dict(graph.get_state(config).values)
