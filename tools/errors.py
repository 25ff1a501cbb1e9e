"""Errors of the web tools. Each is an `AtelierError`: its message names the URL, key or query.

A graph that calls a tool catches `WebError` and shows the message to the model as the tool's
result; the CLI prints it as one line.
"""

from __future__ import annotations

from atelier.benchmarks.common.errors import AtelierError, EpisodeFailure


class WebError(AtelierError):
    """A search or fetch that did not produce a result."""


class FetchRefused(WebError):
    """The URL guard refused the URL: a scheme, host or address the policy does not allow."""


class FetchFailed(WebError):
    """The request was made but gave no usable page: network error, HTTP error status, bad body."""


class CapExceeded(FetchFailed):
    """A response went past a cap: bytes, redirects or total time."""


class UnsupportedContentType(FetchFailed):
    """The page is of a content type the extractor does not read (PDF, images, ...)."""


class SearchFailed(WebError):
    """A search provider answered with an error or with a body that is not its JSON format."""


class SearchBudgetSpent(SearchFailed):
    """An agent asked for a search past the number its session allows (`max_searches`)."""


class ReplayMiss(WebError, EpisodeFailure):
    """Replay mode was asked for a request that was never recorded. Replay never goes live."""


class NetworkDisabled(WebError):
    """A network call was attempted where the network is switched off (replay mode)."""
