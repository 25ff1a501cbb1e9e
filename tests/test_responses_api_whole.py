"""Issue 48 item 6, the Responses API: an answer is whole only when it is `completed`.

A stream asked for in the foreground that ends without its terminal event (`response.completed`,
`.incomplete`, `.failed`) — cut after `response.created` at any byte, or closed cleanly before its
last event — is the provider contract's `answer_incomplete`: retried as a lost connection is, never
cached, and never retrieved with `GET /responses/{id}` (a response asked for in the foreground may
not be kept on the server: one that does not keep it answers 404). Only a background request is
polled. A response whose status is neither `completed` nor `incomplete` (`requires_action`, none at
all, `failed`, `cancelled`) is `answer_incomplete` too, naming the status it had, and never cached.
The project's Responses stub (tests/research_api_stub.py) answers, its ids made one length so the
same question streams the same bytes and a cut falls where the test puts it."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

import pytest

from atelier.agents.models.answer_contract import WHOLE, recording_answers
from atelier.agents.models.cache import ResponseCache
from atelier.agents.models.gateway import Gateway, ModelCallError
from atelier.agents.models.grounding import GroundedAnswer, Grounding
from atelier.agents.models.settings import ModelSettings
from atelier.benchmarks.common.degradation import Degradation
from tests.research_api_stub import ResearchApiStub, _response_events, _sse, stream_bytes

MODEL = "openai/o3-deep-research"
CITED = [("https://a.example/x", "A")]
MISSING = "<no status>"  # an answer with no `status` field at all
STREAM = Grounding(api="responses", stream=True)


class _Unstated(dict):
    """An answer without its `status`: the wire never carries one, while the stub's own reading of
    it (which terminal event its stream ends with) finds the `response.completed` it would send."""

    def __missing__(self, key: str) -> Any:
        if key == "status":
            return "completed"
        raise KeyError(key)


class StatusStub(ResearchApiStub):
    """The project's Responses stub, with ids of one length, whose next answers take the statuses
    queued in `statuses` (MISSING: none); `made` keeps every answer it made."""

    def __init__(self, **options: Any) -> None:
        super().__init__("responses", CITED, **options)
        self.statuses: deque[str] = deque()
        self.made: list[dict[str, Any]] = []

    def __enter__(self) -> StatusStub:
        self.start()
        return self

    def response(self, body: dict[str, Any], behaviour: str = "ok") -> dict[str, Any]:
        answer = super().response(body, behaviour)
        answer["id"] = f"resp_{len(self.requests):04d}"
        if self.statuses:
            status = self.statuses.popleft()
            if status == MISSING:
                answer = _Unstated(answer)
                del answer["status"]
            else:
                answer["status"] = status
        self.made.append(answer)
        return answer


def methods(stub: ResearchApiStub) -> list[str]:
    return [r["method"] for r in stub.requests]


def ask(
    stub: ResearchApiStub,
    cache: ResponseCache | None,
    question: str,
    grounding: Grounding,
    *,
    max_retries: int = 0,
    extra: dict[str, Any] | None = None,
) -> tuple[GroundedAnswer | ModelCallError, list[Degradation]]:
    settings = ModelSettings(
        model=MODEL,
        api_base=stub.base_url,
        api_key="sk-stub",
        max_retries=max_retries,
        retry_backoff_s=0.01,
        extra=extra or {},
    )
    gateway = Gateway({"researcher": settings}, cache=cache)

    async def go() -> tuple[GroundedAnswer | ModelCallError, list[Degradation]]:
        with recording_answers() as broken:
            try:
                answer = await gateway.grounded("researcher", [{"role": "user", "content": question}], grounding)
            except ModelCallError as exc:
                return exc, broken
            return answer, broken

    return asyncio.run(go())


def ends(answer: dict[str, Any]) -> list[int]:
    """Where each event of `answer`'s stream ends, in bytes."""
    events = _response_events(answer)
    return [len(_sse("responses", events[: k + 1])) for k in range(len(events))]


# where a stream stops: each after `response.created` has arrived, each before the terminal event has
CUTS = {
    "right after response.created": lambda e, first_delta: e[0],
    "inside response.created's next event": lambda e, first_delta: e[0] + 25,
    "inside a text delta": lambda e, first_delta: e[first_delta - 1] + 30,
    "before its terminal event (no terminal event)": lambda e, first_delta: e[-2],
    "inside its terminal event": lambda e, first_delta: e[-1] - 1,
}


