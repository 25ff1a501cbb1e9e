"""`atelier label RUN_DIR --judge NAME`: a page in the browser on which people label a run's
responses on the judge's own rubric, for `atelier meta-eval` to measure the judge against.

What is labelled is what `atelier meta-eval sheet` puts in its rows (`meta_eval.sheet_items`), on
the judge's rubric scale: BESPOKE's four criteria 1-5 (Table 18's base scale), PQR's generated
sub-criteria 0-10 (PDR-Bench Appendix C's human study), LaMP-QA's rubric aspects 0-2 (the label
kept on the judge's scale: the rating halved). Labels from the page and the same labels in the
sheet give the same agreement figures.

- Blind: the page never sees a system's name or any judge's score; each response goes by an
  opaque id made from the server's token, and the server alone maps it to (case, system).
- Random order: each labeller's own, the same on every visit (seeded by judge and labeller).
- Keyboard-driven (the page lists its keys); each label is saved as it is given
  (`label_store.LabelStore`: one fsynced line per label, the last one per criterion wins), so a
  reload, a closed tab or a restarted server resumes at the first response not fully labelled.
- Several labellers, by name: each has a file of their own.
- Sealed like `atelier gateway serve`: loopback only, the Host header must be the bound address, a
  cross-site Origin is refused, bodies are capped (`openai_api.RequestGuard`), and every request
  carries the token the command prints in the page's URL; like the view's, every answer forbids
  framing and loading anything from elsewhere, and sends no referrer (`LABEL_PAGE_HEADERS`).
"""

from __future__ import annotations

import hashlib
import hmac
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from atelier.benchmarks.common.errors import ConfigError
from atelier.runs.studies.label_store import LabelStore, checked_labeller
from atelier.runs.studies.meta_eval import SheetItem, sheet_items

PAGE = Path(__file__).with_name("label_page.html")
# the view's headers (no framing, nothing loaded from elsewhere, no referrer: the page's URL holds its
# token), except that the page sends its labels to this server
LABEL_PAGE_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cross-origin-resource-policy": "same-origin",
}
TOKEN_HEADER = "x-atelier-token"
MAX_BODY_BYTES = 64 * 1024  # one label and its feedback


@dataclass(frozen=True)
class Rubric:
    """A judge's rubric scale on the page: integer ratings low..high, times `factor` is the score on
    the judge's criterion scale."""

    name: str
    low: int
    high: int
    factor: float
    scale: str  # which of the sheet's items it labels (their `scale`); "" takes every item

    def keeps(self, item: SheetItem) -> bool:
        return not self.scale or item.scale == self.scale


RUBRICS = {
    "bespoke": Rubric("BESPOKE criteria, 1-5 (Table 18)", 1, 5, 1.0, "1-5"),
    "pqr": Rubric("PQR sub-criteria, 0-10 (PDR-Bench App. C)", 0, 10, 1.0, "0-10"),
    "lampqa_aspects": Rubric("LaMP-QA rubric aspects, 0-2", 0, 2, 0.5, ""),
}


class GivenLabel(BaseModel):
    labeller: str
    item: str = Field(min_length=1, max_length=64)
    criterion: str = Field(min_length=1, max_length=200)
    rating: int
    feedback: str | None = Field(default=None, max_length=4000)


