"""The bundled sample suite: its content is consistent and the `sample` loader builds correct cases."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from collections import Counter, defaultdict
from pathlib import Path
from urllib.parse import urlparse

import pytest

from atelier.benchmarks.case import (
    Case,
    CaseView,
    ChatSession,
    ExplicitPersona,
    MemorySnippet,
    SearchSession,
    persona_facets,
)
from atelier.benchmarks.common.errors import ConfigError, DataError
from atelier.benchmarks.data_files import data_dir
from atelier.benchmarks.loaders import sample
from atelier.benchmarks.registry import get_benchmark, load_cases

SUITE = sample.load_suite()
ALL_CASES = load_cases("sample", split="all")
CASES_BY_ID = {case.id: case for case in ALL_CASES}
DISTRACTOR_PAGES = {
    "detox-tea-miracle",
    "crypto-passive-income",
    "secret-flight-hacks",
    "sourdough-starter-guide",
    "houseplants-low-light",
    "cat-vaccinations-guide",
}
QUANTITY = re.compile(r"[£€]?\d+(?:[.,]\d+)*%?")  # a number with its currency or percent sign


def _user_texts(item) -> list[str]:
    """What the user themself wrote in a history item: the texts rubric evidence may quote."""
    if item.type == "memory_snippet":
        return [item.text]
    if item.type == "search_session":
        return [q.query for q in item.queries]
    return [m.content for m in item.messages if m.role == "user"]


# --------------------------------------------------------------------------- counts and shape


def test_suite_has_the_specified_size():
    assert len(SUITE.personas) == 6
    assert len(SUITE.tasks) == 8
    assert len(SUITE.queries) == len(ALL_CASES) == 21
    assert 55 <= len(SUITE.pages) <= 65
    for user_id, items in SUITE.contexts.items():
        assert 10 <= len(items) <= 16, user_id
    assert set(SUITE.contexts) == set(SUITE.personas)


def test_each_task_has_two_or_three_distinct_users_and_each_user_has_cases():
    users_per_task = defaultdict(list)
    for query in SUITE.queries:
        users_per_task[query.taskid].append(query.userid)
    assert set(users_per_task) == set(SUITE.tasks)
    for task_id, users in users_per_task.items():
        assert 2 <= len(users) <= 3, task_id
        assert len(set(users)) == len(users), task_id
    assert {q.userid for q in SUITE.queries} == set(SUITE.personas)
    assert len({t.domain for t in SUITE.tasks.values()}) == 8


def test_gold_annotations_have_the_specified_shape():
    for query in SUITE.queries:
        gold = query.gold
        assert gold.information_need.strip(), query.id
        assert 3 <= len(gold.rubric_aspects) <= 6, query.id
        assert 3 <= len(gold.information_claims) <= 6, query.id
        assert 1 <= len(gold.rj_pairs) <= 2, query.id
        for pair in gold.rj_pairs:
            assert [j.criterion for j in pair.judgments] == list(sample.BESPOKE_CRITERIA), query.id
        for aspect in gold.rubric_aspects:
            assert aspect.aspect and aspect.reason and aspect.evidence, query.id


def test_case_gold_carries_claims_and_one_rj_pair_per_judgment():
    for query in SUITE.queries:
        gold = CASES_BY_ID[query.id].gold
        assert gold.information_claims == [c.claim for c in query.gold.information_claims]
        assert len(gold.rj_pairs) == 4 * len(query.gold.rj_pairs)
        assert all(1 <= pair.score <= 5 and pair.criterion in sample.BESPOKE_CRITERIA for pair in gold.rj_pairs)
        assert gold.relevant_history_ids == query.gold.relevant_history_ids


# --------------------------------------------------------------------------- cross-references


def test_every_relevant_history_id_exists_in_that_users_history():
    for case in ALL_CASES:
        assert case.gold.relevant_history_ids, case.id
        assert set(case.gold.relevant_history_ids) <= case.event_ids(), case.id


def test_every_claim_page_exists_and_no_claim_cites_a_distractor():
    assert DISTRACTOR_PAGES <= set(SUITE.pages)
    cited = set()
    for case in ALL_CASES:
        sources = case.gold.claim_sources
        assert list(sources) == case.gold.information_claims
        for claim, page_ids in sources.items():
            assert page_ids and set(page_ids) <= set(SUITE.pages), (case.id, claim)
            cited.update(page_ids)
    assert not cited & DISTRACTOR_PAGES
    assert len(cited) >= 45  # the corpus is genuinely used, not one page per domain


def _mentions(text: str, quantity: str) -> bool:
    """`quantity` occurs in `text` as a whole number (so `€5` is not found inside `€45` or `€5.50`)."""
    return re.search(r"(?<![\d.,])" + re.escape(quantity) + r"(?![\d]|[.,]\d)", text) is not None


def test_every_quantity_in_a_claim_appears_in_its_cited_pages():
    for query in SUITE.queries:
        for claim in query.gold.information_claims:
            text = " ".join(SUITE.pages[p].text for p in claim.pages)
            for quantity in QUANTITY.findall(claim.claim):
                assert _mentions(text, quantity), (query.id, quantity, claim.claim)


def test_the_quantity_check_catches_a_changed_figure():
    text = SUITE.pages["portugal-trip-budget"].text
    assert _mentions(text, "€4") and _mentions(text, "€3")
    assert not _mentions(text, "€6") and not _mentions(text, "€4.5")


def test_rubric_evidence_quotes_the_persona_or_a_relevant_history_item():
    for query in SUITE.queries:
        persona_values = [value for _, value in persona_facets(SUITE.personas[query.userid].attributes())]
        items = {item.id: item for item in SUITE.contexts[query.userid]}
        history_texts = [t for i in query.gold.relevant_history_ids for t in _user_texts(items[i])]
        for aspect in query.gold.rubric_aspects:
            for quote in aspect.evidence.split(" [...] "):
                assert any(quote in text for text in persona_values + history_texts), (query.id, quote)


def test_clicked_corpus_urls_resolve_to_pages_with_the_same_title():
    by_url = {page.url: page for page in SUITE.pages.values()}
    corpus_hosts = {urlparse(url).hostname for url in by_url}
    clicks = 0
    for items in SUITE.contexts.values():
        for item in items:
            if item.type != "search_session":
                continue
            for record in item.queries:
                for click in record.clicked:
                    if click.url and urlparse(click.url).hostname in corpus_hosts:
                        clicks += 1
                        assert by_url[click.url].title == click.title, item.id
    assert clicks >= 15


# --------------------------------------------------------------------------- PDR protocol


def test_every_user_has_between_20_and_50_percent_conversational_items():
    for user_id, items in SUITE.contexts.items():
        share = sum(item.type in sample.CONVERSATIONAL_TYPES for item in items) / len(items)
        assert 0.2 <= share <= 0.5, (user_id, share)


def test_every_history_item_traces_to_an_existing_persona_trait():
    for case in ALL_CASES:
        traits = sample.context_traits(case.user_id)
        assert set(traits) == case.event_ids()
        paths = {path for path, _ in case.persona.facets()}
        assert set(traits.values()) <= paths, case.user_id


def test_every_user_has_distractor_items_no_query_needs():
    needed = defaultdict(set)
    for query in SUITE.queries:
        needed[query.userid].update(query.gold.relevant_history_ids)
    for user_id, items in SUITE.contexts.items():
        distractors = {item.id for item in items} - needed[user_id]
        assert distractors, user_id


def test_history_items_become_the_matching_event_types():
    expected = {"m": MemorySnippet, "d": ChatSession, "c": ChatSession, "s": SearchSession}
    case = CASES_BY_ID["q07"]
    for event in case.history:
        kind_letter = event.id.split(":")[1][0]
        assert isinstance(event, expected[kind_letter]), event.id
        if kind_letter == "c":
            assert event.title
        if kind_letter == "d":
            assert event.title is None
    dates = [event.timestamp for event in case.history]
    assert dates == sorted(dates)


def test_personas_use_the_pdr_sections_in_order():
    for persona in SUITE.personas.values():
        assert tuple(persona.attributes()) == sample.PERSONA_SECTIONS


def test_persona_fields_are_fields_of_the_real_pdr_personas():
    root = data_dir()
    source = root / "pdr_bench" / "personas_en.jsonl.gz" if root else None
    if source is None or not source.exists():
        pytest.skip("PDR-Bench personas not available (set ATELIER_DATA_DIR)")
    with gzip.open(source, "rt", encoding="utf-8") as handle:
        real = [json.loads(line) for line in handle if line.strip()]
    real_paths = {
        path for persona in real for path, _ in persona_facets({k: v for k, v in persona.items() if k != "userid"})
    }
    assert set(sample.PERSONA_SECTIONS) <= {key for persona in real for key in persona}
    for persona in SUITE.personas.values():
        assert persona.trait_paths() <= real_paths, persona.userid


# --------------------------------------------------------------------------- pages


def test_pages_have_exactly_the_served_fields_and_sensible_lengths():
    path = sample.bundled_root().joinpath(sample.PAGES_FILE)
    with path.open("r", encoding="utf-8") as handle:
        raw = [json.loads(line) for line in handle if line.strip()]
    assert all(set(record) == {"id", "title", "text", "topic", "description", "url"} for record in raw)
    urls = [record["url"] for record in raw]
    assert len(set(urls)) == len(urls)
    for page in SUITE.pages.values():
        words = len(page.text.split())
        assert 150 <= words <= 400, (page.id, words)
        assert "\n\n" in page.text, page.id
        assert urlparse(page.url).scheme == "https" and urlparse(page.url).hostname.endswith(".example")
    topics = Counter(page.topic for page in SUITE.pages.values())
    assert {t.domain for t in SUITE.tasks.values()} <= set(topics)
    assert sample.sample_pages()[0].id == next(iter(SUITE.pages))


# --------------------------------------------------------------------------- settings, splits, limit


def test_spec_is_registered_with_splits_and_settings():
    spec = get_benchmark("sample")
    assert spec.splits == ("all", "dev", "test")
    assert spec.settings == ("context", "task_only", "persona", "persona+context")
    assert spec.setting_default == "context" and spec.split_default == "all"
    with pytest.raises(ValueError, match="no setting"):
        load_cases("sample", setting="everything")


@pytest.mark.parametrize("setting", sample.SETTINGS)
def test_each_setting_view_exposes_what_it_should(setting):
    for case in load_cases("sample", setting=setting):
        assert isinstance(case, Case) and case.setting == setting
        assert case.persona is not None and case.history
        view = case.view()
        assert isinstance(view, CaseView) and not hasattr(view, "gold")
        assert "gold" not in view.model_dump() and "persona" not in view.model_dump()
        persona_events = [e for e in view.history if isinstance(e, ExplicitPersona)]
        implicit_ids = [e.id for e in view.history if not isinstance(e, ExplicitPersona)]
        history_ids = [e.id for e in case.history]
        if setting == "task_only":
            assert view.history == []
        elif setting == "context":
            assert not persona_events and implicit_ids == history_ids
        elif setting == "persona":
            assert implicit_ids == [] and len(persona_events) == 1
            assert persona_events[0].attributes == case.persona.attributes
        else:
            assert isinstance(view.history[0], ExplicitPersona) and implicit_ids == history_ids
        assert view.query.text == SUITE.tasks[int(case.task_id)].task


def test_dev_and_test_split_the_suite_by_whole_tasks():
    dev = load_cases("sample", split="dev")
    test = load_cases("sample", split="test")
    assert {c.id for c in dev} | {c.id for c in test} == set(CASES_BY_ID)
    assert not {c.id for c in dev} & {c.id for c in test}
    assert not {c.task_id for c in dev} & {c.task_id for c in test}
    assert abs(len(dev) - len(test)) <= 3
    assert all(c.meta["split"] == "dev" for c in dev) and all(c.meta["split"] == "test" for c in test)


def test_ids_are_stable_across_loads():
    reread = sample.read_suite(sample.bundled_root())  # a fresh parse, not the cached suite
    again = [reread.case(q, "context") for q in reread.queries]
    assert [c.id for c in again] == [c.id for c in ALL_CASES]
    assert [[e.id for e in c.history] for c in again] == [[e.id for e in c.history] for c in ALL_CASES]
    assert [c.model_dump() for c in load_cases("sample")] == [c.model_dump() for c in ALL_CASES]


def test_limit_gives_a_deterministic_subset_in_suite_order():
    first = [c.id for c in load_cases("sample", limit=5, seed=0)]
    assert first == [c.id for c in load_cases("sample", limit=5, seed=0)]
    assert len(first) == 5 and set(first) <= set(CASES_BY_ID)
    order = list(CASES_BY_ID)
    assert first == sorted(first, key=order.index)
    assert first != [c.id for c in load_cases("sample", limit=5, seed=1)]
    assert [c.id for c in load_cases("sample", split="dev", limit=100)] == [
        c.id for c in load_cases("sample", split="dev")
    ]
    assert load_cases("sample", limit=0) == []
    with pytest.raises(ConfigError):
        load_cases("sample", limit=-1)


def test_loaded_cases_are_independent_copies():
    first = load_cases("sample", limit=1)[0]
    first.gold.information_claims.clear()
    first.persona.attributes.clear()
    fresh = load_cases("sample", limit=1)[0]
    assert fresh.gold.information_claims and fresh.persona.attributes


def test_judge_accessors_reject_unknown_ids():
    with pytest.raises(KeyError):
        sample.context_traits("u99")


# --------------------------------------------------------------------------- bad input


def _edit_line(path: Path, line: int, edit) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[line - 1] = edit(lines[line - 1])
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _json_edit(mutate):
    def edit(raw: str) -> str:
        record = json.loads(raw)
        mutate(record)
        return json.dumps(record, ensure_ascii=False)

    return edit


def _set_relevant(r):
    r["gold"]["relevant_history_ids"][0] = "u6:m99"


def _set_claim_page(r):
    r["gold"]["information_claims"][1]["pages"][0] = "no-such-page"


def _set_score(r):
    r["gold"]["rj_pairs"][0]["judgments"][2]["score"] = 7


def _set_trait(r):
    r["trait"] = "Preferences and Interests > Hobbies"


def _set_date(r):
    r["date"] = "last spring"


def _drop_section(r):
    del r["Health Status"]


def _copy_taskid(r):
    r["taskid"] = 1


BAD_RECORDS = [
    ("queries.jsonl", 3, _json_edit(_set_relevant), "gold.relevant_history_ids.0", "not in u6's history"),
    ("queries.jsonl", 1, _json_edit(_set_claim_page), "gold.information_claims.1.pages.0", "unknown page"),
    ("queries.jsonl", 2, _json_edit(_set_score), "gold.rj_pairs.0.judgments.2.score", "less than or equal to 5"),
    ("contexts.jsonl", 5, _json_edit(_set_trait), "trait", "not a facet of persona"),
    ("contexts.jsonl", 2, _json_edit(_set_date), "date", "date"),
    ("personas.jsonl", 2, _json_edit(_drop_section), "Health Status", "Field required"),
    ("tasks.jsonl", 2, _json_edit(_copy_taskid), "taskid", "duplicate taskid"),
    ("pages.jsonl", 4, lambda raw: raw[:40], None, "invalid JSON"),
]


@pytest.mark.parametrize(("name", "line", "edit", "field", "message"), BAD_RECORDS)
def test_a_bad_record_raises_data_error_naming_file_line_and_field(tmp_path, name, line, edit, field, message):
    for source in sample.bundled_root().iterdir():
        if source.name.endswith(".jsonl"):
            shutil.copyfile(str(source), tmp_path / source.name)
    _edit_line(tmp_path / name, line, edit)
    with pytest.raises(DataError) as caught:
        sample.read_suite(tmp_path)
    error = caught.value
    assert Path(error.file) == tmp_path / name
    assert error.line == line
    assert error.field == field
    assert message in str(error)
    assert f"{name}:{line}" in str(error)


def test_a_missing_file_raises_data_error(tmp_path):
    with pytest.raises(DataError, match="missing"):
        sample.read_suite(tmp_path)
