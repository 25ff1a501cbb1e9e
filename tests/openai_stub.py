"""A small OpenAI-compatible chat-completions server on 127.0.0.1, for tests and manual checks.

It exercises litellm's real HTTP path. Each request consumes the next scripted behaviour
(default `ok`):

    ok         200, a completion (schema-valid JSON when the request carries a JSON schema)
    429        rate limited (with Retry-After: 0)
    500 / 503  server error
    timeout    accept, then answer only after `hang_s` seconds
    malformed  200, but the message content is truncated JSON
    garbage    200 with a body that is not JSON at all

Usage (manual):  python tests/openai_stub.py --port 8011
then point a role at it: model = "openai/gpt-4o-mini", api_base = "http://127.0.0.1:8011/v1".
Usage is reported per request as words in the messages / in the answer, so a test can check that
the tokens in the ledger are the server's.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agents.scripted import compose_text, schema_from_response_format, schema_instance

BEHAVIOURS = ("ok", "429", "500", "503", "timeout", "malformed", "garbage")


def _words(text: str) -> int:
    return len(text.split())


class OpenAIStub:
    def __init__(self, port: int = 0, hang_s: float = 30.0) -> None:
        self.hang_s = hang_s
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

    def start(self) -> "OpenAIStub":
        self._thread = threading.Thread(target=self._server.serve_forever, name="openai-stub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "OpenAIStub":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def completion(self, body: dict[str, Any], broken: bool = False) -> dict[str, Any]:
        messages = body.get("messages", [])
        schema = schema_from_response_format(body.get("response_format"))
        if schema is not None:
            content = json.dumps(schema_instance(schema, messages, seed=7))
            if broken:
                content = content[: len(content) // 2]
        else:
            content = compose_text(messages, seed=7, lead="Stub model answer.")
        prompt_tokens = sum(_words(str(m.get("content", ""))) for m in messages)
        completion_tokens = _words(content)
        return {
            "id": f"chatcmpl-stub{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "stub"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
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
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, json.dumps({"object": "list", "data": [{"id": "stub", "object": "model"}]}).encode())
                else:
                    self._send(404, b'{"error": {"message": "not found"}}')

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, b'{"error": {"message": "not found"}}')
                    return
                behaviour = stub._next()
                with stub._lock:
                    stub.requests.append({"behaviour": behaviour, "body": body})
                if behaviour in ("429", "500", "503"):
                    error = {"error": {"message": f"stub {behaviour}", "type": "stub_error", "code": behaviour}}
                    self._send(int(behaviour), json.dumps(error).encode(), {"Retry-After": "0"})
                elif behaviour == "timeout":
                    time.sleep(stub.hang_s)
                    self._send(200, json.dumps(stub.completion(body)).encode())
                elif behaviour == "garbage":
                    self._send(200, b"<html>this is not json")
                else:
                    self._send(200, json.dumps(stub.completion(body, broken=behaviour == "malformed")).encode())

        return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=8011)
    args = parser.parse_args()
    with OpenAIStub(port=args.port) as stub:
        print(f"OpenAI-compatible stub at {stub.base_url}", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
