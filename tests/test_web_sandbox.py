"""The sandbox web: corpora, ranking, the SearXNG-compatible endpoint and the document pages."""

from __future__ import annotations

import json
import random
from pathlib import Path

import httpx
import pytest

from atelier.benchmarks.common.errors import ConfigError, DataError
from atelier.benchmarks.data_files import data_dir
from atelier.tools.config import SandboxConfig, WebConfig
from atelier.tools.sandbox.app import PAGE_SIZE
from atelier.tools.sandbox.corpus import SAMPLE_PAGES, load_corpus, wiki_url
from atelier.tools.sandbox.ranking import Bm25Ranker, HybridRanker, build_ranker
from atelier.tools.sandbox.server import SandboxWeb
from atelier.tools.sandbox.urls import doc_url, mirror_url
from atelier.tools.web import SANDBOX_ORIGIN, build_web

FIXTURE_CORPUS = Path(__file__).parent / "fixtures" / "web" / "corpus"
NAV_AND_FOOTER = (
    "Skip to main content",
    "Browse all pages",
    "Search this sandbox",
    "Privacy notice",
    "Served offline",
    "More pages",
)

needs_wiki = pytest.mark.skipif(
    data_dir() is None or not (data_dir() / "wiki_summaries" / "summaries_en.json").exists(),
    reason="wiki_summaries not in ATELIER_DATA_DIR",
)


@pytest.fixture(scope="module")
def fixture_sandbox():
    with SandboxWeb.from_config(SandboxConfig(corpus=str(FIXTURE_CORPUS))) as sandbox:
        yield sandbox


@pytest.fixture(scope="module")
def wiki_corpus():
    return load_corpus("wiki")


# ------------------------------------------------------------------------------------ corpora


def test_folder_corpus_reads_jsonl_and_html_with_stable_urls():
    corpus = load_corpus(str(FIXTURE_CORPUS))
    assert len(corpus) == 13
    heron = corpus.documents[corpus.by_id["heron-fishing"]]
    assert heron.url == "https://field-notes.example/birds/heron-fishing"
    assert len(heron.paragraphs()) == 3
    compost = corpus.documents[corpus.by_id["compost"]]  # the record has no url of its own
    assert compost.url == "https://corpus.sandbox.invalid/doc/compost"
    kingfisher = corpus.documents[corpus.by_id["kingfisher"]]  # from the HTML file
    assert kingfisher.title == "The kingfisher's dive"
    assert kingfisher.url == "https://field-notes.example/birds/kingfisher-dive"
    assert "wedge-shaped bill" in kingfisher.text and "newsletter" not in kingfisher.text
    assert corpus.document_by_url("https://field-notes.example/birds/heron-fishing#diet") == heron


def test_jsonl_record_without_text_names_file_line_and_field(tmp_path):
    bad = tmp_path / "docs.jsonl"
    bad.write_text('{"title": "ok", "text": "fine"}\n{"title": "no text here"}\n')
    with pytest.raises(DataError) as error:
        load_corpus(str(bad))
    assert (error.value.file, error.value.line, error.value.field) == (str(bad), 2, "text")


def test_jsonl_record_with_a_non_http_url_is_a_data_error(tmp_path):
    bad = tmp_path / "docs.jsonl"
    bad.write_text('{"title": "t", "text": "x", "url": "ftp://example.org/a"}\n')
    with pytest.raises(DataError, match="absolute http") as error:
        load_corpus(str(bad))
    assert error.value.field == "url"


def test_duplicate_ids_and_unknown_corpus_are_refused(tmp_path):
    dup = tmp_path / "dup.jsonl"
    dup.write_text('{"id": "a", "title": "t", "text": "x"}\n{"id": "a", "title": "u", "text": "y"}\n')
    with pytest.raises(DataError, match="duplicate document id 'a'"):
        load_corpus(str(dup))
    with pytest.raises(ConfigError, match="neither"):
        load_corpus(str(tmp_path / "missing"))


@needs_wiki
def test_wiki_corpus_has_every_summary_with_its_wikipedia_url(wiki_corpus):
    assert len(wiki_corpus) == 10033
    turing = wiki_corpus.documents[wiki_corpus.by_id["Alan Turing"]]
    assert turing.url == "https://en.wikipedia.org/wiki/Alan_Turing"
    assert wiki_url("C++") == "https://en.wikipedia.org/wiki/C%2B%2B"
    assert wiki_url("AC/DC") == "https://en.wikipedia.org/wiki/AC/DC"


# ------------------------------------------------------------------------------------ ranking


@needs_wiki
def test_title_queries_on_the_wiki_corpus_find_their_article_first(wiki_corpus):
    ranker = Bm25Ranker(wiki_corpus.documents)
    named = ["Alan Turing", "Photosynthesis", "Mount Fuji", "Lighthouse", "DNA", "Moon", "Bee", "Theatre", "Jazz"]
    sampled = [doc.title for doc in random.Random(7).sample(wiki_corpus.documents, 300)]
    misses = [
        title for title in named + sampled if wiki_corpus.documents[ranker.rank(title, 1)[0].index].title != title
    ]
    assert not [title for title in named if title in misses]
    assert len(misses) <= 3, misses  # 99.8% measured on 1,000 titles


