"""Stub servers of deep-research model APIs on 127.0.0.1, speaking each provider's own format as its
public reference describes it.

    kind "perplexity"  POST /chat/completions (Perplexity's API has no /v1), following Perplexity's
                       Sonar API reference and its SDK's types (perplexity-py: `StreamChunk`,
                       `UsageInfo` with its `Cost`, `APIPublicSearchResult`): an answer whose `[n]`
                       markers name the n-th source, `search_results` (title, url, date,
                       last_updated, snippet, source) and, in the older form (`form="citations"`),
                       `citations` (URLs) too; usage with `reasoning_tokens`, `citation_tokens`,
                       `num_search_queries`, `search_context_size` and its `cost` block (left out
                       with `billed=False`). `markers_beyond=(7, 12)` adds markers naming no source.
                       With `"stream": true`, server-sent chunks each repeating `citations` and
                       `search_results`, the usage on the last, then `[DONE]`.
    kind "responses"   OpenAI's Responses API, following openai-python's types (`Response`,
                       `ResponseStatus`, `ResponseFunctionWebSearch` with its `ActionSearch`,
                       `ActionOpenPage`, `ActionFind`, `ResponseOutputText` with
                       `AnnotationURLCitation`) and its streaming events: POST /v1/responses answers
                       `web_search_call` items (`actions`: "search", "open_page", "find_in_page"),
                       a `reasoning` item, then a message whose `output_text` carries `url_citation`
                       annotations with their character spans (`spans="reversed"` or `"outside"`
                       breaks one), and usage with `output_tokens_details.reasoning_tokens`. With
                       `"stream": true`, the event stream (`response.created`, ...,
                       `response.completed` carrying the whole response). With `"background": true`,
                       the response is created `queued`; GET /v1/responses/{id} answers
                       `in_progress` for `polls` retrievals and then the completed response; POST
                       /v1/responses/{id}/cancel cancels it. A background stream
                       (`cut_background_stream=True`) breaks off after `response.created`, as a
                       dropped connection does, while the response goes on on the server.

    kind "interactions" Gemini's Interactions API (Gemini Deep Research), following google-genai
                       2.25's `Interaction` (`id`, `status`, `steps`, `usage`), `ModelOutputStep`,
                       `TextContent` with `URLCitation` annotations (`url`, `title`, `start_index`,
                       `end_index` in bytes of the text, which holds non-ASCII characters),
                       `GoogleSearchCallStep` (`arguments.queries`) and `Usage`
                       (`total_input_tokens`, `total_output_tokens`, `total_thought_tokens`):
                       POST /v1beta/interactions answers `in_progress`; GET
                       /v1beta/interactions/{id} answers `in_progress` for `polls` retrievals, then
                       the completed interaction; POST /v1beta/interactions/{id}/cancel cancels it.

The stub cites the URLs it is given (`cites=[(url, title), ...]`), so a test decides which cited
pages the run's web can read. `script([...])` queues behaviours per request (`ok`, `429`, `500`;
answers that break the provider contract: `length` and `content_filter` finish reasons, `unclosed`
(an answer cut inside its `<think>`, Perplexity), an `incomplete` status (Responses), and `cut:N`, a
stream whose bytes stop after N, the connection closed cleanly);
each request's body is kept in `requests`.

Usage (manual): python tests/research_api_stub.py --kind perplexity --port 8021 --cite https://...
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

KINDS = ("perplexity", "responses", "interactions")
FORMS = ("citations", "search_results")
SPANS = ("valid", "reversed", "outside")
ACTIONS = ("search", "open_page", "find_in_page")
BEHAVIOURS = ("ok", "429", "500", "length", "content_filter", "unclosed", "incomplete", "emptychoices")  # and "cut:N"
SEARCHES = 3  # web searches each answer reports
REASONING_TOKENS = 40
# Perplexity's own bill of each answer (its usage.cost), in USD
PERPLEXITY_BILL = {
    "input_tokens_cost": 0.0001,
    "output_tokens_cost": 0.0002,
    "reasoning_tokens_cost": 0.0003,
    "citation_tokens_cost": 0.0004,
    "search_queries_cost": 0.015,
    "request_cost": 0.0,
    "total_cost": 0.016,
}


def _words(text: str) -> int:
    return len(text.split())


class ResearchApiStub:
    def __init__(
        self,
        kind: str,
        cites: list[tuple[str, str]],
        port: int = 0,
        *,
        form: str = "citations",
        billed: bool = True,
        markers_beyond: tuple[int, ...] = (),
        actions: tuple[str, ...] = ("search",) * SEARCHES,
        spans: str = "valid",
        polls: int = 2,
        cut_background_stream: bool = False,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown research API stub kind {kind!r}; valid: {', '.join(KINDS)}")
        if form not in FORMS or spans not in SPANS or set(actions) - set(ACTIONS):
            raise ValueError(f"form in {FORMS}, spans in {SPANS}, actions in {ACTIONS}")
        self.kind = kind
        self.cites = list(cites)
        self.form = form
        self.billed = billed
        self.markers_beyond = markers_beyond
        self.actions = actions
        self.spans = spans
        self.polls = polls
        self.cut_background_stream = cut_background_stream
        self.requests: list[dict[str, Any]] = []
        self.background: dict[str, dict[str, Any]] = {}  # id -> {"answer", "polled", "status"}
        self._script: deque[str] = deque()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._server.daemon_threads = True

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        root = f"http://127.0.0.1:{self.port}"
        return {"perplexity": root, "responses": f"{root}/v1", "interactions": f"{root}/v1beta"}[self.kind]

    def script(self, behaviours: list[str]) -> None:
        unknown = {b for b in behaviours if b not in BEHAVIOURS and not (b.startswith("cut:") and b[4:].isdigit())}
        if unknown:
            raise ValueError(f"unknown behaviours {sorted(unknown)}; valid: {BEHAVIOURS}")
        with self._lock:
            self._script.extend(behaviours)

    def _next(self) -> str:
        with self._lock:
            return self._script.popleft() if self._script else "ok"

    def start(self) -> ResearchApiStub:
        threading.Thread(target=self._server.serve_forever, name=f"{self.kind}-stub", daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> ResearchApiStub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ answers

    def _question(self, body: dict[str, Any]) -> str:
        if self.kind == "perplexity":
            messages = body.get("messages") or []
        elif self.kind == "interactions":
            messages = [{"content": body.get("input")}]
        else:
            messages = body.get("input") if isinstance(body.get("input"), list) else [{"content": body.get("input")}]
        last = str((messages[-1] if messages else {}).get("content") or "")
        return " ".join(last.split()[:12])

    def perplexity(self, body: dict[str, Any], behaviour: str = "ok") -> dict[str, Any]:
        sentences = [f"Research on: {self._question(body)}."]
        sentences += [f"{title} is a source on this[{n}]." for n, (_, title) in enumerate(self.cites, 1)]
        sentences += [f"Another claim rests on more[{n}]." for n in self.markers_beyond]
        content = "<think>I searched the web.</think>" + " ".join(sentences)
        finish = behaviour if behaviour in ("length", "content_filter") else "stop"
        if behaviour == "unclosed":  # cut at its token limit inside its reasoning
            content, finish = "<think>I searched the web. Now I weigh " + " ".join(sentences), "length"
        prompt = sum(_words(str(m.get("content") or "")) for m in body.get("messages") or [])
        completion = _words(content) + REASONING_TOKENS
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "citation_tokens": 100 * len(self.cites),
            "num_search_queries": SEARCHES,
            "reasoning_tokens": REASONING_TOKENS,
            "search_context_size": "low",
        }
        if self.billed:
            usage["cost"] = dict(PERPLEXITY_BILL)
        answer: dict[str, Any] = {
            "id": f"pplx-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "sonar-deep-research"),
            "search_results": [
                {
                    "title": title,
                    "url": url,
                    "date": "2025-01-01",
                    "last_updated": "2025-02-01",
                    "snippet": f"About {title}.",
                    "source": "web",
                }
                for url, title in self.cites
            ],
            "choices": [{"index": 0, "finish_reason": finish, "message": {"role": "assistant", "content": content}}],
            "usage": usage,
        }
        if self.form == "citations":
            answer["citations"] = [url for url, _ in self.cites]
        return answer

    def response(self, body: dict[str, Any], behaviour: str = "ok") -> dict[str, Any]:
        text = f"Research on: {self._question(body)}."
        annotations = []
        for url, title in self.cites:
            link = f"[{title}]({url})"
            text += f" {title} is a source on this ("
            annotations.append(
                {
                    "type": "url_citation",
                    "url": url,
                    "title": title,
                    "start_index": len(text),
                    "end_index": len(text) + len(link),
                }
            )
            text += link + ")."
        if annotations and self.spans == "reversed":  # end before start: points nowhere
            first = annotations[0]
            first["start_index"], first["end_index"] = first["end_index"], first["start_index"] - 20
        elif annotations and self.spans == "outside":
            annotations[0]["start_index"], annotations[0]["end_index"] = len(text) + 5, len(text) + 40
        output: list[dict[str, Any]] = []
        for i, action in enumerate(self.actions):
            url = self.cites[0][0] if self.cites else "https://example.org/"
            shape = {
                "search": {"type": "search", "query": f"q{i}", "sources": [{"type": "url", "url": url}]},
                "open_page": {"type": "open_page", "url": url},
                "find_in_page": {"type": "find_in_page", "url": url, "pattern": "train"},
            }[action]
            output.append({"type": "web_search_call", "id": f"ws_{i}", "status": "completed", "action": shape})
        output.append({"type": "reasoning", "id": "rs_1", "summary": []})
        output.append(
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": annotations, "logprobs": []}],
            }
        )
        prompt = _words(json.dumps(body.get("input"))) + _words(str(body.get("instructions") or ""))
        completion = _words(text) + REASONING_TOKENS
        return {
            "id": f"resp_{len(self.requests)}",
            "object": "response",
            "created_at": int(time.time()),
            "status": "incomplete" if behaviour == "incomplete" else "completed",
            "background": bool(body.get("background")),
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if behaviour == "incomplete" else None,
            "model": body.get("model", "o3-deep-research"),
            "output": output,
            "tools": body.get("tools") or [],
            "parallel_tool_calls": False,
            "tool_choice": "auto",
            "usage": {
                "input_tokens": prompt,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": completion,
                "output_tokens_details": {"reasoning_tokens": REASONING_TOKENS},
                "total_tokens": prompt + completion,
            },
        }

    def interaction(self, body: dict[str, Any]) -> dict[str, Any]:
        """A completed Gemini Deep Research interaction citing the stub's URLs (spans in bytes)."""
        text = f"Café research on: {self._question(body)}."
        annotations = []
        for url, title in self.cites:
            claim = f" {title} is a source on this — naïvely put."
            start = len(text.encode("utf-8")) + 1
            text += claim
            annotations.append(
                {
                    "type": "url_citation",
                    "url": url,
                    "title": title,
                    "start_index": start,
                    "end_index": len(text.encode()),
                }
            )
        if annotations and self.spans == "outside":
            annotations[0]["start_index"], annotations[0]["end_index"] = len(text.encode()) + 5, len(text.encode()) + 9
        steps: list[dict[str, Any]] = [
            {"type": "google_search_call", "id": f"gs_{i}", "arguments": {"queries": [f"q{i}a", f"q{i}b"]}}
            for i in range(SEARCHES)
        ]
        steps.append({"type": "thought", "summary": [{"type": "text", "text": "Planning."}]})
        steps.append({"type": "model_output", "content": [{"type": "text", "text": text, "annotations": annotations}]})
        prompt = _words(str(body.get("input")))
        return {
            "id": f"v1_interaction_{len(self.requests)}",
            "status": "completed",
            "agent": body.get("agent"),
            "created": "2025-12-11T10:00:00Z",
            "updated": "2025-12-11T10:20:00Z",
            "steps": steps,
            "usage": {
                "total_input_tokens": prompt,
                "total_output_tokens": _words(text),
                "total_thought_tokens": REASONING_TOKENS,
                "total_tokens": prompt + _words(text) + REASONING_TOKENS,
            },
        }

    def retrieve(self, response_id: str) -> dict[str, Any] | None:
        """GET /v1/responses/{id}: a background response as it stands (each retrieval counts a poll)."""
        with self._lock:
            held = self.background.get(response_id)
            if held is None:
                return None
            if held["status"] in ("queued", "in_progress"):
                held["polled"] += 1
                held["status"] = "completed" if held["polled"] > self.polls else "in_progress"
            status = held["status"]
        if status in ("completed", "incomplete"):
            return held["answer"]
        return _pending(held["answer"], status)

    def cancel(self, response_id: str) -> dict[str, Any] | None:
        with self._lock:
            held = self.background.get(response_id)
            if held is None:
                return None
            if held["status"] in ("queued", "in_progress"):
                held["status"] = "cancelled"
            return _pending(held["answer"], held["status"])

    # ------------------------------------------------------------------ HTTP

    def _handler_class(self):
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _events(self, events: list[tuple[str | None, dict[str, Any]]], cut: int | None = None) -> None:
                """The server-sent events; with `cut`, only their first `cut` bytes, then a clean close."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                body = _sse(stub.kind, events)
                try:
                    self.wfile.write(body if cut is None else body[:cut])
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass
                self.close_connection = True

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0].rstrip("/")
                with stub._lock:
                    stub.requests.append({"path": path, "method": "GET", "behaviour": "ok", "body": {}})
                prefix = "/v1beta/interactions/" if stub.kind == "interactions" else "/v1/responses/"
                found = stub.retrieve(path.rsplit("/", 1)[-1]) if path.startswith(prefix) else None
                if found is None:
                    self._send(404, {"error": {"message": f"no response at {path}"}})
                else:
                    self._send(200, found)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                path = self.path.rstrip("/")
                own = {"responses": "/v1/responses/", "interactions": "/v1beta/interactions/"}.get(stub.kind)
                if own and path.startswith(own) and path.endswith("/cancel"):
                    with stub._lock:
                        stub.requests.append({"path": path, "method": "POST", "behaviour": "ok", "body": body})
                    cancelled = stub.cancel(path.split("/")[-2])
                    self._send(200, cancelled) if cancelled else self._send(404, {"error": {"message": "no such"}})
                    return
                wanted = {"perplexity": "/chat/completions", "responses": "/v1/responses"}.get(
                    stub.kind, "/v1beta/interactions"
                )
                behaviour = stub._next()
                with stub._lock:
                    stub.requests.append({"path": path, "method": "POST", "behaviour": behaviour, "body": body})
                if path != wanted:
                    self._send(404, {"error": {"message": f"no route {path}"}})
                elif behaviour in ("429", "500"):
                    self._send(int(behaviour), {"error": {"message": f"stub {behaviour}"}}, {"Retry-After": "0"})
                elif stub.kind == "interactions":
                    answer = stub.interaction(body)
                    with stub._lock:
                        stub.background[answer["id"]] = {"answer": answer, "polled": 0, "status": "in_progress"}
                    self._send(200, _pending(answer, "in_progress"))
                elif stub.kind == "perplexity":
                    answer = stub.perplexity(body, behaviour)
                    if body.get("stream"):
                        self._events(_perplexity_chunks(answer), _cut(behaviour))
                    else:
                        self._send(200, {**answer, "choices": []} if behaviour == "emptychoices" else answer)
                else:
                    answer = stub.response(body, behaviour)
                    if body.get("background"):
                        with stub._lock:
                            stub.background[answer["id"]] = {"answer": answer, "polled": 0, "status": "queued"}
                        if body.get("stream"):
                            events = _response_events(answer)
                            self._events(events[:1] if stub.cut_background_stream else events)
                        else:
                            self._send(200, _pending(answer, "queued"))
                    elif body.get("stream"):
                        with stub._lock:  # kept, as OpenAI keeps responses: a client cut off retrieves it
                            stub.background[answer["id"]] = {"answer": answer, "polled": 0, "status": answer["status"]}
                        self._events(_response_events(answer), _cut(behaviour))
                    else:
                        self._send(200, answer)

        return Handler


def _pending(answer: dict[str, Any], status: str) -> dict[str, Any]:
    """A response (or interaction) not (or no longer) running to completion: no output, no usage yet."""
    if "steps" in answer:  # an interaction
        return answer | {"status": status, "steps": [], "usage": None}
    return answer | {"status": status, "output": [], "usage": None}


def _cut(behaviour: str) -> int | None:
    return int(behaviour[4:]) if behaviour.startswith("cut:") else None


def _sse(kind: str, events: list[tuple[str | None, dict[str, Any]]]) -> bytes:
    """Server-sent events as the wire carries them (Perplexity's end with `[DONE]`)."""
    body = "".join((f"event: {name}\n" if name else "") + f"data: {json.dumps(data)}\n\n" for name, data in events)
    return (body + ("data: [DONE]\n\n" if kind == "perplexity" else "")).encode()


def stream_bytes(kind: str, answer: dict[str, Any]) -> int:
    """How many bytes the whole stream of `answer` takes (where a `cut:N` may fall)."""
    return len(_sse(kind, _perplexity_chunks(answer) if kind == "perplexity" else _response_events(answer)))


def _perplexity_chunks(answer: dict[str, Any]) -> list[tuple[str | None, dict[str, Any]]]:
    """Perplexity's stream: chat chunks of a few words, each with the citations and search results."""
    base = {k: answer[k] for k in ("id", "created", "model", "citations", "search_results") if k in answer}
    base["object"] = "chat.completion.chunk"
    words = answer["choices"][0]["message"]["content"].split(" ")
    chunks = []
    for i in range(0, len(words), 4):
        piece = " ".join(words[i : i + 4]) + (" " if i + 4 < len(words) else "")
        delta = {"role": "assistant", "content": piece} if i == 0 else {"content": piece}
        chunks.append((None, base | {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}))
    finish = answer["choices"][0]["finish_reason"]
    last = base | {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "usage": answer["usage"]}
    chunks.append((None, last))
    return chunks


def _response_events(answer: dict[str, Any]) -> list[tuple[str | None, dict[str, Any]]]:
    """The Responses API's event stream for `answer`."""
    events: list[tuple[str | None, dict[str, Any]]] = []

    def event(kind: str, **data: Any) -> None:
        events.append((kind, {"type": kind, "sequence_number": len(events), **data}))

    event("response.created", response=answer | {"status": "in_progress", "output": [], "usage": None})
    for index, item in enumerate(answer["output"]):
        if item["type"] != "message":
            event("response.output_item.added", output_index=index, item=item)
            event("response.output_item.done", output_index=index, item=item)
            continue
        part = item["content"][0]
        event("response.output_item.added", output_index=index, item=item | {"content": [], "status": "in_progress"})
        text = part["text"]
        for start in range(0, len(text), 40):
            event(
                "response.output_text.delta",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                delta=text[start : start + 40],
                logprobs=[],
            )
        for number, annotation in enumerate(part["annotations"]):
            event(
                "response.output_text.annotation.added",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                annotation_index=number,
                annotation=annotation,
            )
        event(
            "response.output_text.done", item_id=item["id"], output_index=index, content_index=0, text=text, logprobs=[]
        )
        event("response.output_item.done", output_index=index, item=item)
    event("response.incomplete" if answer["status"] == "incomplete" else "response.completed", response=answer)
    return events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kind", choices=KINDS, default="perplexity")
    parser.add_argument("--port", type=int, default=8021)
    parser.add_argument("--cite", action="append", default=[], help="A URL the answers cite (repeatable).")
    args = parser.parse_args()
    with ResearchApiStub(args.kind, [(url, url) for url in args.cite], args.port) as stub:
        print(f"{args.kind} stub at {stub.base_url}", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
