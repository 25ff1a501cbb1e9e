"""A small OpenAI-compatible chat-completions server on 127.0.0.1, for tests and manual checks.

It exercises litellm's real HTTP path. Each request consumes the next scripted behaviour
(default `ok`):

    ok         200, a completion (schema-valid JSON when the request carries a JSON schema)
    429        rate limited (with Retry-After: 0)
    500 / 503  server error
    timeout    accept, then answer only after `hang_s` seconds
    malformed  200, but the message content is truncated JSON
    cut        200, truncated JSON with finish_reason "length" (the answer hit max_tokens)
    garbage    200 with a body that is not JSON at all
    400        bad request (a refusal no retry can fix)
    invalid500 a request-validation error under status 500 (as llama-cpp-python's server sends them)

Server kinds (`kind=`) emulate what real servers accept as structured output:

    openai               json_schema, json_object (+ schema), tools        (OpenAI, vLLM, LM Studio)
    llamacpp             json_object (+ schema); json_schema is a request-validation error under
                         status 500, worded as llama-cpp-python's server words it
    no_json_schema       json_object and tools; json_schema refused with 400
    no_response_format   tools only; any response_format refused with 400
    text_only            neither response_format nor tools (400): the schema in the prompt is all

`api_key=` makes every request without that bearer key fail with 401, `models=` every request
for another model fail with 404 (an unknown model), as OpenAI and vLLM answer them.
`echo_key_on=TEXT` refuses (400) every request whose messages contain TEXT with an error message
that quotes the request's Authorization header in full, as some providers and proxies echo the
key they were given: a test plants a key and checks it reaches no file. `echo_401=True` makes the
401 of a wrong key quote that key ("Incorrect API key provided: sk-..."), as OpenAI's does.
`quote_keys_on=TEXT` answers (200, free text) every text request whose messages contain TEXT with
every credential the request carried — its bearer key, each header named like a key, its URL's
query — as is, URL-encoded, in base64 (alone and as `user:key`), every character a JSON `\\uXXXX`
escape and an HTML character reference: a model that repeats them.

Usage (manual):  python tests/openai_stub.py --port 8011 [--kind llamacpp]
then point a role at it: model = "openai/gpt-4o-mini", api_base = "http://127.0.0.1:8011/v1".
Usage is reported per request as words in the messages / in the answer, so a test can check that
the tokens in the ledger are the server's. Each request is recorded with the structured mode it
asked for (`json_schema`, `json_object`, `tool`, or `none`), so tests can count attempts.
"""

from __future__ import annotations

import argparse
import base64
import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from atelier.agents.models.scripted import compose_text, requested_schema, schema_instance

BEHAVIOURS = ("ok", "429", "500", "503", "timeout", "malformed", "cut", "garbage", "400", "invalid500")
# kind -> the structured modes it accepts, and how it refuses the others (status, message)
SERVER_KINDS: dict[str, tuple[frozenset[str], int, str]] = {
    "openai": (frozenset({"json_schema", "json_object", "tool"}), 400, ""),
    "llamacpp": (
        frozenset({"json_object", "tool"}),
        500,
        "1 validation error for CreateChatCompletionRequest\nresponse_format.type\n"
        "  Input should be 'text' or 'json_object' [type=literal_error, input_value='json_schema', input_type=str]",
    ),
    "no_json_schema": (frozenset({"json_object", "tool"}), 400, "response_format type 'json_schema' is not supported"),
    "no_response_format": (frozenset({"tool"}), 400, "Unrecognized request argument supplied: response_format"),
    "text_only": (frozenset(), 400, "Unrecognized request argument supplied: {param}"),
}


def asked_mode(body: dict[str, Any]) -> str:
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") in ("json_schema", "json_object"):
        return response_format["type"]
    return "tool" if body.get("tools") else "none"


def _words(text: str) -> int:
    return len(text.split())


