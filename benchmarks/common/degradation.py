"""What degraded in an episode: each step that went on with less than it should have had.

A degradation is not a failure. The episode finished and was scored, but some step fell back: a
model answer that never fit and was replaced, a search or a page that could not be had, a memory
budget that cut history, a cited number that named no source read, a source a fact-checker could
not read, a judge output gated as degenerate. Each is recorded where it happens — in the memory's
`UserContext`, the system's `SystemResponse`, a judge's `JudgeResult` — and a run's result line,
summary, report, closing lines, `compare` and exit code carry them. A score computed on degraded
input is still shown, and marked.

`[run] tolerate = ["kind", ...]` names the kinds a researcher accepts: still reported, no longer
failing the run's exit code.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

DegradationKind = Literal[
    "step_fallback",
    "empty_answer",
    "invalid_query",
    "search_failed",
    "fetch_failed",
    "citation_removed",
    "source_dropped",
    "no_findings",
    "memory_budget_cut",
    "persona_not_kept",
    "source_unreadable",
    "judge_output_gated",
    "spans_removed",
    "criterion_unscored",
    "context_leak",
    "output_truncated",
    "setting_not_applied",
    "memory_over_budget",
    "memory_unknown_event",
    "memory_bad_context",
    "pipeline_no_response",
    "pipeline_unread_citation",
    "state_not_checkpointable",
    "judge_off_scale",
    "judge_raised",
    "answer_incomplete",
    "answer_cut",
    "answer_filtered",
    "reasoning_unclosed",
]

KINDS: dict[str, str] = {
    "step_fallback": "a model step failed (its answer never fit, or the call failed) and the pipeline went on "
    "without it: the question as asked, one sub-topic, a source left out",
    "empty_answer": "a model answered with nothing usable (no queries, no aspects) and a default stood in",
    "invalid_query": "a search query the model wrote was not a query (a URL, empty, a repeat) and was replaced",
    "search_failed": "a search gave no results: the provider or the web failed, or it found nothing at all",
    "fetch_failed": "a page could not be read: an error, a refused URL, no text extracted",
    "citation_removed": "a citation marker or a URL in the text named no source the system read, and was removed; "
    "or the model's own source list, removed, named URLs the system never read",
    "source_dropped": "a source the system read (and took notes from) was left out of what the writer saw: "
    "over the cap on sources in the report (deep_research `report_sources`)",
    "no_findings": "research found nothing: the answer or report rests on no source",
    "memory_budget_cut": "a memory budget cut history events out of the context",
    "persona_not_kept": "the setting gave the user's explicit persona, but the memory's context does not hold it "
    "whole and first (a memory that gives no context, or selects or cuts the persona's facets)",
    "source_unreadable": "a fact-checker could not read a cited source",
    "judge_output_gated": "a judge's output was degenerate (empty feedback, spans not in the response, too few "
    "aspects) and was asked again",
    "spans_removed": "spans a judge quoted that are not in the response were removed before scoring",
    "criterion_unscored": "a judge left a criterion unscored, even when asked again",
    "context_leak": "a control episode's answer (another user's context, or none) mentions facts of the case's own "
    "user that the context it was given did not hold: something outside the memory reached the system",
    "output_truncated": "an external agent's report was longer than the run keeps (`max_report_chars`) and was cut "
    "there, or its log reached the job's file size limit (`limits.file_mb`) and was cut",
    # broken clauses of a protocol's contract (benchmarks/common/contract.py), found by the run itself
    "setting_not_applied": "benchmark contract, 'settings expose what they say': a system's view of a case did not "
    "show what its setting says (history under task_only, other events under persona, the persona missing); "
    "the episode failed",
    "memory_over_budget": "memory contract, 'budget respected': a memory's context took more tokens than its budget "
    "(beyond the explicit persona kept whole, which memory_budget_cut records); the episode failed",
    "memory_unknown_event": "memory contract, 'event ids only from ingested events': a memory's context named an "
    "event that is not one of the user's own ingested events (another user's, or one never given); the episode failed",
    "memory_bad_context": "memory contract, 'contexts in the UserContext schema': a memory's context() returned "
    "something other than a UserContext (or one whose text or event ids are not what they say); the episode failed",
    "pipeline_no_response": "pipeline contract, 'the response schema': a pipeline returned no `response`, or one "
    "that is not a SystemResponse, or one whose fields do not hold what they say or cannot be written as JSON, or "
    "wrote other keys of the episode's state through Command.PARENT; the episode failed",
    "pipeline_unread_citation": "pipeline contract, 'citations only to sources read': a response cited a text "
    "that is not in the run's source store, or a URL this run's web neither fetched nor found, or carries an [n] "
    "marker that names none of its citations; the episode failed",
    "state_not_checkpointable": "pipeline contract, 'checkpointable state': a graph's state held a value the "
    "run's checkpoint serializer cannot write (an object of a type it does not know); the episode failed",
    "judge_off_scale": "judge contract, 'scores inside the declared scale': a judge's score outside its declared "
    "scale, or not a finite number; the judgment failed",
    "judge_raised": "judge contract, 'failures returned as failed judgments': a judge raised an exception (a bug: "
    "a RuntimeError, a TypeError, a result its own validation refused) instead of returning a failed judgment; "
    "that judgment failed, naming the judge and the exception, and the episode kept its response and other judgments",
    "answer_incomplete": "provider contract, 'an answer that arrived whole': a streamed answer without its "
    "terminal event or broken off part-way (a transport error, or a finish_reason error), a chat answer with no "
    "choices, or a Responses or "
    "Interactions answer that ended failed or cancelled; the call failed and nothing was cached",
    "answer_cut": "provider contract, 'not cut at the token limit': the provider stopped the answer at its token "
    "limit (finish_reason length, a Responses answer incomplete for max_output_tokens)",
    "answer_filtered": "provider contract, 'not withheld by a content filter': the provider's content filter cut "
    "or withheld the answer (finish_reason content_filter)",
    "reasoning_unclosed": "provider contract, 'reasoning closed before the answer': the answer opened a <think> "
    "block (at the start of a line, in any case) it never closed; the partial reasoning was not taken as the answer",
}
assert set(KINDS) == set(get_args(DegradationKind)), "every kind is described"


class Degradation(BaseModel):
    """One degraded step: what kind, where, how many times, and what happened."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: DegradationKind
    step: str = Field(description="Where: a graph node or step (plan, retrieve, take_notes, recall, judge:pqr, ...).")
    count: int = Field(default=1, ge=1, description="How many times (events cut, markers removed, pages unread).")
    detail: str = Field(default="", description="What happened, in a line (an error, the query, the URL).")


def degradation(kind: DegradationKind, step: str, detail: str = "", count: int = 1) -> Degradation:
    """A degradation with its detail cut to one line of reasonable length."""
    line = " ".join(str(detail).split())
    return Degradation(kind=kind, step=step, count=count, detail=line if len(line) <= 300 else line[:299] + "…")


def counts_by_kind(items: Iterable[Degradation]) -> dict[str, int]:
    """Total count per kind, kinds in alphabetical order."""
    totals: Counter[str] = Counter()
    for item in items:
        totals[item.kind] += item.count
    return dict(sorted(totals.items()))


def check_kinds(kinds: Iterable[str]) -> list[str]:
    """The kinds as given, or a ValueError naming the unknown ones and the valid ones."""
    kinds = list(kinds)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown degradation kind {', '.join(map(repr, unknown))}; valid: {', '.join(KINDS)}")
    return kinds
