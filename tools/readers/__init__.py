"""Page readers: `direct` (httpx + trafilatura, the default) and `jina` (Jina Reader)."""