class LabellingSession:
    """The responses of one judge in one run to be labelled, and where each labeller's labels go."""

    def __init__(self, run_dir: Path, judge: str | None, token: str) -> None:
        found = sheet_items(run_dir, judge)
        rubric = RUBRICS.get(found.judge_name)
        if rubric is None:
            raise ConfigError(
                f"judge {found.judge!r} ({found.judge_name}) has no rubric the labelling page knows "
                f"(it labels {', '.join(RUBRICS)}); use `atelier meta-eval sheet` for it"
            )
        self.run_dir = Path(run_dir)
        self.judge = found.judge
        self.rubric = rubric
        self._token = token
        self.responses: dict[str, list[SheetItem]] = {}
        for item in found.items:
            if rubric.keeps(item):
                self.responses.setdefault(self.response_id(item.case_id, item.system), []).append(item)
        if not self.responses:
            raise ConfigError(f"judge {found.judge!r} in {run_dir} has no criterion on the {rubric.name} scale")
        self._stores: dict[str, LabelStore] = {}

    def response_id(self, case_id: str, system: str) -> str:
        """An opaque id: nothing in it tells the case or the system (keyed by the server's token)."""
        digest = hmac.new(self._token.encode(), f"{case_id}\x00{system}".encode(), hashlib.sha256)
        return "r" + digest.hexdigest()[:12]

    def store(self, labeller: str) -> LabelStore:
        name = checked_labeller(labeller)
        if name not in self._stores:
            self._stores[name] = LabelStore(self.run_dir, self.judge, name)
        return self._stores[name]

    def order(self, labeller: str) -> list[str]:
        """This labeller's order of the responses: random, and the same on every visit."""
        ids = sorted(self.responses)
        random.Random(f"{self.judge}\x00{labeller}").shuffle(ids)
        return ids

    def for_labeller(self, labeller: str) -> dict[str, Any]:
        """What the page shows: the responses in this labeller's order, blind, and what they gave."""
        latest = self.store(labeller).latest()
        items, given = [], {}
        for rid in self.order(labeller):
            first = self.responses[rid][0]
            items.append(
                {
                    "id": rid,
                    "query": first.query,
                    "persona": first.persona,
                    "response": first.response,
                    "criteria": [
                        {
                            "key": item.criterion,
                            "description": item.description,
                            "text": item.criterion_text,
                        }
                        for item in self.responses[rid]
                    ],
                }
            )
            mine = {
                item.criterion: {"rating": label.get("rating"), "feedback": label.get("feedback")}
                for item in self.responses[rid]
                if (label := latest.get((item.case_id, item.system, item.criterion))) is not None
            }
            if mine:
                given[rid] = mine
        return {
            "judge": self.judge,
            "labeller": labeller,
            "rubric": {"name": self.rubric.name, "low": self.rubric.low, "high": self.rubric.high},
            "items": items,
            "given": given,
        }

    def give(self, label: GivenLabel) -> dict[str, Any]:
        """Save one label; ValueError (a 400) when it is not one of this page's."""
        items = self.responses.get(label.item)
        if items is None:
            raise ValueError(f"no response {label.item!r} on this page")
        item = next((i for i in items if i.criterion == label.criterion), None)
        if item is None:
            raise ValueError(f"response {label.item!r} has no criterion {label.criterion!r}")
        if not self.rubric.low <= label.rating <= self.rubric.high:
            raise ValueError(f"rating {label.rating} is outside the scale {self.rubric.low}-{self.rubric.high}")
        store = self.store(label.labeller)
        store.append(
            {
                "case_id": item.case_id,
                "system": item.system,
                "criterion": item.criterion,
                "score": label.rating * self.rubric.factor,
                "rating": label.rating,
                "scale": f"{self.rubric.low}-{self.rubric.high}",
                "feedback": (label.feedback or "").strip() or None,
                "criterion_text": item.criterion_text or None,
            }
        )
        latest = store.latest()
        done = sum(
            all((i.case_id, i.system, i.criterion) in latest for i in group) for group in self.responses.values()
        )
        return {"saved": True, "responses_done": done, "responses": len(self.responses)}


def label_app(session: LabellingSession, token: str):
    """The page and its two calls, behind the token (Host and Origin are the server's guard's)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse
    from starlette.routing import Route

    def authorized(request: Request) -> bool:
        given = request.headers.get(TOKEN_HEADER) or request.query_params.get("token") or ""
        return hmac.compare_digest(given.encode(), token.encode())

    def refused() -> PlainTextResponse:
        return PlainTextResponse(
            "no or wrong token: open the URL `atelier label` printed (it carries the token)", status_code=401
        )

    async def page(request: Request):
        if not authorized(request):
            return refused()
        response = HTMLResponse(PAGE.read_text(encoding="utf-8"))
        response.headers["cache-control"] = "no-store"
        response.headers["referrer-policy"] = "no-referrer"  # the token is in the URL
        return response

    async def items(request: Request):
        if not authorized(request):
            return refused()
        try:
            return JSONResponse(session.for_labeller(request.query_params.get("labeller", "")))
        except ConfigError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)

    async def give(request: Request):
        if not authorized(request):
            return refused()
        try:
            label = GivenLabel.model_validate(await request.json())
            return JSONResponse(session.give(label))
        except ValidationError as exc:
            first = exc.errors()[0]
            return JSONResponse({"error": f"{'.'.join(map(str, first['loc']))}: {first['msg']}"}, status_code=400)
        except (ValueError, ConfigError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)

    return Starlette(
        routes=[
            Route("/", page),
            Route("/api/items", items),
            Route("/api/label", give, methods=["POST"]),
        ]
    )


def serve_labelling(
    run_dir: Path,
    judge: str | None,
    *,
    host: str,
    port: int,
    token: str,
    labeller: str | None = None,
    start: bool = False,
):
    """The page's server, bound (its URL is known): `start` serves on a daemon thread and returns the
    server (tests); otherwise the caller serves it (`serve_forever`)."""
    from atelier.agents.models.openai_api import RequestGuard, loopback_hosts
    from atelier.runs.reading.view_server import SecurityHeaders
    from atelier.tools.asgi_server import AsgiServer

    session = LabellingSession(run_dir, judge, token)
    if labeller is not None:
        checked_labeller(labeller)
    app = label_app(session, token)
    server = AsgiServer(app, host, port)
    app.add_middleware(RequestGuard, hosts=loopback_hosts(server.port), max_body_bytes=MAX_BODY_BYTES)
    app.add_middleware(SecurityHeaders, headers=LABEL_PAGE_HEADERS)  # outermost: refusals carry them too
    url = f"{server.base_url}/?token={token}" + (f"&labeller={labeller}" if labeller else "")
    return (server.start() if start else server), session, url
