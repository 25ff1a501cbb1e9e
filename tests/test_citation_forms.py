"""Issue 41, item 2: the citation check touches only citation markers and the model's own source
list when that list is a list of sources; it never edits code; every bracket form a model writes for
a citation is parsed (or counted); renumbering never leaves a marker pointing elsewhere; a removed
list's URLs the run never read are counted. The examples of the issue, then properties over
generated answers."""

from __future__ import annotations

import re

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from atelier.agents.citations import SourceRef, check_citations, cited_numbers
from atelier.graphs.sources import citation_degradations


def sources(n: int) -> list[SourceRef]:
    return [
        SourceRef(id=f"w-{i}", url=f"https://site{i}.example/page", title=f"Page {i}", sha256=f"{i:064x}")
        for i in range(1, n + 1)
    ]


def body(report) -> str:
    return report.text.split("\n\n## Sources\n[")[0]


# ----------------------------------------------------------------------------- the examples


def test_a_sources_or_references_section_that_is_content_is_kept_whole():
    for text in (
        "Eat well [1].\n\n## Sources\n- Protein sources: beans, lentils and tofu.\n- Iron sources: spinach.",
        "Prepare [2].\n\n## References\n1. Ask two former managers to be your references.\n2. Tell them first.",
    ):
        report = check_citations(text, sources(3))
        assert body(report) == text.replace("[2]", "[1]")
        assert report.stats["model_source_list_removed"] is False


def test_code_spans_and_blocks_are_never_edited():
    text = "Index it as `arr[12]`; x = a[5] + b[0] [2].\n\n```python\nx = a[5] + b[0]\nprint(arr[1])\n```\n\n    y = c[3]\n"
    report = check_citations(text, sources(3))
    out = body(report)
    assert "`arr[12]`" in out and "```python\nx = a[5] + b[0]\nprint(arr[1])\n```" in out and "    y = c[3]" in out
    assert report.stats["markers"] == 3  # outside code a[5] and b[0] read as markers (unread: removed), and [2]
    inline = check_citations("Use `a[1]` and ``b[`2`]`` here [1].", sources(2))
    assert body(inline) == "Use `a[1]` and ``b[`2`]`` here [1]."


def test_every_bracket_form_is_parsed_and_renumbering_points_at_the_same_source():
    report = check_citations("A [3]. B [^3]. C【2】. D [ 1 ]. E [2 ]. F【1†L3-L9】. G [1 and 3].", sources(3))
    assert body(report) == "A [1]. B [1]. C[2]. D [3]. E [2]. F[3]. G [3, 1]."
    by_number = {c.number: c.source_id for c in report.citations}
    assert by_number == {1: "w-3", 2: "w-2", 3: "w-1"}
    assert report.stats["markers"] == 8 and report.stats["unresolved_removed"] == 0


def test_unknown_numbers_in_any_form_are_removed_and_counted_and_unreadable_forms_counted():
    report = check_citations("A [^9]. B【7】. C [ 9 ]. D [3a]. E [1].", sources(2))
    assert body(report) == "A. B. C. D [3a]. E [1]."
    assert report.stats["unresolved_numbers"] == [7, 9] and report.stats["unresolved_removed"] == 3
    assert report.stats["unparsed_markers"] == 1 and report.stats["unparsed_examples"] == ["[3a]"]


def test_a_source_list_followed_by_a_closing_line_is_removed_and_its_unread_urls_counted():
    text = (
        "Answer [1].\n\n## Sources\n1. Page 1 — https://site1.example/page\n"
        "2. A forum — https://forum.example/t/9\n\nHope this helps!"
    )
    report = check_citations(text, sources(2))
    assert report.text == "Answer [1].\n\nHope this helps!\n\n## Sources\n[1] Page 1. https://site1.example/page"
    assert report.text.count("## Sources") == 1
    assert report.stats["model_list_unread_urls"] == 1 and report.stats["model_list_unread"] == [
        "https://forum.example/t/9"
    ]
    kinds = {d.kind: d for d in citation_degradations(report, "answer")}
    assert kinds["citation_removed"].count == 1 and "forum.example" in kinds["citation_removed"].detail


def test_a_headless_list_of_labelled_urls_at_the_end_is_the_models_source_list():
    text = "Answer [2].\n\n[1] Page 1. https://site1.example/page\n[2] Other. https://elsewhere.example/x"
    report = check_citations(text, sources(2))
    assert report.text == "Answer [1].\n\n## Sources\n[1] Page 2. https://site2.example/page"
    assert report.stats["model_list_unread_urls"] == 1 and report.stats["markers"] == 1


# ----------------------------------------------------------------------------- properties

N_SHOWN = 4
WORDS = st.sampled_from(
    ["Trains", "cost", "less", "in", "spring", "beans", "and", "tofu", "help", "x", "Book", "early"]
)
PROSE = st.lists(WORDS, min_size=1, max_size=6).map(" ".join)
FORMS = ["[{a}]", "[ {a} ]", "[{a} ]", "[^{a}]", "【{a}】", "[{a}, {b}]", "[{a}-{b}]", "[Source {a}]", "(Source {a})"]
FORMS += ["[{a}](https://x.example/{a})", "【{a}†L1-L2】", "[{a} and {b}]", "[source {a}, {b}]"]


@st.composite
def markers(draw):
    form = draw(st.sampled_from(FORMS))
    a = draw(st.integers(1, N_SHOWN + 3))
    b = draw(st.integers(a, a + 2)) if "-" in form else draw(st.integers(1, N_SHOWN + 3))
    text = form.format(a=a, b=b)
    numbers = list(range(a, b + 1)) if "{a}-{b}" in form else [a, b] if "{b}" in form else [a]
    return text, numbers


