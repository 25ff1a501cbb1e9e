"""The model gateway on litellm's real HTTP path (the stub server) and on the scripted model."""

from __future__ import annotations

import asyncio
from typing import Literal

import pytest
from pydantic import BaseModel

from atelier.agents.models.cache import ResponseCache
from atelier.agents.models.gateway import Gateway, ModelCallError, StructuredOutputError
from atelier.agents.models.ledger import Ledger, call_tags, read_ledger
from atelier.agents.models.settings import ModelSettings
from tests.openai_stub import OpenAIStub


class AspectScore(BaseModel):
    match_score: Literal[0, 1, 2]
    reason: str


MESSAGES = [{"role": "system", "content": "You are a judge."}, {"role": "user", "content": "Score the answer please."}]


@pytest.fixture
def stub():
    with OpenAIStub(hang_s=3.0) as server:
        yield server


def _gateway(stub: OpenAIStub, tmp_path, **overrides) -> Gateway:
    settings = ModelSettings(
        model="openai/gpt-4o-mini",
        api_base=stub.base_url,
        api_key="sk-stub",
        retry_backoff_s=0.01,
        timeout_s=overrides.pop("timeout_s", 30.0),  # a loaded machine's first litellm call can take seconds
        **overrides,
    )
    return Gateway(
        {"judge": settings},
        cache=ResponseCache(tmp_path / "cache"),
        ledger=Ledger(tmp_path / "ledger.jsonl", run_id="r1"),
    )


async def test_success_records_server_tokens_and_cost(stub, tmp_path):
    gw = _gateway(stub, tmp_path)
    with call_tags(case="case-1"):
        answer = await gw.text("judge", MESSAGES)
    assert answer.startswith("Stub model answer.")
    [entry] = read_ledger(tmp_path / "ledger.jsonl")
    body = stub.requests[0]["body"]
    assert entry.prompt_tokens == sum(len(m["content"].split()) for m in body["messages"])
    assert entry.completion_tokens == len(answer.split())
    assert entry.cost_usd is not None and entry.cost_usd > 0  # gpt-4o-mini is priced in litellm's map
    assert (entry.run_id, entry.case_id, entry.role, entry.cache_hit, entry.attempts) == (
        "r1",
        "case-1",
        "judge",
        False,
        1,
    )
    assert entry.dry_run is False


@pytest.mark.parametrize("fault", ["429", "500", "503"])
async def test_transient_error_then_success_is_retried(stub, tmp_path, fault):
    stub.script([fault, "ok"])
    gw = _gateway(stub, tmp_path)
    result = await gw.structured("judge", MESSAGES, AspectScore)
    assert result.match_score in (0, 1, 2)
    assert [r["behaviour"] for r in stub.requests] == [fault, "ok"]
    [entry] = gw.ledger.entries
    assert entry.attempts == 2 and entry.status == "ok"


async def test_timeout_then_success(stub, tmp_path):
    stub.script(["timeout", "ok"])
    gw = _gateway(stub, tmp_path, timeout_s=0.5)
    assert await gw.text("judge", MESSAGES)
    assert gw.ledger.entries[-1].attempts == 2


async def test_retries_are_bounded_and_the_error_is_clear(stub, tmp_path):
    stub.script(["429", "429", "429", "429"])
    gw = _gateway(stub, tmp_path, max_retries=2)
    with pytest.raises(ModelCallError) as info:
        await gw.text("judge", MESSAGES)
    assert info.value.attempts == 3
    assert "judge model openai/gpt-4o-mini" in str(info.value) and "RateLimitError" in str(info.value)
    assert len(stub.requests) == 3
    assert gw.ledger.entries[-1].status == "error"


async def test_persistent_timeout_fails_after_retries(stub, tmp_path):
    stub.script(["timeout", "timeout"])
    gw = _gateway(stub, tmp_path, timeout_s=0.3, max_retries=1)
    with pytest.raises(ModelCallError, match="after 2 attempts"):
        await gw.text("judge", MESSAGES)


