"""Citations checked in code: markers that name a source read are kept and renumbered by first use,
others are removed and counted, and the text ends with the list of the sources it cites."""

from __future__ import annotations

from agents.citations import SourceRef, check_citations


def sources(n: int) -> list[SourceRef]:
    return [SourceRef(id=f"w-{i}", url=f"https://site{i}.example/page", title=f"Page {i}", sha256=f"{i:064x}")
            for i in range(1, n + 1)]


def test_kept_markers_are_renumbered_by_first_use_and_listed():
    report = check_citations("Trains cost €25 [3]. Book early [1, 3]. Weather is mild [2-3].", sources(3))
    body, _, listing = report.text.partition("\n\n## Sources\n")
    assert body == "Trains cost €25 [1]. Book early [2, 1]. Weather is mild [3, 1]."
    assert listing.splitlines() == [
        "[1] Page 3. https://site3.example/page",
        "[2] Page 1. https://site1.example/page",
        "[3] Page 2. https://site2.example/page",
    ]
    assert [(c.number, c.source_id, c.sha256) for c in report.citations] == [
        (1, "w-3", f"{3:064x}"), (2, "w-1", f"{1:064x}"), (3, "w-2", f"{2:064x}")]
    assert report.stats["markers"] == 5 and report.stats["resolved"] == 5 and report.stats["unresolved_removed"] == 0
    assert report.stats["sources_read"] == 3 and report.stats["sources_cited"] == 3


def test_a_citation_of_a_source_never_read_is_removed_and_counted():
    report = check_citations("Fares rose [2]. A blog says otherwise [7]. Both agree [2, 9].", sources(2))
    assert report.text.startswith("Fares rose [1]. A blog says otherwise. Both agree [1].")
    assert "[7]" not in report.text and "[9]" not in report.text
    assert report.stats["unresolved_removed"] == 2 and report.stats["unresolved_numbers"] == [7, 9]
    assert [c.source_id for c in report.citations] == ["w-2"]


def test_the_models_own_source_list_is_replaced_by_the_checked_one():
    text = "Answer [1].\n\n### References\n[1] Made-up title, made-up.example\n[2] Another invented one"
    report = check_citations(text, sources(1))
    assert report.stats["model_source_list_removed"] is True
    assert "made-up" not in report.text and report.text.endswith("[1] Page 1. https://site1.example/page")
    assert report.stats["markers"] == 1  # the invented list's numbers are not counted as citations


def test_no_citations_means_no_source_list_and_labels_are_not_markers():
    report = check_citations("Plain answer with [a] label and a footnote[^1].", sources(2))
    assert report.text == "Plain answer with [a] label and a footnote[^1]."
    assert report.citations == [] and report.stats["markers"] == 0


def test_gold_sources_are_listed_without_a_url():
    gold = SourceRef(id="g-1", kind="gold", title="Gold information 1", sha256="0" * 64)
    report = check_citations("Fact [1].", [gold])
    assert report.text.endswith("[1] Gold information 1. gold information provided with the task")
    assert report.citations[0].url is None
