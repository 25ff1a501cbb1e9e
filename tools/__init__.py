"""Web search providers, page fetch + extraction, the web cache and the sandbox web."""
