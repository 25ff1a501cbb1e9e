"""Web search providers, page fetch + extraction, the web cache and the sandbox web.

Entry point: `tools.web.build_web(WebConfig) -> Web` (search + fetch + cache for one run).

    config.py        WebConfig / SandboxConfig: the recipe's [web] table
    search/          SearchProvider + SearchResult; searxng (default: the sandbox), tavily, serper, brave
    readers/         PageReader: direct (guarded httpx + trafilatura) and jina (Jina Reader)
    http.py          the one HTTP client: pooled, redirects followed by hand, caps on bytes and time
    url_guard.py     SSRF guard: public http(s) addresses only, unless allow-listed
    extract.py       charset decoding and main-text extraction
    cache.py         content-addressed web cache: live | record | replay
    untrusted.py     web text wrapped as data, not instructions, for prompts
    sandbox/         the sandbox web: corpora, BM25 / hybrid ranking, SearXNG-compatible HTTP server
"""