class OpenAIStub:
    def __init__(
        self,
        port: int = 0,
        hang_s: float = 30.0,
        *,
        kind: str = "openai",
        api_key: str | None = None,
        models: tuple[str, ...] | None = None,
        echo_key_on: str | None = None,
        answer_fill: float | None = None,
        echo_401: bool = False,
        quote_keys_on: str | None = None,
    ) -> None:
        """`answer_fill`: answers of realistic length — a text answer runs to that share of the request's
        max_tokens, and usage counts tokens (cl100k) rather than words (a cost forecast is checked
        against such a run)."""
        if kind not in SERVER_KINDS:
            raise ValueError(f"unknown stub server kind {kind!r}; valid: {', '.join(SERVER_KINDS)}")
        self.hang_s = hang_s
        self.kind = kind
        self.api_key = api_key
        self.models = models
        self.echo_key_on = echo_key_on
        self.echo_401 = echo_401
        self.quote_keys_on = quote_keys_on
        self.answer_fill = answer_fill
        self.requests: list[dict[str, Any]] = []
        self._script: deque[str] = deque()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, behaviours: list[str]) -> None:
        unknown = set(behaviours) - set(BEHAVIOURS)
        if unknown:
            raise ValueError(f"unknown stub behaviours {sorted(unknown)}; valid: {BEHAVIOURS}")
        with self._lock:
            self._script.extend(behaviours)

    def _next(self) -> str:
        with self._lock:
            return self._script.popleft() if self._script else "ok"

    def start(self) -> OpenAIStub:
        self._thread = threading.Thread(target=self._server.serve_forever, name="openai-stub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> OpenAIStub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def refusal(self, body: dict[str, Any], authorization: str | None) -> tuple[int, str] | None:
        """The (status, message) this server kind refuses the request with, or None."""
        if self.api_key is not None and authorization != f"Bearer {self.api_key}":
            given = (authorization or "").removeprefix("Bearer ")
            return 401, (
                f"Incorrect API key provided: {given}." if self.echo_401 else "Incorrect API key provided."
            ) + " You can find your API key at https://platform.example/keys."
        if self.echo_key_on is not None and self.echo_key_on in json.dumps(
            body.get("messages", []), ensure_ascii=False
        ):
            return 400, f"stub: 'Authorization: {authorization}' is refused for this request"
        if self.models is not None and body.get("model") not in self.models:
            return 404, f"The model `{body.get('model')}` does not exist or you do not have access to it."
        accepted, status, message = SERVER_KINDS[self.kind]
        mode = asked_mode(body)
        if mode != "none" and mode not in accepted:
            return status, message.format(param="tools" if mode == "tool" else "response_format")
        return None

    def quoted_keys(self, body: dict[str, Any], path: str, headers: Any) -> str | None:
        """The answer that repeats the request's credentials (`quote_keys_on`), or None."""
        if self.quote_keys_on is None or self.quote_keys_on not in json.dumps(body.get("messages", [])):
            return None
        if requested_schema(body, body.get("messages", []))[0] is not None:
            return None  # a structured answer must still parse
        from urllib.parse import parse_qsl, quote, urlsplit

        keys = [(headers.get("Authorization") or "").removeprefix("Bearer ")]
        keys += [v for k, v in headers.items() if "key" in k.lower()]
        keys += [v for _, v in parse_qsl(urlsplit(path).query)]
        said = []
        for key in filter(None, keys):
            said += [
                f"plain {key}",
                f"url {quote(key, safe='')}",
                f"b64 {base64.b64encode(key.encode()).decode()}",
                f"basic {base64.b64encode(f'user:{key}'.encode()).decode()}",
                "json " + "".join(f"\\u{ord(c):04x}" for c in key),
                "html " + "".join(f"&#{ord(c)};" for c in key),
            ]
        return "I was given: " + "; ".join(said)

    def completion(self, body: dict[str, Any], broken: bool = False) -> dict[str, Any]:
        messages = body.get("messages", [])
        schema, tool = requested_schema(body, messages)
        if schema is not None:
            content = json.dumps(schema_instance(schema, messages, seed=7))
            if broken:
                content = content[: len(content) // 2]
        else:
            content = compose_text(messages, seed=7, lead="Stub model answer.")
            if self.answer_fill is not None and body.get("max_tokens"):  # 0: one-token answers
                content = _filled(content, max(1, int(body["max_tokens"] * self.answer_fill)))
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if tool is not None:
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_stub", "type": "function", "function": {"name": tool, "arguments": content}}
                ],
            }
        count = _tokens if self.answer_fill is not None else _words
        prompt_tokens = sum(count(str(m.get("content", ""))) for m in messages)
        completion_tokens = count(content)
        return {
            "id": f"chatcmpl-stub{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "stub"),
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool else "stop"}],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    def _handler_class(self):
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def _send(self, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    # the client gave up waiting (a `timeout` behaviour): what a server sees then, not an
                    # error; left to socketserver, its traceback lands in a later test's captured stderr
                    pass

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._send(
                        200, json.dumps({"object": "list", "data": [{"id": "stub", "object": "model"}]}).encode()
                    )
                else:
                    self._send(404, b'{"error": {"message": "not found"}}')

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, b'{"error": {"message": "not found"}}')
                    return
                refused = stub.refusal(body, self.headers.get("Authorization"))
                quoted = stub.quoted_keys(body, self.path, self.headers)
                if refused is not None:
                    status, message = refused
                    with stub._lock:
                        stub.requests.append({"behaviour": f"refused {status}", "mode": asked_mode(body), "body": body})
                    error = {
                        "error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}
                    }
                    self._send(status, json.dumps(error).encode())
                    return
                behaviour = stub._next()
                with stub._lock:
                    stub.requests.append({"behaviour": behaviour, "mode": asked_mode(body), "body": body})
                if quoted is not None:
                    completion = stub.completion(body)
                    completion["choices"][0]["message"]["content"] = quoted
                    self._send(200, json.dumps(completion).encode())
                elif behaviour == "400":
                    error = {"error": {"message": "stub: the request is invalid", "type": "invalid_request_error"}}
                    self._send(400, json.dumps(error).encode())
                elif behaviour == "invalid500":
                    self._send(
                        500,
                        json.dumps(
                            {"error": {"message": SERVER_KINDS["llamacpp"][2], "type": "internal_server_error"}}
                        ).encode(),
                    )
                elif behaviour in ("429", "500", "503"):
                    error = {"error": {"message": f"stub {behaviour}", "type": "stub_error", "code": behaviour}}
                    self._send(int(behaviour), json.dumps(error).encode(), {"Retry-After": "0"})
                elif behaviour == "timeout":
                    time.sleep(stub.hang_s)
                    self._send(200, json.dumps(stub.completion(body)).encode())
                elif behaviour == "garbage":
                    self._send(200, b"<html>this is not json")
                elif body.get("stream"):
                    self._stream(stub.completion(body, broken=behaviour in ("malformed", "cut")))
                else:
                    completion = stub.completion(body, broken=behaviour in ("malformed", "cut"))
                    if behaviour == "cut":
                        completion["choices"][0]["finish_reason"] = "length"
                    self._send(200, json.dumps(completion).encode())

            def _stream(self, completion: dict[str, Any]) -> None:
                self._send_events(chat_sse(completion))

            def _send_events(self, data: bytes) -> None:
                """`data`, server-sent events, as the whole body of a 200 (the connection then closes)."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()
                self.close_connection = True

        return Handler


def chat_sse(completion: dict[str, Any]) -> bytes:
    """A chat completion as OpenAI streams it: a chunk per word (the last one saying `stop`), then
    the usage, then [DONE]."""
    content = completion["choices"][0]["message"]["content"] or ""
    base = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    words = content.split(" ")
    events = []
    for i, word in enumerate(words):
        delta = {"role": "assistant", "content": word if i == 0 else " " + word}
        finish = "stop" if i == len(words) - 1 else None
        events.append(base | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    events.append(base | {"choices": [], "usage": completion["usage"]})
    return sse_body(events)


def sse_body(events: list[dict[str, Any]]) -> bytes:
    """`events` as server-sent events, then [DONE]."""
    return b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"


class QueuedStub(OpenAIStub):
    """The server answering the answers queued by `answer_with` first, one per chat request, each
    written by the subclass's `answer_queued`; once none is queued, as OpenAIStub answers. A queued
    request is recorded with its answer (a string) as its behaviour, or `queued`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.answers: deque[Any] = deque()

    def answer_with(self, *answers: Any) -> None:
        self.answers.extend(answers)

    def answer_queued(self, handler: Any, answer: Any, body: dict[str, Any]) -> None:
        raise NotImplementedError

    def _handler_class(self):
        stub = self
        base = super()._handler_class()

        class Handler(base):
            def do_POST(self) -> None:
                with stub._lock:
                    answer = stub.answers.popleft() if stub.answers else None
                if answer is None:
                    return super().do_POST()
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                behaviour = answer if isinstance(answer, str) else "queued"
                with stub._lock:
                    stub.requests.append({"behaviour": behaviour, "mode": asked_mode(body), "body": body})
                stub.answer_queued(self, answer, body)

        return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=8011)
    parser.add_argument("--kind", choices=sorted(SERVER_KINDS), default="openai")
    parser.add_argument("--api-key", default=None, help="Refuse (401) requests without this bearer key.")
    parser.add_argument("--models", default=None, help="Comma-separated model names served; others get 404.")
    args = parser.parse_args()
    models = tuple(args.models.split(",")) if args.models else None
    with OpenAIStub(port=args.port, kind=args.kind, api_key=args.api_key, models=models) as stub:
        print(f"OpenAI-compatible stub ({args.kind}) at {stub.base_url}", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()


def _tokens(text: str) -> int:
    from atelier.memory.budget import count_tokens

    return count_tokens(text)


def _filled(text: str, tokens: int) -> str:
    """`text`, its words repeated until it is about `tokens` long."""
    words = text.split() or ["answer"]
    out: list[str] = []
    while _tokens(" ".join(out)) < tokens:
        out += words[: max(1, tokens - len(out))]
    return " ".join(out)
