"""`atelier bench runner --rpm`: the provider's smooth rate, the 429s it answers past it and how they
are counted, and the gateway's retries waiting as long as a 429's Retry-After says."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from atelier.agents.models.gateway import _LIMITS, Gateway, retry_after_s
from atelier.agents.models.ledger import Ledger
from atelier.agents.models.settings import ModelSettings
from atelier.runs.bench.rate_limited_provider import RateLimitedProvider, Request, SmoothRate
from atelier.runs.bench.runner import PROVIDER_KEY, rate_limit_figures


def test_the_smooth_rate_admits_one_request_per_interval_and_says_how_long_to_wait():
    rate = SmoothRate(600)  # one per 0.1 s, a tolerance of two intervals: a burst of three
    assert [rate.admit(10.0), rate.admit(10.0), rate.admit(10.05)] == [0.0, 0.0, 0.0]
    assert rate.admit(10.06) == pytest.approx(0.04)  # a fourth this soon is refused: 0.04 s to wait
    assert rate.admit(10.1) == 0.0  # when it was told to come back
    assert rate.admit(10.15) == pytest.approx(0.05)  # and the rate holds: the next at 10.2
    spaced = SmoothRate(600)
    assert [spaced.admit(20 + i * 0.1) for i in range(50)] == [0.0] * 50  # 10 per second, all admitted
    strict = SmoothRate(60, tolerance_s=0.0)
    assert strict.admit(0.0) == 0.0 and strict.admit(0.5) == pytest.approx(0.5) and strict.admit(1.0) == 0.0
    with pytest.raises(ValueError):
        SmoothRate(0)


def _failure(headers: dict[str, str]) -> Exception:
    exc = Exception("429")
    exc.litellm_response_headers = httpx.Headers(headers)  # type: ignore[attr-defined]  # as litellm's errors carry them
    return exc


def test_retry_after_is_read_from_the_provider_headers():
    assert retry_after_s(_failure({"retry-after-ms": "250", "retry-after": "1"})) == 0.25  # OpenAI's, first
    assert retry_after_s(_failure({"retry-after": "2"})) == 2.0
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 28 <= (retry_after_s(_failure({"retry-after": when})) or 0) <= 30
    assert retry_after_s(_failure({"retry-after": "soon"})) is None
    assert retry_after_s(_failure({"content-type": "application/json"})) is None
    assert retry_after_s(Exception("no headers at all")) is None


async def test_the_gateways_rate_limit_is_smooth_not_a_minutes_burst():
    limiter = _LIMITS.limiter("test-smooth-rate-model", 600)
    started = time.perf_counter()
    for _ in range(5):
        await limiter.acquire()
    # two at once, then one per 0.1 s: AsyncLimiter(600, 60) would have let all five (and 595 more) go at once
    assert time.perf_counter() - started >= 0.29


def test_the_figures_count_429s_and_retries_that_came_too_soon():
    log = [
        Request(at=100.0, status=200, body="a"),
        Request(at=100.1, status=429, retry_after_s=0.5, body="b"),
        Request(at=100.4, status=429, retry_after_s=0.5, body="c"),
        Request(at=100.6, status=200, body="b"),  # b's retry, 0.5 s after its 429: as told
        Request(at=100.7, status=200, body="c"),  # c's retry, 0.3 s after its 429: too soon
        Request(at=99.0, status=200, body="preflight"),  # before the run: not counted
    ]
    figures = rate_limit_figures(log, 60, start=100.0, end=110.0, wall_s=2.0)
    assert figures["requests"] == 5 and figures["successful_requests"] == 3 and figures["rate_limited_requests"] == 2
    assert figures["rate_limited_share"] == 0.4
    assert figures["retries_after_429"] == 2 and figures["retries_before_retry_after"] == 1
    assert figures["window_s"] == pytest.approx(0.7 + 1.0)  # first arrival to last success, plus one interval
    assert figures["limit_efficiency"] == pytest.approx(round(3 * 1.0 / 1.7, 3))
    assert figures["limit_efficiency_over_wall"] == 1.5


async def test_a_429s_retry_after_is_honoured_and_counted(tmp_path):
    """Two calls at once against a provider admitting one per second, strictly: the second is answered
    429 with Retry-After ~1 s, and its retry waits that long (with no backoff of its own and one retry
    only, a retry that did not wait would be refused again and the call would fail)."""
    with RateLimitedProvider(rpm=60, latency_ms=50, tolerance_s=0.0) as provider:
        settings = ModelSettings(
            model="openai/rate-limited",
            api_base=provider.base_url,
            api_key=PROVIDER_KEY,
            max_retries=1,
            retry_backoff_s=0.0,
            timeout_s=10.0,
        )
        gateway = Gateway({"system": settings}, ledger=Ledger(tmp_path / "ledger.jsonl", run_id="rpm"))
        started = time.time()
        answers = await asyncio.gather(
            gateway.text("system", [{"role": "user", "content": "What does a heat pump cost to run?"}]),
            gateway.text("system", [{"role": "user", "content": "Which laptop suits a designer?"}]),
        )
        log = provider.requests()
    assert all(a.startswith("Rate-limited provider answer.") for a in answers)
    assert sorted(e.attempts for e in gateway.ledger.entries) == [1, 2]
    assert [r.status for r in log] == [200, 429, 200]
    refused, retry = log[1], log[2]
    assert retry.body == refused.body and 0.9 <= (refused.retry_after_s or 0) <= 1.0
    assert retry.at >= refused.at + (refused.retry_after_s or 0) - 0.005
    figures = rate_limit_figures(log, 60, start=started, end=time.time(), wall_s=2.0)
    assert figures["rate_limited_requests"] == 1 and figures["rate_limited_share"] == round(1 / 3, 4)
    assert figures["retries_after_429"] == 1 and figures["retries_before_retry_after"] == 0