CODE = st.sampled_from(["`arr[12]`", "`x = a[5] + b[0]`", "``m[`1`]``", "`[2]`", "`【3】`"])
BLOCK = st.sampled_from(["```\nx = a[5] + b[0]\n```", "~~~\nfor i in v[1]: pass\n~~~", "```python\nprint([3])\n```"])
CONTENT_LIST = st.sampled_from(
    [
        "## Sources\n- Protein sources: beans, lentils and tofu.\n- Iron: spinach.",
        "## References\n1. Ask two former managers to be your references.\n2. Thank them.",
    ]
)


@st.composite
def answers(draw):
    """An answer as parts: ("prose", text) | ("marker", text, numbers) | ("code", text), and the
    paragraphs (code blocks, content lists) that stand on their own lines."""
    paragraphs, expected = [], []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["para", "para", "block", "list"]))
        if kind == "block":
            paragraphs.append(draw(BLOCK))
            continue
        if kind == "list":
            paragraphs.append(draw(CONTENT_LIST))
            continue
        pieces = []
        for _ in range(draw(st.integers(1, 5))):
            choice = draw(st.sampled_from(["prose", "marker", "code"]))
            if choice == "marker":
                text, numbers = draw(markers())
                pieces.append(text)
                expected.append(numbers)
            elif choice == "code":
                pieces.append(draw(CODE))
            else:
                pieces.append(draw(PROSE))
        paragraphs.append(" ".join(pieces) + ".")
    own_list = draw(st.booleans())
    unread = draw(st.integers(0, 2))
    if own_list:
        entries = [f"{i}. Page {i}. https://site{i}.example/page" for i in range(1, 3)]
        entries += [f"{i + 3}. A forum. https://forum{i}.example/t" for i in range(unread)]
        paragraphs.append("## Sources\n" + "\n".join(entries))
        if draw(st.booleans()):
            paragraphs.append("Hope this helps!")
    return "\n\n".join(paragraphs), expected, own_list, unread


def without_markers(text: str) -> str:
    """The text with every marker (and a space before it) taken out, whitespace normalised."""
    pattern = re.compile(
        r"[ \t]?(?:\[\^?[ \t]*\d+[^\]\n]*\](?:\(https?://[^)]*\))?|【[^】]*】|\(Source [^)]*\)|\[[Ss]ource [^\]]*\])"
    )
    code = re.compile(r"```.*?```|~~~.*?~~~|(?<!`)(`+)(?!`).+?(?<!`)\1(?!`)", re.DOTALL)
    kept, last = [], 0
    for m in code.finditer(text):
        kept.append(pattern.sub("", text[last : m.start()]))
        kept.append(m.group(0))
        last = m.end()
    kept.append(pattern.sub("", text[last:]))
    return " ".join("".join(kept).split())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answers())
def test_only_markers_and_the_models_own_source_list_change(answer):
    text, expected, own_list, unread = answer
    shown = sources(N_SHOWN)
    report = check_citations(text, shown)
    out = report.text.split("\n\n## Sources\n[")[0] if report.citations else report.text
    source = text.split("\n\n## Sources\n1. Page 1.")[0] if own_list else text
    closing = "\n\nHope this helps!" if own_list and text.endswith("Hope this helps!") else ""
    # prose and code, as written: only markers differ
    assert without_markers(out) == without_markers(source + closing)
    for piece in re.findall(r"```.*?```|~~~.*?~~~", text, re.DOTALL):
        assert piece in out
    # each marker kept names the sources its original named, in order (unread numbers dropped)
    by_number = {c.number: c.source_id for c in report.citations}
    kept = [[shown[n - 1].id for n in dict.fromkeys(numbers) if 1 <= n <= N_SHOWN] for numbers in expected]
    assert [[by_number[n] for n in numbers] for numbers in cited_numbers(out)] == [k for k in kept if k]
    # every number is counted, resolved or removed
    assert report.stats["markers"] == sum(len(numbers) for numbers in expected)
    assert report.stats["unresolved_removed"] == sum(1 for ns in expected for n in ns if not 1 <= n <= N_SHOWN)
    assert report.stats["unparsed_markers"] == 0
    assert report.stats["model_source_list_removed"] is own_list
    assert report.stats["model_list_unread_urls"] == (unread if own_list else 0)
    assert report.text.count("\n## Sources\n[") <= 1


def test_a_link_form_marker_opening_a_line_is_a_citation_not_a_source_list():
    # found by the property above: the whole answer taken for a headless source list
    report = check_citations("[1](https://x.example/1).", sources(2))
    assert body(report) == "[1]." and report.stats["model_source_list_removed"] is False


@settings(max_examples=300, deadline=None)
@example("-\t\t1")  # a list item's code: missed by the shortcut until a run of this test drew it
@given(
    st.lists(
        st.sampled_from(
            [
                "text [1]",
                "    indented",
                "\tTabbed",
                "> quote",
                ">     quoted code",
                "```",
                "~~~",
                "- item",
                "-\t\tlisted code",
                "1.      listed code",
                "",
                "  two",
            ]
        )
        | st.text(alphabet=" \t>`~-+*.)x[1]\n", max_size=12),
        max_size=12,
    ).map("\n".join)
)
def test_the_code_block_lines_are_commonmarks_whether_or_not_the_text_is_parsed(text):
    """Issue 48: texts that cannot hold a code block skip the parse; the lines found are the same
    (a list item's code, `-\t\t1`, was missed until a run of this test found it)."""
    from atelier.agents.citations import _code_lines, _markdown

    parsed = {
        line
        for token in _markdown().parse(text)
        if token.type in ("fence", "code_block") and token.map
        for line in range(token.map[0], token.map[1])
    }
    assert _code_lines(text) == parsed
