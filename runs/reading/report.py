"""report.html: the run's reading page, self-contained (it opens offline: its styles, scripts, plots
and the texts its citations name are inside it).

It reads top down as a researcher does:

- **the summary** (two screens): what went wrong, each system's scores with their CIs, the paired
  differences from the baseline, and what each system cost — as spent, and as it would have cost
  with nothing answered from the response cache, with a memory's ingest counted per user. Its parts
  are `SUMMARY_PARTS`, each a template under `templates/report/` with the data it shows: a table a
  later change adds (a note on the CIs, a personalization effect) is one more part;
- **the cases**: an index to filter (a judge, a degradation kind, a smallest difference) and sort
  (by the difference between two systems, or by score), then each case with its systems side by
  side — the query and persona, each system's recalled memory (folded), its response with each
  citation showing the cited source's text, and each judge's reasoning as prose (folded, one line
  each: `judgment_reading`); a word diff of a response against the baseline's and the raw JSON are
  one key or click away. `j`/`k` move between cases, `?` lists the keys;
- **further figures** (`FIGURE_PARTS`, each folded): criterion means, the variance by source,
  epochs, score distributions, cost against score, what the memory budget kept, the paper's
  numbers, the model calls, failed episodes.

Every number comes from summary.json (tables) or results.jsonl (cases); `atelier report RUN_DIR`
renders it again. The plots are `runs.reading.plots`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from atelier.benchmarks.case import Case
from atelier.benchmarks.common.atomic_files import write_atomically
from atelier.benchmarks.common.degradation import KINDS, counts_by_kind
from atelier.runs.folder.results import ResultRecord, result_key
from atelier.runs.reading.case_reading import SourceTexts, diff_share, response_html, word_diff
from atelier.runs.reading.comparisons import scores_by_case, tool_recalls
from atelier.runs.reading.pages import EPISODES_DIR, anchor, cell_anchor, environment, episode_page, number
from atelier.runs.reading.personalization_page import personalization_part
from atelier.runs.reading.plots import CostRow, Point, cost_plot, distribution_plot, dot_plot, panels_of
from atelier.runs.reading.usage import MEMORY, format_cost, format_tokens

__all__ = ["Point", "ci_text", "dot_plot", "paper_tables", "response_parts", "write_report"]

WIDE_INDEX = 6  # more systems than this: the case index shows the baseline and one system chosen, not all
SIDE_BY_SIDE = 4  # more systems than this: a case shows the baseline and the chosen system, the rest folded


# ----------------------------------------------------------------------------- what the tables show


def response_parts(record: ResultRecord) -> tuple[str, list[dict[str, Any]]]:
    """A record's response text and citations, whether it stores the text or the whole response."""
    response: Any = record.response
    if response is None:
        return "", []
    if isinstance(response, str):
        return response, []
    data = response if isinstance(response, dict) else response.model_dump(mode="json")
    return data.get("text", ""), list(data.get("citations") or [])


def ci_text(ci95: Any, n: int | None) -> str:
    """A 95% CI as the page shows it: `[0.512, 0.688]`; one case has none, and says so."""
    if not n:
        return "–"
    if n == 1:
        return "one case, no CI"
    low, high = ci95 or (None, None)
    if low is None or high is None:
        return "no CI"
    return f"[{number(low)}, {number(high)}]"


def difference_ci_text(row: Any) -> str:
    """A paired difference's 95% CI (the interval that inverts its test): `[-0.550, -0.092]`, or
    `unbounded` when the design's test cannot reject at 5% (its smallest p is not below it)."""
    if not row.get("n") or row.get("mean_difference") is None:
        return "–"
    low, high = row.get("ci_low"), row.get("ci_high")
    if low is None or high is None:
        return "unbounded"
    return f"[{number(low)}, {number(high)}]"


# said under every table of paired differences: what the interval and the two p-values are
CI_AGREES = (
    "The 95% CI inverts the test: it excludes 0 exactly when the unadjusted p is below 0.05; "
    "'significant' reads the adjusted p (Benjamini-Hochberg over the table's comparisons)."
)