@pytest.mark.parametrize("where", sorted(CUTS))
def test_a_foreground_stream_without_its_terminal_event_is_incomplete_never_polled_nor_cached(tmp_path, where):
    question = "Which trains run at night?"
    with StatusStub() as stub:
        # the stream this question gets (as the stub will make it on the first request)
        planned = stub.response({"model": MODEL.split("/")[1], "input": [{"role": "user", "content": question}]})
        events = _response_events(planned)
        first_delta = next(k for k, (kind, _) in enumerate(events) if kind == "response.output_text.delta")
        offset = CUTS[where](ends(planned), first_delta)
        assert ends(planned)[0] <= offset < stream_bytes("responses", planned)
        stub.script([f"cut:{offset}", f"cut:{offset}"])
        cache = ResponseCache(tmp_path / "cache")

        answer, broken = ask(stub, cache, question, STREAM, max_retries=1)

        assert isinstance(answer, ModelCallError), answer
        assert all(ends(made) == ends(planned) for made in stub.made[1:])  # the cut fell where planned
        assert answer.verdict == "retry" and answer.attempts == 2  # retried like a lost connection
        assert WHOLE.name in str(answer) and "without its terminal event" in str(answer)
        assert [d.kind for d in broken] == ["answer_incomplete"]
        assert "without its terminal event" in broken[0].detail and "not in the background" in broken[0].detail
        assert methods(stub) == ["POST", "POST"]  # the response was never retrieved
        assert len(cache) == 0

        # nothing was cached: asking again reaches the provider, and a whole answer is one
        again, broken = ask(stub, cache, question, STREAM)
        assert isinstance(again, GroundedAnswer) and broken == []
        assert again.text.startswith("Research on: Which trains run at night?")
        assert methods(stub) == ["POST", "POST", "POST"] and len(cache) == 1


def test_a_foreground_stream_the_server_does_not_keep_fails_as_incomplete_not_as_an_unknown_endpoint(tmp_path):
    # the audit's case: the server keeps no foreground response (a GET would answer 404)
    question = "Which trains run at night?"
    with StatusStub() as stub:
        stub.retrieve = lambda response_id: None  # type: ignore[method-assign]
        stub.script(["cut:1500"])
        answer, broken = ask(stub, ResponseCache(tmp_path / "cache"), question, STREAM)
    assert isinstance(answer, ModelCallError) and answer.verdict == "retry" and answer.status is None
    assert "404" not in str(answer) and [d.kind for d in broken] == ["answer_incomplete"]
    assert methods(stub) == ["POST"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(
    ("status", "named", "retried"),
    [
        ("requires_action", "status 'requires_action'", False),
        (MISSING, "no status", False),
        ("failed", "ended failed", True),
        ("cancelled", "ended cancelled", True),
    ],
)
def test_a_response_neither_completed_nor_incomplete_is_incomplete_naming_its_status_and_not_cached(
    tmp_path, status, named, retried, stream
):
    question = f"Status {status}?"
    grounding = Grounding(api="responses", stream=stream)
    with StatusStub() as stub:
        stub.statuses.extend([status, status])
        cache = ResponseCache(tmp_path / "cache")

        answer, broken = ask(stub, cache, question, grounding, max_retries=1)

        assert isinstance(answer, ModelCallError), answer
        # failed or cancelled: asked again; a status the provider gives this request: not
        assert (answer.verdict, answer.attempts) == (("retry", 2) if retried else ("fatal", 1))
        assert [d.kind for d in broken] == ["answer_incomplete"]
        assert named in broken[0].detail and WHOLE.name in broken[0].detail
        assert "GET" not in methods(stub) and len(cache) == 0

        stub.statuses.clear()  # the provider answers whole now: asked again, not read from the cache
        again, broken = ask(stub, cache, question, grounding)
        assert isinstance(again, GroundedAnswer) and broken == []
        assert methods(stub).count("POST") == answer.attempts + 1 and len(cache) == 1


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("how", ["grounding", "role extra"])
def test_a_background_request_is_still_polled_to_its_end(tmp_path, stream, how):
    grounding = Grounding(api="responses", stream=stream, background=how == "grounding", poll_s=0.01)
    extra = {"background": True} if how == "role extra" else {}
    # a background stream breaks off after response.created; the response goes on on the server
    with StatusStub(polls=2, cut_background_stream=True) as stub:
        cache = ResponseCache(tmp_path / "cache")
        answer, broken = ask(stub, cache, "Trains in the background?", grounding, extra=extra)
        assert isinstance(answer, GroundedAnswer), answer
        assert broken == [] and [c.url for c in answer.citations] == [url for url, _ in CITED]
        assert stub.requests[0]["body"].get("background") is True
        assert methods(stub) == ["POST", "GET", "GET", "GET"]  # in_progress twice, then completed
        assert len(cache) == 1