async def test_retries_after_a_first_attempt_made_alone_keep_the_backoff_schedule(monkeypatch):
    """The gateway makes a call's first attempt without tenacity; the retries that follow wait as
    tenacity would have from the start: about retry_backoff_s * 2**(n-1) after attempt n."""
    from atelier.agents.models import gateway as gateway_module

    waits: list[float] = []

    async def sleep(seconds: float, *args, **kwargs) -> None:
        waits.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    settings = ModelSettings(model="openai/gpt-4o-mini", retry_backoff_s=1.0, max_retries=3)
    attempts: list[int] = []

    async def attempt() -> None:
        attempts.append(len(attempts) + 2)
        raise TimeoutError()  # retryable, every time

    with pytest.raises(asyncio.TimeoutError):
        await gateway_module._retried(attempt, settings, TimeoutError())
    assert attempts == [2, 3, 4]  # max_retries after the first
    assert len(waits) == 3
    for n, wait in enumerate(waits, start=1):  # the wait after attempt n: 2**(n-1) plus jitter up to 1
        assert 2 ** (n - 1) <= wait <= 2 ** (n - 1) + 1, (n, waits)


async def test_non_retryable_garbage_body_is_not_retried_forever(stub, tmp_path):
    stub.script(["garbage"] * 10)
    gw = _gateway(stub, tmp_path, max_retries=2)
    with pytest.raises(ModelCallError):
        await gw.text("judge", MESSAGES)
    assert len(stub.requests) <= 3


async def test_malformed_json_is_repaired_once(stub, tmp_path):
    stub.script(["malformed", "ok"])
    gw = _gateway(stub, tmp_path)
    result = await gw.structured("judge", MESSAGES, AspectScore)
    assert isinstance(result, AspectScore)
    assert [e.kind for e in gw.ledger.entries] == ["structured", "repair"]
    repair_messages = stub.requests[1]["body"]["messages"]
    assert repair_messages[-2]["role"] == "assistant"  # the broken answer is shown back
    assert "could not be used" in repair_messages[-1]["content"]


async def test_malformed_twice_raises_and_is_not_cached(stub, tmp_path):
    stub.script(["malformed", "malformed"])
    gw = _gateway(stub, tmp_path)
    with pytest.raises(StructuredOutputError, match="no valid AspectScore after one repair"):
        await gw.structured("judge", MESSAGES, AspectScore)
    assert len(gw.cache) == 0  # a rerun asks the model again instead of replaying the failure
    assert isinstance(await gw.structured("judge", MESSAGES, AspectScore), AspectScore)


async def test_same_request_twice_reaches_the_provider_once(stub, tmp_path):
    gw = _gateway(stub, tmp_path)
    first = await gw.structured("judge", MESSAGES, AspectScore)
    second = await gw.structured("judge", MESSAGES, AspectScore)
    assert first == second
    assert len(stub.requests) == 1
    assert [e.cache_hit for e in gw.ledger.entries] == [False, True]
    # a fresh gateway on the same cache directory (a second run) also hits
    again = _gateway(stub, tmp_path)
    assert await again.structured("judge", MESSAGES, AspectScore) == first
    assert len(stub.requests) == 1


async def test_cache_key_covers_what_changes_the_answer(stub, tmp_path):
    await _gateway(stub, tmp_path).text("judge", MESSAGES)
    await _gateway(stub, tmp_path, temperature=0.7).text("judge", MESSAGES)
    await _gateway(stub, tmp_path, seed=5).text("judge", MESSAGES)
    await _gateway(stub, tmp_path).structured("judge", MESSAGES, AspectScore)
    assert len(stub.requests) == 4


# ------------------------------------------------------------------ the scripted model


def _scripted(model: str = "scripted", tmp_path=None) -> Gateway:
    settings = ModelSettings(model=model, retry_backoff_s=0.001)
    cache = ResponseCache(tmp_path / "cache") if tmp_path else None
    return Gateway({"system": settings, "judge": settings}, cache=cache)


async def test_scripted_is_deterministic_and_says_dry_run():
    messages = [{"role": "user", "content": "Plan a trip to Kyoto in spring. I travel on a small budget."}]
    first = await _scripted().text("system", messages)
    second = await _scripted().text("system", messages)
    assert first == second
    assert first.startswith("DRY RUN")
    assert "I travel on a small budget." in first  # composed from the prompt's own material
    assert _scripted().dry_run and _scripted().ledger.entries == []


async def test_scripted_states_its_zero_price_so_litellm_does_not_price_the_call(monkeypatch):
    """litellm priced every scripted call twice (response metadata, then success logging), ~0.5 ms of
    CPU per call for a price known to be zero; the provider now says it in the response."""
    import litellm

    priced = []
    original = litellm.response_cost_calculator
    monkeypatch.setattr(litellm, "response_cost_calculator", lambda **kw: priced.append(kw) or original(**kw))
    gateway = _scripted()
    await gateway.text("system", [{"role": "user", "content": "What does a heat pump cost to run?"}])
    await asyncio.sleep(0.05)  # litellm's success logging runs as a task of its own after the call
    assert priced == []
    assert [e.cost_usd for e in gateway.ledger.entries] == [0.0]