def untestable_notes(rows: list[dict[str, Any]], label: str) -> list[str]:
    """One line per comparison whose test cannot reject at 5% with its design (no interval, no MDE)."""
    out = []
    for row in rows:
        if row.get("n") and row.get("testable") is False:
            why = next((note for note in row.get("cluster_notes") or [] if "smallest p" in note), "untestable")
            out.append(f"{row.get('judge')} / {row.get(label)}: {why}")
    return out


def unequal_n_note(summary: dict[str, Any]) -> str | None:
    """A note when a judge scored the systems on different numbers of cases (a run its budget
    stopped, failures): their means then rest on different cases, side by side in one table."""
    uneven = []
    for judge in summary.get("judges") or []:
        counts = {
            name: (entry.get("judges", {}).get(judge) or {}).get("n", 0) for name, entry in summary["systems"].items()
        }
        if len(set(counts.values())) > 1:
            uneven.append(f"{judge}: " + ", ".join(f"{name} {n}" for name, n in counts.items()))
    if not uneven:
        return None
    why = " (the budget stopped the run)" if (summary.get("budget") or {}).get("reached") else ""
    return (
        f"the systems' means rest on different numbers of cases{why} — {'; '.join(uneven)}: they are not "
        "compared on the same cases; the paired comparisons are (on the cases both were scored on)"
    )


def interval_warnings(summary: dict[str, Any]) -> list[str]:
    """What the terminal says under a run's table about its intervals: too few clusters for them to
    keep their coverage, and comparisons whose test cannot reject at 5%."""
    design = summary.get("clusters") or {}
    lines = []
    if design.get("warning"):
        lines.append(
            f"warning: {design['warning']}: with so few clusters, 95% intervals were measured to cover less "
            "than 93% of the time for some scores (docs/statistics.md)"
        )
    rows = [{**row, "pair": f"{row.get('a')} - {row.get('b')}"} for row in summary.get("comparisons") or []]
    lines += [f"untestable: {line}" for line in untestable_notes(rows, "pair")]
    uneven = unequal_n_note(summary)
    return lines + ([f"note: {uneven}"] if uneven else [])