def test_bm25_returns_only_matching_documents_in_a_stable_order():
    corpus = load_corpus(str(FIXTURE_CORPUS))
    ranker = Bm25Ranker(corpus.documents)
    hits = ranker.rank("sourdough starter feeding", 5)
    assert corpus.documents[hits[0].index].id == "sourdough-starter"
    assert all(hit.score > 0 for hit in hits)
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)
    assert ranker.rank("zzzz qqqq", 5) == []
    assert ranker.rank("", 5) == []


@pytest.mark.slow  # loads the MiniLM model (~10 s)
def test_hybrid_ranker_fuses_both_rankings_and_caches_corpus_embeddings(tmp_path, monkeypatch):
    monkeypatch.setenv("ATELIER_CACHE_DIR", str(tmp_path))
    corpus = load_corpus(str(FIXTURE_CORPUS))
    ranker = build_ranker(corpus, "hybrid")
    assert isinstance(ranker, HybridRanker)
    cached = list((tmp_path / "sandbox" / "embeddings").glob("*.npy"))
    assert len(cached) == 1
    # no shared word with the owl page: only the dense half can find it
    hits = ranker.rank("nocturnal raptor locating rodents by sound", 3)
    assert corpus.documents[hits[0].index].id == "owl-hearing"
    assert corpus.documents[ranker.rank("Maillard reaction", 1)[0].index].id == "maillard"
    mtime = cached[0].stat().st_mtime_ns
    build_ranker(corpus, "hybrid")
    assert cached[0].stat().st_mtime_ns == mtime  # embedded once, read back the second time


# ------------------------------------------------------------------------------------ server


def test_search_endpoint_speaks_searxng_json(fixture_sandbox):
    response = httpx.get(f"{fixture_sandbox.base_url}/search", params={"q": "jupiter moons", "format": "json"})
    assert response.status_code == 200
    data = response.json()
    assert data["query"] == "jupiter moons"
    for key in ("number_of_results", "answers", "corrections", "infoboxes", "suggestions", "unresponsive_engines"):
        assert key in data
    first = data["results"][0]
    assert first["url"] == "https://night-sky.example/planets/jupiter-moons"
    assert first["title"] == "The Galilean moons of Jupiter"
    assert first["content"].startswith("Galileo discovered")
    assert first["positions"] == [1] and first["engines"] == ["atelier-sandbox"]
    assert first["parsed_url"][1] == "night-sky.example"
    assert first["sandbox_url"] == doc_url(fixture_sandbox.base_url, "jupiter-moons")


def test_search_pages_ten_results_at_a_time(tmp_path):
    path = tmp_path / "lanterns.jsonl"
    path.write_text(
        "\n".join(
            json.dumps({"id": f"d{i}", "title": f"Lantern number {i}", "text": f"A lantern with {i} wicks."})
            for i in range(25)
        )
    )
    corpus = load_corpus(str(path))
    with SandboxWeb(corpus, build_ranker(corpus, "bm25")) as sandbox:
        pages = [
            httpx.get(f"{sandbox.base_url}/search", params={"q": "lantern", "format": "json", "pageno": n}).json()
            for n in (1, 2, 3, 4)
        ]
    sizes = [len(page["results"]) for page in pages]
    assert sizes == [PAGE_SIZE, PAGE_SIZE, 5, 0]
    urls = [result["url"] for page in pages for result in page["results"]]
    assert len(set(urls)) == 25
    assert pages[1]["results"][0]["positions"] == [PAGE_SIZE + 1]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"format": "json"}, "q is required"),
        ({"q": "x", "format": "json", "pageno": "0"}, "pageno"),
        ({"q": "x", "format": "json", "pageno": "two"}, "pageno"),
    ],
)
def test_bad_search_requests_get_a_400_with_the_reason(fixture_sandbox, params, message):
    response = httpx.get(f"{fixture_sandbox.base_url}/search", params=params)
    assert response.status_code == 400
    assert message in response.json()["error"]


def test_document_pages_carry_realistic_markup_and_the_citable_url(fixture_sandbox):
    response = httpx.get(doc_url(fixture_sandbox.base_url, "maillard"))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    html = response.text
    assert '<link rel="canonical" href="https://kitchen-lab.example/science/maillard">' in html
    for marker in ("<nav", "<footer", "<aside", "Skip to main content", "<article>"):
        assert marker in html
    mirrored = httpx.get(mirror_url(fixture_sandbox.base_url, "https://kitchen-lab.example/science/maillard"))
    assert mirrored.text == html


def test_unknown_documents_are_404(fixture_sandbox):
    assert httpx.get(doc_url(fixture_sandbox.base_url, "no-such-page")).status_code == 404
    assert httpx.get(mirror_url(fixture_sandbox.base_url, "https://elsewhere.example/")).status_code == 404