async def test_litellm_does_no_logging_of_its_own_when_nothing_consumes_it(monkeypatch):
    """With no litellm callback registered, litellm's success logging (a payload built and handlers
    run for every call, 1-2 ms of CPU) is skipped: the ledger records the call."""
    from litellm.litellm_core_utils.litellm_logging import Logging

    handled = []

    def success_handler(self, *args, **kwargs) -> None:
        handled.append("success_handler")

    async def async_success_handler(self, *args, **kwargs) -> None:
        handled.append("async_success_handler")

    monkeypatch.setattr(Logging, "success_handler", success_handler)
    monkeypatch.setattr(Logging, "async_success_handler", async_success_handler)
    gateway = _scripted()
    await gateway.text("system", [{"role": "user", "content": "What does a heat pump cost to run?"}])
    await asyncio.sleep(0.05)  # where litellm's logging would run, as a task of its own
    assert handled == []
    assert [e.status for e in gateway.ledger.entries] == ["ok"]


@pytest.mark.parametrize("provider", ["scripted", "stub"])
async def test_a_litellm_callback_a_user_registers_still_sees_every_call(monkeypatch, provider, stub, tmp_path):
    """Skipping litellm's logging must not mute an integration (Langfuse, a cost tracker): with a
    callback registered, litellm logs every call as it always did, failures too."""
    import litellm
    from litellm.integrations.custom_logger import CustomLogger

    class Seen(CustomLogger):
        def __init__(self) -> None:
            super().__init__()
            self.events: list[str] = []

        async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
            self.events.append("success")

        async def async_log_failure_event(self, kwargs, response_obj, start_time, end_time):
            self.events.append("failure")

    seen = Seen()
    for name in (
        "input_callback",
        "success_callback",
        "failure_callback",
        "_async_input_callback",
        "_async_success_callback",
        "_async_failure_callback",
    ):  # litellm copies callbacks into these
        monkeypatch.setattr(litellm, name, [])
    monkeypatch.setattr(litellm, "callbacks", [seen])
    if provider == "scripted":
        gateway = Gateway({"judge": ModelSettings(model="scripted")})
        failing = Gateway({"judge": ModelSettings(model="scripted?error_rate=1", max_retries=0)})
    else:
        gateway = failing = _gateway(stub, tmp_path, max_retries=0)
        stub.script(["ok", "400"])
    await gateway.text("judge", MESSAGES)
    with pytest.raises(ModelCallError):
        await failing.text("judge", [{"role": "user", "content": "And a gas boiler?"}])
    for _ in range(100):  # litellm's logging runs as tasks of its own
        if len(seen.events) >= 2:
            break
        await asyncio.sleep(0.02)
    assert sorted(seen.events) == ["failure", "success"]  # litellm's logging tasks may finish in either order


async def test_scripted_structured_instances_are_valid_and_seeded():
    a = await _scripted().structured("judge", MESSAGES, AspectScore)
    b = await _scripted().structured("judge", MESSAGES, AspectScore)
    assert a == b
    answers = {
        (await _scripted().structured("judge", [{"role": "user", "content": f"q{i}"}], AspectScore)).match_score
        for i in range(30)
    }
    assert answers == {0, 1, 2}  # seeded by the prompt: varied, but each answer fixed


async def test_scripted_draws_a_new_sample_for_another_request_seed():
    """A judge's repeats ask with seeds 0, 1, 2...: like a sampling model, the scripted one answers
    each seed its own way, and each seed always the same."""

    def seeded(seed: int) -> Gateway:
        return Gateway({"judge": ModelSettings(model="scripted", seed=seed)})

    prompts = [[{"role": "user", "content": f"q{i}"}] for i in range(12)]
    by_seed = {
        seed: [(await seeded(seed).structured("judge", m, AspectScore)).match_score for m in prompts]
        for seed in (0, 1, 2)
    }
    assert by_seed[0] == [(await _scripted().structured("judge", m, AspectScore)).match_score for m in prompts]
    assert by_seed[0] != by_seed[1] != by_seed[2]
    assert by_seed[1] == [(await seeded(1).structured("judge", m, AspectScore)).match_score for m in prompts]
    rich = [{"role": "user", "content": " ".join(f"Sentence number {i} of the request is here." for i in range(12))}]
    assert await seeded(1).text("judge", rich) != await seeded(0).text("judge", rich)