def paper_tables(paper: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """summary.json's paper rows pivoted: one table per (our system, judge), one row per metric, a
    column per paper row that system stands for, then ours with its 95% CI and n. Ours is the same
    for every paper row of one system, so it is shown once."""
    groups: dict[tuple[str, str | None], dict[str, Any]] = {}
    for row in paper:
        group = groups.setdefault(
            (row["system"], row.get("judge")),
            {"system": row["system"], "judge": row.get("judge"), "columns": [], "metrics": {}},
        )
        if row["row"] not in group["columns"]:
            group["columns"].append(row["row"])
        metric = group["metrics"].setdefault(
            row["metric"],
            {"metric": row["metric"], "paper": {}, "ours": row["ours"], "ci95": row.get("ci95"), "n": row["n"]},
        )
        metric["paper"][row["row"]] = row["paper"]
    return [{**group, "metrics": list(group["metrics"].values())} for group in groups.values()]


def context_share_rows(records: list[ResultRecord], systems: list[str]) -> list[dict[str, Any]]:
    """Per system whose memory packs events under a budget: the budget(s), how much of the offered
    context was kept (mean and least share of tokens) and in how many episodes it was cut ([] when
    no system reports a share). PDR gives context systems the whole context: a cut is shown here."""
    rows = []
    for system in systems:
        shares = [
            r.user_context.share for r in records if r.system == system and r.user_context and r.user_context.share
        ]
        if not shares:
            continue
        rows.append(
            {
                "system": system,
                "budgets": sorted({s.budget_tokens for s in shares}),
                "episodes": len(shares),
                "mean_share": math.fsum(s.share for s in shares) / len(shares),
                "least_share": min(s.share for s in shares),
                "cut": sum(1 for s in shares if s.events_kept < s.events_offered),
                "tokens_offered": round(math.fsum(s.tokens_offered for s in shares) / len(shares)),
            }
        )
    return rows


def epoch_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Per (system, judge), how far its scores moved between epochs (`epoch_spread` in summary.json,
    written when each (case, system) ran more than once); [] for a run of one epoch."""
    return [
        {"system": system, "judge": judge, **stats["epoch_spread"]}
        for system, entry in summary["systems"].items()
        for judge, stats in entry["judges"].items()
        if stats.get("epoch_spread")
    ]


def variance_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Per (system, judge) with scores, its variance split into between-case, between-epoch and
    between-judge-repeat parts (`variance` in summary.json)."""
    return [
        {"system": system, "judge": judge, **stats["variance"]}
        for system, entry in summary["systems"].items()
        for judge, stats in entry["judges"].items()
        if stats.get("variance") and stats["variance"].get("n_cases")
    ]


def cluster_methods(summary: dict[str, Any]) -> list[str]:
    """The interval methods the cells used, each once (clustered designs name their clusters)."""
    methods = [stats.get("ci_method") for entry in summary["systems"].values() for stats in entry["judges"].values()]
    return list(dict.fromkeys(m for m in methods if m))


_STANDARD = {
    "n",
    "mean",
    "ci95",
    "failed",
    "flags",
    "mean_repeat_std",
    "criteria",
    "case_means",
    "epoch_spread",
    "ci_method",
    "n_clusters",
    "design_effect",
    "mde",
    "cluster_notes",
    "variance",
}


def judge_figures(summary: dict[str, Any], judge: str) -> dict[str, Any]:
    """A judge's own system-level figures (its `aggregate`): criterion means as a systems x criteria
    table, and whatever else it reports (pooled reliability, per-category tables...) per system."""
    names: list[str] = []
    rows, extras = {}, {}
    for system, entry in summary["systems"].items():
        stats = entry["judges"].get(judge) or {}
        criteria = stats.get("criteria") or {}
        names += [name for name in criteria if name not in names]
        rows[system] = criteria
        other = {k: v for k, v in stats.items() if k not in _STANDARD and v not in (None, {}, [])}
        if stats.get("flags"):
            other["flags"] = stats["flags"]
        if other:
            extras[system] = other
    return {"names": names, "rows": rows, "extras": extras}


_EMPTY_CALLS = {
    "calls": 0,
    "provider_calls": 0,
    "cache_hits": 0,
    "errors": 0,
    "prompt_tokens": 0,
    "completion_tokens": 0,
    "cost_usd": 0.0,
    "unpriced_calls": 0,
}


def calls_of(summary: dict[str, Any], system: str, kind: str = "system", *, uncached: bool = False) -> dict[str, Any]:
    """A system's calls of one kind (`system`, `judge`, `user_sim`, `memory`), as spent or uncached."""
    usage = summary["systems"][system].get("usage", {})
    return usage.get("uncached" if uncached else "calls", {}).get(kind, _EMPTY_CALLS)


def cost_rows(summary: dict[str, Any], specs: dict[str, Any]) -> list[dict[str, Any]]:
    """Per system what it cost: its own calls (memory ingest apart) as spent and uncached with the
    cache's share of them, its judges', its memory's ingest per user, and its episodes' latency."""
    rows = []
    for name, entry in summary["systems"].items():
        spec = specs.get(name, {})
        own, own_uncached = calls_of(summary, name), calls_of(summary, name, uncached=True)
        memory = entry.get("usage", {}).get(MEMORY)
        episodes = entry["n"] + entry["errors"]
        rows.append(
            {
                "system": name,
                "pipeline": spec.get("pipeline"),
                "memory_backend": (spec.get("memory") or {}).get("backend"),
                "episodes": episodes,
                "calls": own["calls"],
                "tokens": format_tokens(own),
                "tokens_uncached": format_tokens(own_uncached),
                "cost": format_cost(own),
                "cost_uncached": format_cost(own_uncached),
                "hit_share": own_uncached.get("cache_hit_share"),
                "judge_cost": format_cost(calls_of(summary, name, "judge")),
                "judge_cost_uncached": format_cost(calls_of(summary, name, "judge", uncached=True)),
                "memory": memory,
                "latency": entry.get("usage", {}).get("latency_s", {}),
            }
        )
    return rows


def memory_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Per (system, user) whose memory ingested with model calls or took time: what the ingest cost."""
    rows = []
    for system, entry in summary["systems"].items():
        memory = entry.get("usage", {}).get(MEMORY)
        if not memory:
            continue
        for user, cost in memory["per_user"].items():
            rows.append(
                {
                    "system": system,
                    "user": user,
                    "calls": cost["uncached"]["calls"],
                    "tokens": format_tokens(cost["spent"]),
                    "tokens_uncached": format_tokens(cost["uncached"]),
                    "cost": format_cost(cost["spent"]),
                    "cost_uncached": format_cost(cost["uncached"]),
                    "hit_share": cost["uncached"].get("cache_hit_share"),
                    "seconds": cost["seconds"],
                }
            )
    return rows


def _cost_chart(summary: dict[str, Any]) -> tuple[str | None, str]:
    """Score beside what the system's own calls cost per episode (USD when every call was priced,
    else tokens), as spent and uncached."""
    systems, judges = panels_of(summary)
    spent = {s: calls_of(summary, s) for s in systems}
    uncached = {s: calls_of(summary, s, uncached=True) for s in systems}
    if not systems or not judges or not any(u["calls"] for u in uncached.values()):
        return None, ""
    priced = all(u.get("cost_usd") is not None and not u.get("unpriced_calls") for u in uncached.values()) and any(
        u.get("cost_usd") for u in uncached.values()
    )
    unit = "USD" if priced else "tokens"
    rows = []
    for system in systems:
        entry = summary["systems"][system]
        episodes = max(1, entry["n"] + entry["errors"])

        def amount(totals: dict[str, Any]) -> float:
            if priced:
                return float(totals.get("cost_usd") or 0.0)
            return float(totals.get("prompt_tokens", 0) + totals.get("completion_tokens", 0))

        scores = {}
        for judge in judges:
            stats = entry["judges"].get(judge) or {}
            low, high = stats.get("ci95") or [None, None]
            scores[judge] = Point(label=system, mean=stats.get("mean"), low=low, high=high, n=stats.get("n", 0))
        rows.append(
            CostRow(
                label=system,
                scores=scores,
                spent=amount(spent[system]) / episodes,
                uncached=amount(uncached[system]) / episodes,
            )
        )
    return cost_plot(rows, judges, unit=unit), unit


# ----------------------------------------------------------------------------- the cases


def _persona_lines(case: Case | None, limit: int = 80) -> list[str]:
    """The case's persona as `Facet > Sub-facet: value` lines."""
    if case is None or case.persona is None:
        return []
    out: list[str] = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{path} > {key}" if path else str(key))
        elif isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
            for item in value:
                walk(item, path)
        else:
            shown = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
            out.append(f"{path}: {shown}" if path else shown)

    walk(case.persona.attributes, "")
    return out[:limit] + ([f"… and {len(out) - limit} more"] if len(out) > limit else [])


