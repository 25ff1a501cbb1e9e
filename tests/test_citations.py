"""Citations checked in code: markers that name a source read are kept and renumbered by first use,
others are removed and counted, and the text ends with the list of the sources it cites."""

from __future__ import annotations

from atelier.agents.citations import SourceRef, check_citations


def sources(n: int) -> list[SourceRef]:
    return [
        SourceRef(id=f"w-{i}", url=f"https://site{i}.example/page", title=f"Page {i}", sha256=f"{i:064x}")
        for i in range(1, n + 1)
    ]


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
        (1, "w-3", f"{3:064x}"),
        (2, "w-1", f"{1:064x}"),
        (3, "w-2", f"{2:064x}"),
    ]
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
    report = check_citations("Plain answer with [a] label.", sources(2))
    assert report.text == "Plain answer with [a] label."
    assert report.citations == [] and report.stats["markers"] == 0


def test_a_footnote_reference_is_a_citation_unless_its_definition_stays_as_prose():
    report = check_citations("A claim[^2].", sources(2))
    assert report.text.split("\n\n## Sources\n")[0] == "A claim[1]." and report.citations[0].source_id == "w-2"
    text = "A claim[^1].\n\n[^1]: I think so, having tried it."
    report = check_citations(text, sources(2))
    assert report.text == text and report.stats["markers"] == 0 and report.stats["footnotes_left"] == 1


def test_gold_sources_are_listed_without_a_url():
    gold = SourceRef(id="g-1", kind="gold", title="Gold information 1", sha256="0" * 64)
    report = check_citations("Fact [1].", [gold])
    assert report.text.endswith("[1] Gold information 1. gold information provided with the task")
    assert report.citations[0].url is None


LISTING_2 = "\n\n## Sources\n[1] Page 1. https://site1.example/page\n[2] Page 2. https://site2.example/page"


def test_a_sentence_starting_with_sources_is_prose_and_every_section_is_kept():
    text = (
        "## Budget\nAir costs 600 [1].\n\nSources disagree on 8 GB [2]; most say 16 GB [3].\n\n"
        "## Recommendation\nBuy 16 GB [1]."
    )
    report = check_citations(text, sources(3))
    assert report.text == text + "\n\n## Sources\n" + "\n".join(
        f"[{i}] Page {i}. https://site{i}.example/page" for i in (1, 2, 3)
    )
    assert report.stats["model_source_list_removed"] is False
    assert report.stats["markers"] == 4 and report.stats["resolved"] == 4 and report.stats["unresolved_removed"] == 0


def test_a_sources_heading_followed_by_prose_and_more_sections_is_kept():
    text = "## Sources\nThe sources disagree on price [2].\n\n## Recommendation\nBook early [1]."
    report = check_citations(text, sources(2))
    assert report.text == (
        "## Sources\nThe sources disagree on price [1].\n\n## Recommendation\nBook early [2]."
        "\n\n## Sources\n[1] Page 2. https://site2.example/page\n[2] Page 1. https://site1.example/page"
    )
    assert report.stats["model_source_list_removed"] is False and report.stats["markers"] == 2


def test_a_list_heading_followed_by_prose_at_the_end_is_kept():
    # bold label, then bullets that cite: prose under a heading named like a list
    text = "Answer [1].\n\n**Sources of funding**\n- Grants [2].\n\n## Citations\n- Parking citations cost €50 [1]."
    report = check_citations(text, sources(2))
    assert report.text == text + LISTING_2
    assert report.stats["model_source_list_removed"] is False


def test_a_trailing_model_list_of_any_entry_form_is_replaced():
    text = (
        "Answer [2].\n\n**References:**\n[1] Made-up title. https://made-up.example\n\n"
        "1. Invented paper\n   continued on an indented line, madeup.org/paper\n- bullet entry, blog.example\n"
        "* starred entry doi:10.1000/xyz\nhttps://bare.example/url\n\nSources:\n[2] Another invented one"
    )
    report = check_citations(text, sources(2))
    assert report.text == "Answer [1].\n\n## Sources\n[1] Page 2. https://site2.example/page"
    assert report.stats["model_source_list_removed"] is True
    assert report.stats["markers"] == 1 and report.stats["unresolved_removed"] == 0


def test_a_label_alone_on_its_line_opens_a_list_but_a_longer_line_does_not():
    for label in ("## Sources", "**References:**", "Sources:", "# Works cited", "Bibliography", "### Sources used"):
        report = check_citations(f"Answer [1].\n\n{label}\n- made up, madeup.example/page", sources(1))
        assert report.text == "Answer [1].\n\n## Sources\n[1] Page 1. https://site1.example/page", label
        assert report.stats["model_source_list_removed"] is True
    report = check_citations("Answer [1].\n\nSources say prices rise.\n- made up", sources(1))
    assert report.text.startswith("Answer [1].\n\nSources say prices rise.\n- made up\n\n## Sources\n")
    assert report.stats["model_source_list_removed"] is False


def test_a_model_list_followed_by_prose_is_not_the_end_and_is_kept():
    text = "Answer [1].\n\n## References\n- Page one\n\nHope this helps!"
    report = check_citations(text, sources(1))
    assert report.text == text + "\n\n## Sources\n[1] Page 1. https://site1.example/page"
    assert report.stats["model_source_list_removed"] is False


