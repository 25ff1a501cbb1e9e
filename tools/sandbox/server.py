"""`SandboxWeb`: a corpus, its ranker and the HTTP server that serves them on loopback."""

from __future__ import annotations

from atelier.tools.asgi_server import AsgiServer
from atelier.tools.config import SandboxConfig
from atelier.tools.sandbox.app import create_app
from atelier.tools.sandbox.corpus import Corpus, load_corpus
from atelier.tools.sandbox.ranking import Ranker, build_ranker


class SandboxWeb(AsgiServer):
    """Use as a context manager to serve on a thread, or `serve_forever()` to block (the CLI)."""

    def __init__(self, corpus: Corpus, ranker: Ranker, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(create_app(corpus, ranker), host, port)
        self.corpus = corpus
        self.ranker = ranker

    @classmethod
    def from_config(cls, config: SandboxConfig) -> SandboxWeb:
        corpus = load_corpus(config.corpus)
        return cls(corpus, build_ranker(corpus, config.ranker), config.host, config.port)