def _epoch_view(record: ResultRecord, sources: SourceTexts, view_dir: str) -> dict[str, Any]:
    """One epoch's response in a (case, system) cell of the per-case view."""
    text, citations = response_parts(record)
    for c in citations:
        c["anchor"] = sources.anchor(c.get("sha256"), c.get("title"), c.get("url"))
    by_url = {c["url"]: c["anchor"] for c in citations if c.get("url") and c.get("anchor")}
    key = result_key(record.case_id, record.system, record.epoch)
    return {
        "record": record,
        "text": text,
        "html": response_html(text, citations, sources) if text else "",
        "citations": citations,
        "source_of_url": by_url,  # a PQR claim's source, when the response cited it: its text on the page
        "recalls": tool_recalls(record),  # its recall_memory calls
        "anchor": cell_anchor(key),
        "view": f"{view_dir}/{EPISODES_DIR}/{episode_page(key)}",
        "kinds": sorted({d.kind for d in record.degraded}),
    }


def _cases_view(
    records: list[ResultRecord],
    cases: dict[str, Case],
    systems: list[str],
    judges: list[str],
    baseline: str | None,
    sources: SourceTexts,
    view_dir: str = "view",
) -> list[dict[str, Any]]:
    """Per case, a cell per system holding every epoch's response (`epochs`, in epoch order) and, per
    judge, the score the summary counts for the case: with epochs, the mean over its scored epochs
    (`scores`, from `scores_by_case` as in the summary; `scored` says over how many); the word diff
    of each system's first response against the baseline's; and what the index filters and sorts by."""
    by_case: dict[str, dict[str, list[ResultRecord]]] = defaultdict(lambda: defaultdict(list))
    for each in sorted(records, key=lambda r: (r.case_id, r.system, r.epoch)):
        by_case[each.case_id][each.system].append(each)
    out = []
    for case_id in sorted(by_case):
        case = cases.get(case_id)
        first = next(iter(by_case[case_id].values()))[0]
        cells: list[dict[str, Any]] = []
        for system in systems:
            runs = by_case[case_id].get(system, [])
            degraded = [r for r in runs if r.ok and r.degraded]
            cells.append(
                {
                    "system": system,
                    "epochs": [_epoch_view(r, sources, view_dir) for r in runs],
                    "ok": any(r.ok for r in runs),
                    "scores": {j: scores_by_case(runs, system, j).get(case_id) for j in judges},
                    "scored": {j: sum(1 for r in runs if r.ok and r.scores.get(j) is not None) for j in judges},
                    # where the index's ⚠ leads: the first epoch that rests on a degraded step
                    "degraded_anchor": cell_anchor(result_key(case_id, system, degraded[0].epoch))
                    if degraded
                    else None,
                    "kinds": sorted({d.kind for r in runs for d in r.degraded}),
                    "anchor": cell_anchor(result_key(case_id, system)),
                }
            )
        base = next((c for c in cells if c["system"] == baseline and c["epochs"] and c["epochs"][0]["text"]), None)
        diffs = []
        for cell in cells:
            if base is None or cell is base or not cell["epochs"] or not cell["epochs"][0]["text"]:
                continue
            before, after = base["epochs"][0]["text"], cell["epochs"][0]["text"]
            diffs.append(
                {
                    "system": cell["system"],
                    "html": word_diff(before, after),
                    "same": diff_share(before, after),
                }
            )
        out.append(
            {
                "id": case_id,
                "anchor": "case-" + anchor(case_id),
                "user": first.user_id,
                "setting": first.setting,
                "query": case.query.text if case else None,
                "need": case.gold.information_need if case else None,
                "persona": _persona_lines(case),
                "cells": cells,
                "diffs": diffs,
                "kinds": sorted({k for c in cells for k in c["kinds"]}),
                "scores": {c["system"]: c["scores"] for c in cells},
            }
        )
    return out


