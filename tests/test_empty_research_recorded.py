"""Issue 41, item 1: research that finds nothing is never silent. A search that gives no results is a
`search_failed`; a rag answer resting on no source read is `no_findings`; a source deep_research read
and noted but left out of the report by `report_sources` is a `source_dropped`."""

from __future__ import annotations

import json
import uuid

from atelier.agents.citations import SourceRef
from atelier.graphs.context import EpisodeContext, SystemSpec
from atelier.graphs.deep_research.nodes import _report_material
from atelier.graphs.deep_research.state import Findings, Note
from atelier.graphs.rag import build_rag_graph
from atelier.graphs.resources import release
from atelier.tools.config import SandboxConfig, WebConfig


def off_topic_corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    page = {"title": "Zyxwv qqq", "text": "Zyxwv qqq vvvv. Nothing here matches any question at all."}
    path.write_text(json.dumps(page) + "\n")
    return str(path)


async def test_a_rag_search_that_finds_nothing_is_recorded_and_so_is_an_answer_resting_on_no_source(tmp_path):
    ctx = EpisodeContext(
        run_id=f"t-{uuid.uuid4().hex[:6]}",
        run_dir=str(tmp_path / "run"),
        system=SystemSpec(name="rag", pipeline="rag", memory={"backend": "none"}),
        judges=[],
        web=WebConfig(cache_dir=tmp_path / "web", sandbox=SandboxConfig(corpus=off_topic_corpus(tmp_path))),
    )
    try:
        out = await build_rag_graph().ainvoke({"benchmark": "sample", "case_id": "q01"}, context=ctx)
    finally:
        await release(ctx)
    response = out["response"]
    kinds = [d.kind for d in response.degraded]
    searches = len(response.meta["queries"])
    assert searches >= 1 and kinds.count("search_failed") == searches
    assert all("no results" in d.detail for d in response.degraded if d.kind == "search_failed")
    assert kinds.count("no_findings") == 1
    assert response.citations == []


def source(i: int) -> SourceRef:
    return SourceRef(id=f"w-{i}", url=f"https://site{i}.example/", title=f"Page {i}", sha256=f"{i:064x}")


def test_sources_over_report_sources_are_recorded_with_their_notes():
    findings = [
        Findings(
            index=0,
            round=1,
            topic="t",
            sources=[source(i) for i in range(1, 6)],
            notes=[Note(source_id=f"w-{i}", text=f"note {i}.{k}") for i in range(1, 6) for k in range(2)],
        )
    ]
    shown, notes, dropped = _report_material(findings, 3)
    assert [s.id for s in shown] == ["w-1", "w-2", "w-3"] and len(notes) == 6
    assert [(d.kind, d.count) for d in dropped] == [("source_dropped", 2)]
    assert "4 notes" in dropped[0].detail and "site4" in dropped[0].detail and "site5" in dropped[0].detail
    assert _report_material(findings, 5)[2] == []  # all shown: nothing dropped