async def test_scripted_fault_injection_goes_through_retries_and_repair():
    gw = _scripted("scripted?error_rate=0.3&malformed_rate=0.4&seed=3")
    outcomes = []
    for i in range(16):
        try:
            outcomes.append(await gw.structured("judge", [{"role": "user", "content": f"item {i}"}], AspectScore))
        except ModelCallError as exc:  # all retries failed, or malformed twice: the typed, final errors
            outcomes.append(exc)
    assert any(e.attempts > 1 and e.status == "ok" for e in gw.ledger.entries)  # injected 429/5xx were retried
    repaired_ok = [e for e in gw.ledger.entries if e.kind == "repair"]
    assert repaired_ok, "malformed answers must go through the repair path"
    assert sum(isinstance(o, AspectScore) for o in outcomes) > len(outcomes) // 2


async def test_scripted_latency_and_timeout():
    gw = Gateway(
        {"system": ModelSettings(model="scripted?latency_ms=400", timeout_s=0.1, max_retries=1, retry_backoff_s=0.001)}
    )
    with pytest.raises(ModelCallError, match="timed out"):
        await gw.text("system", MESSAGES)


async def test_scripted_faults_do_not_depend_on_what_the_process_asked_before():
    from atelier.agents.models.scripted import forget_attempts

    settings = ModelSettings(model="scripted?error_rate=0.5", max_retries=0)
    gw = Gateway({"system": settings})
    prompts = [[{"role": "user", "content": f"Question {i}?"}] for i in range(12)]

    async def failed() -> list[bool]:
        outcomes = await asyncio.gather(*(gw.text("system", p) for p in prompts), return_exceptions=True)
        return [isinstance(o, ModelCallError) for o in outcomes]

    forget_attempts()
    first = await failed()
    again = await failed()  # each request's second attempt in this process: other draws
    forget_attempts()
    assert 0 < sum(first) < len(first) and again != first
    assert await failed() == first  # as in a fresh process


async def test_ledger_takes_the_node_from_langgraph(tmp_path):
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    gw = _scripted(tmp_path=tmp_path)

    class State(TypedDict):
        answer: str

    async def writer(state: State) -> dict:
        return {"answer": await gw.text("system", MESSAGES)}

    graph = StateGraph(State)
    graph.add_node("writer", writer)
    graph.add_edge(START, "writer")
    graph.add_edge("writer", END)
    with call_tags(case="c-7"):
        await graph.compile().ainvoke({"answer": ""})
    [entry] = gw.ledger.entries
    assert (entry.node, entry.case_id) == ("writer", "c-7")


def test_a_ledger_opens_its_file_once_and_every_line_lands_whole(tmp_path, monkeypatch):
    import gc
    import os

    from atelier.benchmarks.common import no_follow

    opened = []
    real = no_follow.open_fd
    monkeypatch.setattr(no_follow, "open_fd", lambda path, flags, *a: opened.append(path) or real(path, flags, *a))
    path = tmp_path / "ledger.jsonl"
    ledger = Ledger(path, run_id="r")
    for i in range(5):
        ledger.record(role="system", model="scripted", call_id=f"c{i}", error="x" * (i * 5000))
    other = Ledger(path, run_id="r")  # a second writer of the same file appends after the first's lines
    other.record(role="judge", model="scripted", call_id="c5")
    ledger.record(role="system", model="scripted", call_id="c6")
    assert opened == [path, path]  # once per ledger, not once per line
    assert [e.call_id for e in read_ledger(path)] == [f"c{i}" for i in range(7)]
    kept = {fd: os.fstat(fd).st_ino for fd in (ledger._fd, other._fd) if fd is not None}
    assert len(kept) == 2 and set(kept.values()) == {path.stat().st_ino}
    del ledger, other
    gc.collect()

    def closed(fd: int, inode: int) -> bool:
        try:
            return os.fstat(fd).st_ino != inode  # the number taken again by another file
        except OSError:
            return True

    assert all(closed(fd, inode) for fd, inode in kept.items())  # closed with the ledger