# ----------------------------------------------------------------------------- the page's parts


@dataclass
class ReportInputs:
    """Everything a part of the page may show."""

    config: dict[str, Any]
    summary: dict[str, Any]
    records: list[ResultRecord]
    specs: dict[str, Any]
    systems: list[str]
    judges: list[str]
    extra: dict[str, Any] = field(default_factory=dict)


class Part(NamedTuple):
    """One part of the page: a template under `templates/report/`, and what it shows (`data`, from
    the inputs; a part whose data is None or empty is left out)."""

    template: str
    data: Callable[[ReportInputs], Any] = lambda inputs: True


def _scores_part(inputs: ReportInputs) -> dict[str, Any] | None:
    ep = inputs.summary["episodes"]
    if not (ep.get("scored") or ep.get("unscored")):
        return None
    return {"chart": dot_plot(score_points(inputs.summary), xlabel="mean score, 95% CI", gid="score-dots")}


def _cost_part(inputs: ReportInputs) -> dict[str, Any]:
    return {"rows": cost_rows(inputs.summary, inputs.specs), "memory": memory_rows(inputs.summary)}


def _cost_chart_part(inputs: ReportInputs) -> dict[str, Any] | None:
    chart, unit = _cost_chart(inputs.summary)
    return {"chart": chart, "unit": unit} if chart else None


def _distribution_part(inputs: ReportInputs) -> str | None:
    systems, judges = panels_of(inputs.summary)
    panels = {
        judge: {
            s: [score for r in inputs.records if r.system == s and r.ok and (score := r.scores.get(judge)) is not None]
            for s in systems
        }
        for judge in judges
    }
    return distribution_plot(panels)


def _criteria_part(inputs: ReportInputs) -> list[tuple[str, dict[str, Any]]]:
    return [(judge, judge_figures(inputs.summary, judge)) for judge in inputs.summary.get("judges", [])]