def test_html_documents_are_served_as_written(fixture_sandbox):
    html = httpx.get(doc_url(fixture_sandbox.base_url, "kingfisher")).text
    assert html == (FIXTURE_CORPUS / "kingfisher.html").read_text()


# ------------------------------------------------------------------------------------ through the Web


async def test_search_and_fetch_through_the_web_cite_stable_urls_and_drop_nav_and_footer(tmp_path):
    config = WebConfig(mode="live", cache_dir=tmp_path, sandbox=SandboxConfig(corpus=str(FIXTURE_CORPUS)))
    async with build_web(config) as web:
        results = await web.search("how does a heron catch fish", 3)
        assert results[0].url == "https://field-notes.example/birds/heron-fishing"
        assert results[0].provider == "searxng" and results[0].rank == 1
        page = await web.fetch(results[0].url)
    assert page.url == page.final_url == "https://field-notes.example/birds/heron-fishing"
    assert page.status == 200 and page.content_type == "text/html"
    assert page.title == "How herons fish in shallow water"
    corpus = load_corpus(str(FIXTURE_CORPUS))
    for paragraph in corpus.documents[corpus.by_id["heron-fishing"]].paragraphs():
        assert paragraph in page.text
    for boilerplate in NAV_AND_FOOTER:
        assert boilerplate not in page.text
    # where it was served from, said by the sandbox's stable address: never its loopback port
    assert (
        page.metadata["served_from"]
        == f"{SANDBOX_ORIGIN}/mirror?url=https%3A%2F%2Ffield-notes.example%2Fbirds%2Fheron-fishing"
    )
    assert page.metadata["description"] == "A field guide note on heron hunting technique"
    assert not page.from_cache


@needs_wiki
async def test_wiki_page_fetch_returns_the_summary_without_boilerplate(tmp_path):
    config = WebConfig(mode="live", cache_dir=tmp_path, sandbox=SandboxConfig(corpus="wiki"))
    async with build_web(config) as web:
        page = await web.fetch("https://en.wikipedia.org/wiki/Photosynthesis")
        results = await web.search("Photosynthesis", 5)
    assert results[0].url == "https://en.wikipedia.org/wiki/Photosynthesis"
    assert page.title == "Photosynthesis"
    assert "light energy" in page.text
    for boilerplate in NAV_AND_FOOTER:
        assert boilerplate not in page.text


async def test_a_url_outside_the_sandbox_corpus_fails_with_its_status(tmp_path):
    from atelier.tools.errors import FetchFailed

    config = WebConfig(mode="live", cache_dir=tmp_path, sandbox=SandboxConfig(corpus=str(FIXTURE_CORPUS)))
    async with build_web(config) as web:
        with pytest.raises(FetchFailed, match="HTTP 404") as failed:
            await web.fetch("https://not-in-the-corpus.example/page")
    # said of the URL asked for and the sandbox web, never of the sandbox's own (ephemeral) address
    assert (
        str(failed.value) == f"https://not-in-the-corpus.example/page: HTTP 404 from the sandbox:{FIXTURE_CORPUS} web"
    )


@pytest.mark.parametrize(
    ("url", "reason"), [("file:///etc/passwd", "scheme 'file'"), ("http://169.254.169.254/latest/", "link-local")]
)
async def test_the_sandbox_web_refuses_what_the_real_web_would(tmp_path, url, reason):
    from atelier.tools.errors import FetchRefused

    config = WebConfig(mode="live", cache_dir=tmp_path, sandbox=SandboxConfig(corpus=str(FIXTURE_CORPUS)))
    async with build_web(config) as web:
        with pytest.raises(FetchRefused, match=reason):
            await web.fetch(url)


@pytest.mark.skipif(not SAMPLE_PAGES.exists(), reason="benchmarks/sample/pages.jsonl is not bundled yet")
async def test_the_bundled_sample_pages_are_served_under_their_own_urls(tmp_path):
    corpus = load_corpus("sample")
    assert all(doc.url.startswith("https://") for doc in corpus.documents)
    first = corpus.documents[0]
    async with build_web(WebConfig(mode="live", cache_dir=tmp_path)) as web:  # the default: sample sandbox
        results = await web.search(first.title, 3)
        page = await web.fetch(first.url)
    assert results[0].url == first.url
    assert first.paragraphs()[0][:60] in " ".join(page.text.split())


async def test_extraction_in_worker_processes_gives_the_same_page_as_in_a_thread(tmp_path):
    from atelier.tools.extraction_pool import _pool

    pages = []
    for workers in (0, 2):
        config = WebConfig(
            mode="live",
            cache_dir=tmp_path / str(workers),
            reader_options={"extract_workers": workers},
            sandbox=SandboxConfig(corpus=str(FIXTURE_CORPUS)),
        )
        async with build_web(config) as web:
            [hit, *_] = await web.search("jupiter moons")
            pages.append(await web.fetch(hit.url))
    threaded, pooled = pages
    assert pooled.text == threaded.text and pooled.title == threaded.title and "Skip to main content" not in pooled.text
    assert _pool(2) is _pool(2)  # one pool per process, shared by every web