def test_litellm_loads_its_tokenizer_once_when_the_first_calls_come_together():
    """litellm loaded its tokenizer in whichever worker thread first needed it, unlocked: a run's
    first concurrent calls each loaded it again (~0.3 s of CPU apiece). A fresh process, so
    nothing loaded it before."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import asyncio
        import atelier.benchmarks.common.offline
        import litellm._lazy_imports as lazy
        loads = []
        original = lazy.get_default_encoding
        def counted():
            loads.append(1)
            return original()
        lazy.get_default_encoding = counted
        from atelier.agents.models.gateway import Gateway
        from atelier.agents.models.settings import ModelSettings

        async def main():
            gateway = Gateway({"system": ModelSettings(model="scripted?latency_ms=20")})
            await asyncio.gather(*(gateway.text("system", [{"role": "user", "content": f"q{i}"}]) for i in range(8)))
        asyncio.run(main())
        print(len(loads))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "1"


async def test_identical_requests_in_flight_share_one_provider_call(stub, tmp_path):
    gw = _gateway(stub, tmp_path)
    first, second = await asyncio.gather(gw.text("judge", MESSAGES), gw.text("judge", MESSAGES))
    assert first == second and first.startswith("Stub model answer.")
    assert len(stub.requests) == 1
    entries = gw.ledger.entries
    assert [(e.cache_hit, e.attempts, e.status) for e in entries] == [(False, 1, "ok"), (True, 0, "ok")]
    assert entries[0].request_key == entries[1].request_key
    assert gw.ledger.totals()["provider_calls"] == 1


async def test_identical_scripted_requests_in_flight_share_one_call(tmp_path):
    gw = Gateway(
        {"judge": ModelSettings(model="scripted?latency_ms=50")},
        cache=ResponseCache(tmp_path / "cache"),
        ledger=Ledger(None),
    )
    answers = await asyncio.gather(*(gw.text("judge", MESSAGES) for _ in range(3)))
    assert answers[0] == answers[1] == answers[2] and answers[0].startswith("DRY RUN")
    assert [e.cache_hit for e in gw.ledger.entries] == [False, True, True]


async def test_a_failed_call_in_flight_fails_its_waiters_with_the_same_error(stub, tmp_path):
    stub.script(["400", "ok"])
    gw = _gateway(stub, tmp_path)
    results = await asyncio.gather(gw.text("judge", MESSAGES), gw.text("judge", MESSAGES), return_exceptions=True)
    assert all(isinstance(r, ModelCallError) for r in results)
    assert str(results[0]) == str(results[1]) and results[0].verdict == "refused"
    assert len(stub.requests) == 1  # the waiter did not ask again
    leader, waiter = gw.ledger.entries
    assert (leader.status, leader.attempts, waiter.status, waiter.attempts) == ("error", 1, "error", 0)
    assert waiter.error.startswith("shared with the identical request in flight")


async def test_a_cancelled_call_in_flight_leaves_its_waiter_to_ask_itself(tmp_path):
    gw = Gateway(
        {"judge": ModelSettings(model="scripted?latency_ms=300")},
        cache=ResponseCache(tmp_path / "cache"),
        ledger=Ledger(None),
    )
    leader = asyncio.create_task(gw.text("judge", MESSAGES))
    waiter = asyncio.create_task(gw.text("judge", MESSAGES))
    await asyncio.sleep(0.05)
    leader.cancel()
    answer = await waiter
    assert answer.startswith("DRY RUN") and leader.cancelled()
    assert [(e.cache_hit, e.status) for e in gw.ledger.entries] == [(False, "ok")]  # its own provider call


async def test_without_a_cache_identical_requests_are_separate_calls(stub):
    settings = ModelSettings(model="openai/gpt-4o-mini", api_base=stub.base_url, api_key="sk-stub")
    gw = Gateway({"judge": settings}, ledger=Ledger(None))
    await asyncio.gather(gw.text("judge", MESSAGES), gw.text("judge", MESSAGES))
    assert len(stub.requests) == 2
    assert [e.cache_hit for e in gw.ledger.entries] == [False, False]


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "-1", "1e400"])
def test_scripted_refuses_non_finite_and_negative_latency(value):
    from atelier.agents.models.scripted import parse_model_string

    with pytest.raises(ValueError, match="latency_ms") as info:
        parse_model_string(f"scripted?latency_ms={value}")
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="latency_ms"):
        ModelSettings(model=f"scripted?latency_ms={value}")


@pytest.mark.parametrize("name", ["error_rate", "malformed_rate"])
def test_scripted_refuses_nan_rates(name):
    from atelier.agents.models.scripted import parse_model_string

    with pytest.raises(ValueError, match=name):
        parse_model_string(f"scripted?{name}=nan")


def test_scripted_takes_a_finite_latency():
    from atelier.agents.models.scripted import parse_model_string

    assert parse_model_string("scripted?latency_ms=12.5").latency_ms == 12.5