SUMMARY_PARTS: tuple[Part, ...] = (
    Part("what_went_wrong.html.j2"),
    Part("scores.html.j2", _scores_part),
    Part("baseline.html.j2", lambda i: (i.summary.get("versus_baseline") or {}).get("rows")),
    Part("personalization.html.j2", lambda i: personalization_part(i.summary)),
    Part("costs.html.j2", _cost_part),
    Part("paper.html.j2", lambda i: paper_tables(i.summary.get("paper") or [])),
)
FIGURE_PARTS: tuple[Part, ...] = (
    Part("criteria.html.j2", lambda i: [c for c in _criteria_part(i) if c[1]["names"] or c[1]["extras"]]),
    Part("variance.html.j2", lambda i: variance_rows(i.summary)),
    Part("epochs.html.j2", lambda i: epoch_rows(i.summary)),
    Part("distributions.html.j2", _distribution_part),
    Part("cost_chart.html.j2", _cost_chart_part),
    Part("context_share.html.j2", lambda i: context_share_rows(i.records, i.systems)),
    Part(
        "conversations.html.j2",
        lambda i: {n: s["conversations"] for n, s in i.summary["systems"].items() if "conversations" in s},
    ),
    Part("model_calls.html.j2"),
    Part("failed.html.j2", lambda i: [r for r in i.records if not r.ok]),
)


def _rendered(parts: Iterable[Part], inputs: ReportInputs) -> list[tuple[str, Any]]:
    shown = []
    for part in parts:
        data = part.data(inputs)
        if data is not None and data is not False and data != [] and data != {}:
            shown.append((f"report/{part.template}", data))
    return shown


def score_points(summary: dict[str, Any]) -> dict[str, list[Point]]:
    """Per judge, each system's mean and 95% CI from summary.json."""
    systems, judges = panels_of(summary)
    panels: dict[str, list[Point]] = {}
    for judge in judges:
        panels[judge] = []
        for system in systems:
            stats = summary["systems"][system]["judges"].get(judge) or {}
            low, high = stats.get("ci95") or [None, None]
            panels[judge].append(Point(label=system, mean=stats.get("mean"), low=low, high=high, n=stats.get("n", 0)))
    return panels


def filter_kinds(records: Iterable[ResultRecord]) -> list[str]:
    """The degradation kinds a case filter offers: every kind there is (benchmarks.common.degradation),
    and any other a record carries, those present first."""
    present = sorted({d.kind for r in records for d in r.degraded})
    return present + [k for k in KINDS if k not in present]


def write_report(
    path: str | Path,
    *,
    config: dict[str, Any],
    summary: dict[str, Any],
    records: Iterable[ResultRecord],
    cases: dict[str, Case] | None = None,
    run_dir: str | Path | None = None,
) -> None:
    records = sorted(records, key=lambda r: (r.case_id, r.system, r.epoch))
    systems = list(summary["systems"])
    judges = list(summary.get("judges", []))
    specs = {s["name"]: s for s in config["recipe"]["systems"]}
    inputs = ReportInputs(config=config, summary=summary, records=records, specs=specs, systems=systems, judges=judges)
    baseline = (summary.get("versus_baseline") or {}).get("baseline") or (systems[0] if systems else None)
    compared = next((s for s in systems if s != baseline), baseline)
    sources = SourceTexts(run_dir if run_dir is not None else Path(path).parent)
    cases_view = _cases_view(records, cases or {}, systems, judges, baseline, sources)
    env = environment()
    env.filters["ci"] = ci_text
    env.filters["difference_ci"] = difference_ci_text
    env.globals["ci_agrees"] = CI_AGREES
    env.globals["untestable"] = untestable_notes
    env.globals["unequal_n"] = unequal_n_note(summary)
    env.globals["format_cost"] = format_cost
    env.globals["counts_by_kind"] = counts_by_kind
    html = env.get_template("report.html.j2").render(
        config=config,
        summary=summary,
        specs=specs,
        systems=systems,
        judges=judges,
        records=records,
        summary_parts=_rendered(SUMMARY_PARTS, inputs),
        figure_parts=_rendered(FIGURE_PARTS, inputs),
        cluster_methods=cluster_methods(summary),
        cases=cases_view,
        sources=sources.used,
        baseline=baseline,
        compared=compared,
        wide_index=len(systems) > WIDE_INDEX,
        folded=len(systems) > SIDE_BY_SIDE,
        filter_kinds=filter_kinds(records),
        present_kinds={d.kind for r in records for d in r.degraded},
        failing_kinds=[d["kind"] for d in summary["episodes"].get("degraded", []) if not d["tolerated"]],
    )
    write_atomically(path, html)  # no key, even one an error quoted; a link in its place is replaced
