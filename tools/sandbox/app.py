"""The sandbox web as an ASGI app (Starlette): SearXNG-compatible search and one HTML page per document.

Search answers in SearXNG's JSON format (`/search?q=...&format=json&pageno=N`, ten results a
page). Each result's `url` is the document's citable URL (its own, or its Wikipedia article);
`sandbox_url` (an extra field SearXNG clients ignore) is the page on this server. `/mirror?url=`
serves a document by its citable URL, which is how the `direct` reader fetches it.
Pages carry a site header, navigation, breadcrumb, a related-pages sidebar and a footer, so main
text extraction has real work to do.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any
from urllib.parse import urlparse

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from atelier.tools.sandbox.corpus import Corpus, Document
from atelier.tools.sandbox.ranking import Ranker
from atelier.tools.sandbox.urls import DOC_PATH, HEALTH_PATH, MIRROR_PATH, SEARCH_PATH, doc_url

SITE_NAME = "Atelier Sandbox Web"
ENGINE = "atelier-sandbox"
PAGE_SIZE = 10
SNIPPET_CHARS = 280
RELATED_PAGES = 5


def snippet(text: str, limit: int = SNIPPET_CHARS) -> str:
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    return flat[:limit].rsplit(" ", 1)[0] + " …"


class SandboxSite:
    """Renders the corpus: search answers and document pages."""

    def __init__(self, corpus: Corpus, ranker: Ranker) -> None:
        self.corpus = corpus
        self.ranker = ranker
        self._templates = jinja2.Environment(
            loader=jinja2.PackageLoader("atelier.tools.sandbox", "templates"), autoescape=jinja2.select_autoescape()
        )
        self._by_topic: dict[str, list[int]] = defaultdict(list)
        for index, document in enumerate(corpus.documents):
            if document.topic:
                self._by_topic[document.topic].append(index)

    def _render(self, template: str, **context: Any) -> str:
        return self._templates.get_template(template).render(
            site_name=SITE_NAME, corpus_name=self.corpus.name, **context
        )

    def _related(self, document: Document) -> list[Document]:
        siblings = self._by_topic.get(document.topic, [])
        if len(siblings) < 2:
            return []
        start = siblings.index(self.corpus.by_id[document.id])
        count = min(RELATED_PAGES, len(siblings) - 1)
        return [self.corpus.documents[siblings[(start + step) % len(siblings)]] for step in range(1, count + 1)]

    def document_page(self, document: Document, base_url: str) -> str:
        if document.html is not None:
            return document.html
        return self._render(
            "page.html",
            doc=document,
            related=self._related(document),
            other_url=lambda other: doc_url(base_url, other.id),
        )

    def not_found_page(self, message: str) -> str:
        return self._render("not_found.html", message=message)

    def home_page(self) -> str:
        topics = sorted((topic, len(indices)) for topic, indices in self._by_topic.items())
        return self._render("home.html", count=len(self.corpus), topics=topics)

    def search(self, query: str, pageno: int, base_url: str) -> tuple[list[dict[str, Any]], bool]:
        """One page of SearXNG result records, and whether another page follows."""
        hits = self.ranker.rank(query, pageno * PAGE_SIZE + 1)
        first = (pageno - 1) * PAGE_SIZE
        results = []
        for position, hit in enumerate(hits[first : first + PAGE_SIZE], start=first + 1):
            document = self.corpus.documents[hit.index]
            results.append(
                {
                    "url": document.url,
                    "title": document.title,
                    "content": snippet(document.text),
                    "engine": ENGINE,
                    "engines": [ENGINE],
                    "positions": [position],
                    "score": round(hit.score, 6),
                    "category": "general",
                    "template": "default.html",
                    "parsed_url": list(urlparse(document.url)),
                    "publishedDate": None,
                    "sandbox_url": doc_url(base_url, document.id),
                }
            )
        return results, len(hits) > first + PAGE_SIZE

    def search_page(self, query: str, pageno: int, base_url: str) -> str:
        results, has_next = self.search(query, pageno, base_url)
        for result in results:
            result["page_url"] = result["sandbox_url"]
        return self._render(
            "search.html",
            query=query,
            results=results,
            pageno=pageno,
            first_rank=(pageno - 1) * PAGE_SIZE + 1,
            has_next=has_next,
        )


def _bad_request(message: str, as_json: bool) -> Response:
    if as_json:
        return JSONResponse({"error": message}, status_code=400)
    return HTMLResponse(message, status_code=400)


def create_app(corpus: Corpus, ranker: Ranker) -> Starlette:
    site = SandboxSite(corpus, ranker)

    def base_of(request: Request) -> str:
        return str(request.base_url).rstrip("/")

    async def home(request: Request) -> Response:
        return HTMLResponse(site.home_page())

    async def search(request: Request) -> Response:
        as_json = request.query_params.get("format") == "json"
        query = request.query_params.get("q", "").strip()
        try:
            pageno = int(request.query_params.get("pageno", "1"))
        except ValueError:
            return _bad_request("pageno must be a positive integer", as_json)
        if pageno < 1:
            return _bad_request("pageno must be a positive integer", as_json)
        if not query:
            return _bad_request("q is required", as_json)
        # ranking off the event loop: a hybrid query embeds with MiniLM, pages keep being served meanwhile
        if not as_json:
            return HTMLResponse(await run_in_threadpool(site.search_page, query, pageno, base_of(request)))
        results, _ = await run_in_threadpool(site.search, query, pageno, base_of(request))
        return JSONResponse(
            {
                "query": query,
                "number_of_results": 0,  # as SearXNG reports when its engines give no estimate
                "results": results,
                "answers": [],
                "corrections": [],
                "infoboxes": [],
                "suggestions": [],
                "unresponsive_engines": [],
            }
        )

    def page_response(document: Document | None, request: Request, missing: str) -> Response:
        if document is None:
            return HTMLResponse(site.not_found_page(missing), status_code=404)
        return HTMLResponse(site.document_page(document, base_of(request)))

    async def document(request: Request) -> Response:
        doc_id = request.path_params["doc_id"]
        index = corpus.by_id.get(doc_id)
        found = None if index is None else corpus.documents[index]
        return page_response(found, request, f"No page with id {doc_id!r} in this sandbox.")

    async def mirror(request: Request) -> Response:
        url = request.query_params.get("url", "")
        return page_response(corpus.document_by_url(url), request, f"{url!r} is not part of this sandbox's corpus.")

    async def health(request: Request) -> Response:
        return JSONResponse(
            {
                "status": "ok",
                "corpus": corpus.name,
                "documents": len(corpus),
                "ranker": ranker.name,
                "fingerprint": corpus.fingerprint,
            }
        )

    return Starlette(
        routes=[
            Route("/", home),
            Route(SEARCH_PATH, search),
            Route(DOC_PATH + "{doc_id:path}", document),
            Route(MIRROR_PATH, mirror),
            Route(HEALTH_PATH, health),
        ]
    )