def test_a_link_form_marker_of_a_source_read_becomes_the_plain_marker():
    text = "Fares rose [2](https://elsewhere.example/a_(b)). See [the guide](https://guide.example) [1]."
    report = check_citations(text, sources(2))
    # the guide's URL names no source read: the link keeps its text (see the tracking-link test)
    assert report.text == "Fares rose [1]. See the guide [2]." + (
        "\n\n## Sources\n[1] Page 2. https://site2.example/page\n[2] Page 1. https://site1.example/page"
    )
    assert "elsewhere" not in report.text
    assert report.stats["link_urls_dropped"] == 1 and report.stats["unresolved_removed"] == 0
    assert report.stats["markers"] == 2


def test_a_link_form_marker_of_a_source_never_read_is_removed_and_counted():
    report = check_citations("Fares rose [1]. A forum disagrees [5](https://forum.example/t/1).", sources(1))
    assert report.text == "Fares rose [1]. A forum disagrees.\n\n## Sources\n[1] Page 1. https://site1.example/page"
    assert report.stats["link_urls_dropped"] == 1
    assert report.stats["unresolved_removed"] == 1 and report.stats["unresolved_numbers"] == [5]


def test_a_number_in_parentheses_after_a_marker_is_not_a_link():
    report = check_citations("Prices rose [1](2019).", sources(1))
    assert report.text.startswith("Prices rose [1](2019).\n\n## Sources\n")
    assert report.stats["link_urls_dropped"] == 0


def test_bracketed_years_are_left_as_text_and_counted():
    text = "In [2023] fares rose [1]; over [2019-2021] and [1999] they fell [2, 2020]. A blog [7] agrees."
    report = check_citations(text, sources(2))
    assert report.text.split("\n\n## Sources\n")[0] == (
        "In [2023] fares rose [1]; over [2019-2021] and [1999] they fell [2] [2020]. A blog agrees."
    )
    assert report.stats["years_left"] == 4
    assert report.stats["markers"] == 3 and report.stats["resolved"] == 2
    assert report.stats["unresolved_removed"] == 1 and report.stats["unresolved_numbers"] == [7]


def test_a_year_link_is_an_ordinary_link():
    report = check_citations("The [2023](https://report.example/2023) report.", sources(1))
    assert report.text == "The 2023 report."  # an ordinary link to a page never read: its text stays
    assert report.stats["years_left"] == 1 and report.stats["link_urls_dropped"] == 0
    assert report.stats["markers"] == 0 and report.stats["urls_removed"] == 1


def test_a_url_a_page_planted_is_removed_from_the_answer_and_recorded():
    """A page told the writer to include a tracking link (as an image, a link and a bare URL): each
    URL that names no source read goes, the text around it stays, and the removal is recorded; the
    URL of a source read stays."""
    from atelier.graphs.sources import citation_degradations

    text = (
        "Fares rose [1] (see https://site1.example/page). ![pixel](https://track.example/p.gif?u=alice) "
        "Read [more here](https://track.example/c?id=7) or at https://track.example/r?x=1."
    )
    report = check_citations(text, sources(1))
    body = report.text.split("\n\n## Sources\n")[0]
    assert body == "Fares rose [1] (see https://site1.example/page). pixel Read more here or at ."
    assert "track.example" not in report.text
    assert report.stats["urls_removed"] == 3
    [degraded] = citation_degradations(report, "write")
    assert degraded.kind == "citation_removed" and degraded.count == 3
    assert "https://track.example/p.gif?u=alice" in degraded.detail


def test_a_year_sized_number_is_a_citation_when_that_many_sources_were_shown():
    report = check_citations("Fact [1950]. Year [1999]. Outside [1900].", sources(1950))
    assert report.text.split("\n\n## Sources\n")[0] == "Fact [1]. Year [1999]. Outside [2]."
    assert [c.source_id for c in report.citations] == ["w-1950", "w-1900"]
    assert report.stats["years_left"] == 1 and report.stats["unresolved_removed"] == 0


def test_source_n_forms_are_rewritten_to_the_canonical_marker():
    text = (
        "Costs rose [Source 2], fell [source 1, 3], held [Sources 1-2] (Source 3) [Source: 2] "
        "[source #1]. A forum [Source 9] and (source 8) disagree."
    )
    report = check_citations(text, sources(3))
    assert report.text.split("\n\n## Sources\n")[0] == (
        "Costs rose [1], fell [2, 3], held [2, 1] [3] [1] [2]. A forum and disagree."
    )
    assert [c.source_id for c in report.citations] == ["w-2", "w-1", "w-3"]
    assert report.stats["markers"] == 10 and report.stats["resolved"] == 8
    assert report.stats["unresolved_removed"] == 2 and report.stats["unresolved_numbers"] == [8, 9]


def test_a_source_n_form_names_a_source_even_when_the_number_looks_like_a_year():
    report = check_citations("Claim [Source 2023].", sources(1))
    assert report.text == "Claim."
    assert report.stats["years_left"] == 0 and report.stats["unresolved_numbers"] == [2023]


def test_removing_a_marker_never_joins_two_lines():
    report = check_citations("First line\n[7] second line [1].", sources(1))
    assert report.text.startswith("First line\n second line [1].\n\n## Sources\n")
