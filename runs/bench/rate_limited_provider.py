"""A provider with a requests-per-minute limit, for `atelier bench runner --rpm R`.

An OpenAI-compatible chat-completions server on loopback (starlette on uvicorn, in a process of its
own so it takes no time from the runner's event loop) that answers every admitted request after a
fixed latency and admits at most R requests per minute as a smooth rate: the generic cell rate
algorithm (GCRA) with emission interval 60/R and a tolerance of two intervals: requests spaced 60/R
apart pass, and a burst of at most three (0.3 s of requests at 600 per minute — real providers, which
count per second, let more through). A request past the rate gets
429 with `Retry-After` (whole seconds, as HTTP has it) and `retry-after-ms` (as OpenAI sends it):
how long until it would be admitted.

It keeps a log of every request — arrival (wall clock), status, the Retry-After it was told, a hash
of its body — served at `GET /stats`, from which the benchmark counts the share of requests
answered 429 and whether retries waited as long as they were told.

Answers follow the request: text composed from the prompt, or a schema-valid instance for a
structured request (the scripted model's composition, `agents.models.scripted`), with usage
counted in words.

    python -m atelier.runs.bench.rate_limited_provider --rpm 600 --latency-ms 1500
prints `port <n>` once it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import socket
import subprocess
import sys
import time
from typing import Any

from pydantic import BaseModel, Field


class SmoothRate:
    """GCRA: at most `rpm` requests per minute, spaced 60/rpm apart, with `tolerance_s` of slack
    (default two intervals: a burst of three)."""

    def __init__(self, rpm: float, tolerance_s: float | None = None) -> None:
        if rpm <= 0:
            raise ValueError(f"rpm must be positive, not {rpm}")
        self.interval = 60.0 / rpm
        self.tolerance = 2 * self.interval if tolerance_s is None else tolerance_s
        self._tat: float | None = None  # the theoretical arrival time of the next request

    def admit(self, now: float) -> float:
        """0.0 when a request arriving at `now` is admitted (and counted); else the seconds until it would be."""
        tat = now if self._tat is None else max(self._tat, now)
        early = tat - self.tolerance - now
        if early > 0:
            return early
        self._tat = tat + self.interval
        return 0.0


class Request(BaseModel):
    at: float = Field(description="Arrival, wall clock (time.time()).")
    status: int
    retry_after_s: float | None = None
    body: str = Field(description="A hash of the request's body: a retry sends the same body again.")


def body_hash(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def completion(body: dict[str, Any]) -> dict[str, Any]:
    from atelier.agents.models.scripted import compose_text, requested_schema, schema_instance

    messages = body.get("messages", [])
    schema, tool = requested_schema(body, messages)
    if schema is not None:
        content = json.dumps(schema_instance(schema, messages, seed=7))
    else:
        content = compose_text(messages, seed=7, lead="Rate-limited provider answer.")
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool is not None:
        call = {"id": "call_0", "type": "function", "function": {"name": tool, "arguments": content}}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
    prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in messages)
    completion_tokens = len(content.split())
    return {
        "id": f"chatcmpl-{body_hash(body)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "rate-limited"),
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool else "stop"}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def provider_app(rpm: float, latency_s: float, tolerance_s: float | None = None):
    from starlette.applications import Starlette
    from starlette.requests import Request as HttpRequest
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    rate = SmoothRate(rpm, tolerance_s)
    log: list[Request] = []

    async def completions(request: HttpRequest) -> JSONResponse:
        at = time.time()
        body = await request.json()
        wait = rate.admit(time.monotonic())
        if wait > 0:
            log.append(Request(at=at, status=429, retry_after_s=wait, body=body_hash(body)))
            error = {"message": f"rate limit of {rpm:g} requests per minute reached", "type": "requests", "code": "429"}
            headers = {"retry-after": str(math.ceil(wait)), "retry-after-ms": str(math.ceil(wait * 1000))}
            return JSONResponse({"error": error}, status_code=429, headers=headers)
        log.append(Request(at=at, status=200, body=body_hash(body)))
        await asyncio.sleep(latency_s)
        return JSONResponse(completion(body))

    async def models(request: HttpRequest) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": "rate-limited", "object": "model"}]})

    async def stats(request: HttpRequest) -> JSONResponse:
        return JSONResponse({"requests": [r.model_dump() for r in log]})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", completions, methods=["POST"]),
            Route("/v1/models", models),
            Route("/stats", stats),
        ]
    )


class RateLimitedProvider:
    """The provider in a process of its own, for a `with` block: `base_url`, then `requests()`."""

    def __init__(self, rpm: float, latency_ms: float, tolerance_s: float | None = None) -> None:
        self.rpm, self.latency_ms, self.tolerance_s = rpm, latency_ms, tolerance_s
        self._process: subprocess.Popen[str] | None = None
        self.port: int | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> RateLimitedProvider:
        command = [sys.executable, "-m", __name__, "--rpm", str(self.rpm), "--latency-ms", str(self.latency_ms)]
        if self.tolerance_s is not None:
            command += ["--tolerance-s", str(self.tolerance_s)]
        self._process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert self._process.stdout is not None
        line = self._process.stdout.readline()  # "port <n>" once it listens
        if not line.startswith("port "):
            self._process.kill()
            raise RuntimeError(f"the rate-limited provider did not start (it said {line!r})")
        self.port = int(line.split()[1])
        return self

    def requests(self) -> list[Request]:
        import httpx

        answer = httpx.get(f"http://127.0.0.1:{self.port}/stats", timeout=30)
        answer.raise_for_status()
        return [Request.model_validate(r) for r in answer.json()["requests"]]

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rpm", type=float, required=True)
    parser.add_argument("--latency-ms", type=float, default=1500.0)
    parser.add_argument("--tolerance-s", type=float, default=None, help="GCRA slack (default: two intervals).")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(512)
    import atelier.agents.models.scripted  # noqa: F401 - imported before serving: the first answer waits on no import

    app = provider_app(args.rpm, args.latency_ms / 1000, args.tolerance_s)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, backlog=512))
    print(f"port {sock.getsockname()[1]}", flush=True)  # the socket listens: connections queue until serving
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
