"""PQR's R axis (PDR-Bench §4.3, Appendix I.3): claims, their cited sources, support, FA and CC.

1. Extract every verifiable factual statement with the reference it cites, as (fact, ref_idx, url)
   triplets; a statement citing two references is two triplets, an uncited one has an empty source.
   `ref_idx` is constrained to the response's own citation numbers.
2. Deduplicate: exact duplicate (claim, source) pairs count once (`benchmarks.metrics.pqr`); with
   `dedupe = "llm"` a second model pass also merges restatements of the same fact citing the same source.
3. Read each cited source: a web address through the run's web (its cache, so on replay exactly what
   was recorded); a source with no web address (gold information, a context item) from the run's
   source store by the sha256 its citation carries (`JudgeEnv.sources`), i.e. exactly the text the
   system read. For this project's pipelines a web citation carries the URL and that sha256 too; a
   fetched text whose hash differs is still judged, and counted as a mismatch.
4. Check support per source: supported / unsupported / unknown (unknown counts as unsupported, Eq. 4);
   a source that cannot be read makes its claims unknown, with the reason. Unreadable sources are
   counted per report (`unreadable_sources`, a `source_unreadable` degradation); with
   `unreadable = "exclude"` their claims leave FA's denominator.
5. FA and CC from `benchmarks.metrics.pqr.reliability_from_claims`.

Degenerate output: an extracted fact, or a support verdict's reasoning, that is empty or punctuation
only has that call asked again once (a `judge_output_gated` degradation); still so, the judgment fails
with the reason.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field, create_model

from atelier.agents.judges.base import JudgeEnv, ask_again_once, blank, quoted
from atelier.agents.judges.material import item_keys, numbered, per_item_model, response_section
from atelier.agents.prompts import Section, build_messages
from atelier.agents.response import Citation, SystemResponse
from atelier.benchmarks.common.degradation import Degradation, degradation
from atelier.benchmarks.common.errors import AtelierError
from atelier.benchmarks.metrics.pqr import (
    ClaimCheck,
    FactualReliability,
    NoCitation,
    Unreadable,
    reliability_from_claims,
)

Verdict = Literal["supported", "unsupported", "unknown"]


@dataclass(frozen=True)
class ReliabilitySettings:
    role: str
    no_citation: NoCitation = "zero"
    dedupe: Literal["exact", "llm"] = "llm"
    max_source_chars: int = 12000
    unreadable: Unreadable = "unsupported"
    step: str = "judge:pqr"  # where gated outputs and unreadable sources are recorded


@dataclass
class Triplet:
    claim: str
    source: str | None  # "[k]" for the response's k-th citation, else the URL; None when uncited
    url: str | None
    citation: Citation | None
    verdict: Verdict | None = None
    reason: str = ""
    source_read: bool = True


# --------------------------------------------------------------------------- 1. extraction

EXTRACT_ROLE = (
    "You read a research report and extract only its verifiable factual statements, each with the reference "
    "it cites. You are careful: it is better to miss a statement than to mislabel one."
)
EXTRACT_GUIDE = """A factual statement is a verifiable claim about the state of the world: things that happened, \
quantities and statistics, recognised classifications or definitions, reported research findings.
Leave out: the report's goals, intentions or plans; proposals and strategies; statements about the report \
itself (its structure or contents); predictions and speculation; opinions and recommendations; descriptions \
of how research will be done.
Citations appear as a number after the text (`... seven classes 15`), numbers in brackets (`[15]`, `[3][7]`), \
numbers with location marks (`[15+L10]`: take the first number only), or inline links `[title](url)`."""
EXTRACT_TASK = """Extract every factual statement as a complete, understandable sentence, with:
- ref_idx: the number of the reference it cites, from the reference list; "0" for an inline link; "" when \
it cites nothing;
- url: the cited reference's link (from the reference list or the inline link); "" when it cites nothing.
A statement citing several references is listed once per reference. Return an empty list when the report \
states no facts."""


class ExtractedClaim(BaseModel):
    """What the judge reads of one claim of `_extraction_model`'s answers."""

    fact: str
    ref_idx: str
    url: str


class ExtractedClaims(BaseModel):
    claims: list[ExtractedClaim]


def _extraction_model(citations: int) -> type[ExtractedClaims]:
    # built at runtime: no static type
    allowed: Any = Literal[tuple(["", "0"] + [str(i) for i in range(1, citations + 1)])]
    claim = create_model(
        "ExtractedClaim",
        __base__=ExtractedClaim,
        fact=(str, Field(min_length=1, description="The factual statement, as a complete sentence.")),
        ref_idx=(allowed, Field(description="Cited reference number; '0' inline link; '' uncited.")),
        url=(str, Field(description="The cited reference's URL; '' when uncited.")),
    )
    return create_model(
        "ExtractedClaims",
        __base__=ExtractedClaims,
        claims=(list[claim], Field(description="One item per (fact, reference).")),
    )


def extraction_problems(extracted: ExtractedClaims) -> list[str]:
    blanks = [c.fact for c in extracted.claims if blank(c.fact)]
    if not blanks:
        return []
    return [f"{len(blanks)} extracted statement(s) are empty or punctuation only (e.g. {quoted(blanks[0])})"]


def references_text(citations: list[Citation]) -> str:
    return numbered([" — ".join(p for p in (c.title, c.url) if p) or c.source_id for c in citations])


def extraction_messages(response: SystemResponse) -> list[dict[str, str]]:
    sections = [Section("What counts", EXTRACT_GUIDE), response_section(response, "The report")]
    if response.citations:
        sections.append(Section("The report's reference list", references_text(response.citations), untrusted=True))
    return build_messages(EXTRACT_ROLE, sections, EXTRACT_TASK)


def resolve(item: ExtractedClaim, citations: list[Citation]) -> Triplet:
    """A triplet's source: the k-th citation for ref_idx k, else the URL it names; uncited when neither."""
    url = item.url.strip() or None
    if item.ref_idx not in ("", "0"):
        citation = citations[int(item.ref_idx) - 1]
        return Triplet(item.fact, f"[{item.ref_idx}]", citation.url or url, citation)
    if url:
        named = next((c for c in citations if c.url and c.url.rstrip("/") == url.rstrip("/")), None)
        return Triplet(item.fact, url, url, named)
    return Triplet(item.fact, None, None, None)


# --------------------------------------------------------------------------- 2. deduplication


def exact_unique(triplets: list[Triplet]) -> list[Triplet]:
    seen: set[tuple[str, str]] = set()
    unique = []
    for t in triplets:
        key = ClaimCheck(claim=t.claim, source=t.source).identity()
        if key not in seen:
            seen.add(key)
            unique.append(t)
    return unique


DEDUPE_ROLE = "You compare factual statements and find those that state the same fact in other words."


def _dedupe_model(count: int) -> type[BaseModel]:
    fields: dict[str, Any] = {"c1": (Literal["new"], Field(description="The first statement is always new."))}
    for i in range(2, count + 1):
        options = Literal[tuple(["new"] + [str(k) for k in range(1, i)])]  # type: ignore[valid-type]
        fields[f"c{i}"] = (
            options,
            Field(
                description=f"'new', or the number of an earlier statement that states the same fact as statement {i}."
            ),
        )
    return create_model("Duplicates", **fields)


async def llm_dedupe(triplets: list[Triplet], env: JudgeEnv, role: str) -> tuple[list[Triplet], list[list[int]]]:
    """Merge restatements of the same fact that cite the same source (the paper's second pass)."""
    claims = list(dict.fromkeys(t.claim for t in triplets))
    if len(claims) < 2:
        return triplets, []
    messages = build_messages(
        DEDUPE_ROLE,
        [Section("Statements", numbered(claims), untrusted=True)],
        "For each statement, answer 'new', or the number of an earlier statement that states "
        "the same fact (same subject, same claim, same figures).",
    )
    answer = await env.gateway.structured(role, messages, _dedupe_model(len(claims)))
    same_as = {claims[i]: claims[int(v) - 1] for i, v in enumerate(answer.model_dump().values()) if v != "new"}
    canonical: dict[str, str] = {}
    for claim in claims:  # a duplicate points to an earlier statement, whose canonical form is known
        canonical[claim] = canonical[same_as[claim]] if claim in same_as else claim
    kept: dict[tuple[str, str | None], Triplet] = {}
    merged: list[list[int]] = []
    for index, t in enumerate(triplets):
        key = (canonical[t.claim], t.source)
        if key in kept:
            merged.append([triplets.index(kept[key]) + 1, index + 1])
        else:
            kept[key] = t
    return list(kept.values()), merged


# --------------------------------------------------------------------------- 3-4. sources and support

SUPPORT_ROLE = (
    "You are a careful fact checker. You decide whether a source text supports factual statements, using only "
    "what the source says."
)


class _SupportVerdict(BaseModel):
    reasoning: str = Field(description="One or two sentences: what the source says about the statement.")
    verdict: Verdict = Field(
        description="supported: the source states or directly implies it; unsupported: "
        "the source contradicts it or does not contain it; unknown: cannot tell."
    )


async def read_source(triplet: Triplet, env: JudgeEnv) -> tuple[str | None, str, bool | None]:
    """(text or None, reason when unreadable, text matches the citation's sha256 (None: no hash))."""
    expected = triplet.citation.sha256 if triplet.citation else None
    web_address = triplet.url is not None and triplet.url.lower().startswith(("http://", "https://"))
    if expected and not (triplet.citation and triplet.citation.url):  # no web address: what the system read
        return stored_source(expected, env)
    if not triplet.url:
        return None, "the cited reference has no URL and no stored text to read", None
    if not web_address:
        return None, f"the cited source {triplet.url[:80]!r} is not a web address", None
    if env.web is None:
        return None, "no web to read the source from", None
    try:
        page = await (await env.web()).fetch(triplet.url)
    except AtelierError as exc:  # refused, failed, or not recorded on replay: its claims are unknown
        return None, f"source not readable: {exc}", None
    matches = None if not expected else hashlib.sha256(page.text.encode("utf-8")).hexdigest() == expected
    return page.text, "", matches


def stored_source(sha: str, env: JudgeEnv) -> tuple[str | None, str, bool | None]:
    """A cited text from the run's source store, by the sha256 its citation carries."""
    if env.sources is None:
        return None, f"no source store to read the cited text {sha[:12]} from", None
    try:
        text = env.sources(sha)
    except LookupError as exc:
        return None, f"source not readable: {exc}", None
    return text, "", hashlib.sha256(text.encode("utf-8")).hexdigest() == sha


def support_problems(answer: BaseModel) -> list[str]:
    blanks = [key for key, verdict in answer if blank(verdict.reasoning)]
    if not blanks:
        return []
    return [f"the reasoning on statement(s) {', '.join(blanks)} is empty or punctuation only"]


async def check_source(claims: list[Triplet], env: JudgeEnv, settings: ReliabilitySettings) -> dict[str, Any]:
    text, reason, matches = await read_source(claims[0], env)
    if text is None:
        for t in claims:
            t.verdict, t.reason, t.source_read = "unknown", reason, False
        return {"source": claims[0].source, "url": claims[0].url, "read": False, "reason": reason, "degraded": []}
    shown = text[: settings.max_source_chars]
    keys = item_keys(len(claims))
    messages = build_messages(
        SUPPORT_ROLE,
        [
            Section("Source text" + (" (truncated)" if len(text) > len(shown) else ""), shown, untrusted=True),
            Section("Statements", "\n".join(f"{k}: {t.claim}" for k, t in zip(keys, claims)), untrusted=True),
        ],
        "For each statement, decide whether the source text supports it.",
    )
    gated = await ask_again_once(
        env.gateway,
        settings.role,
        messages,
        per_item_model("SupportVerdicts", _SupportVerdict, keys),
        support_problems,
        settings.step,
    )
    answer = gated.or_fail(f"the support check of source {claims[0].source}")
    for key, t in zip(keys, claims):
        verdict = getattr(answer, key)
        t.verdict, t.reason = verdict.verdict, verdict.reasoning
    return {
        "source": claims[0].source,
        "url": claims[0].url,
        "read": True,
        "text_matches_citation": matches,
        "chars": len(text),
        "degraded": gated.degraded,
    }


async def judge_reliability(
    response: SystemResponse, env: JudgeEnv, settings: ReliabilitySettings
) -> tuple[FactualReliability, dict[str, Any], list[Degradation]]:
    """FA and CC of the response, the record of every claim and source, and what degraded."""
    gated = await ask_again_once(
        env.gateway,
        settings.role,
        extraction_messages(response),
        _extraction_model(len(response.citations)),
        extraction_problems,
        settings.step,
    )
    extracted = gated.or_fail("the claim extraction")
    degraded = list(gated.degraded)
    triplets = [resolve(item, response.citations) for item in extracted.claims]
    unique = exact_unique(triplets)
    merged: list[list[int]] = []
    if settings.dedupe == "llm":
        unique, merged = await llm_dedupe(unique, env, settings.role)
    by_source: dict[str, list[Triplet]] = {}
    for t in unique:
        if t.source:
            by_source.setdefault(t.source, []).append(t)
    sources = await asyncio.gather(*(check_source(group, env, settings) for group in by_source.values()))
    for source in sources:
        degraded += source.pop("degraded")
    checks = [
        ClaimCheck(
            claim=t.claim,
            source=t.source,
            source_read=t.source_read,
            supported=None if t.verdict in (None, "unknown") else t.verdict == "supported",
        )
        for t in unique
    ]
    # exact duplicates were dropped above already; the metric counts what it is given
    reliability = reliability_from_claims(checks, settings.no_citation, settings.unreadable).model_copy(
        update={"n_duplicates": len(triplets) - len(exact_unique(triplets))}
    )
    unreadable = [s for s in sources if not s["read"]]
    if unreadable:
        reasons = "; ".join(f"{s['source']}: {s['reason']}" for s in unreadable[:3])
        degraded.append(
            degradation(
                "source_unreadable",
                settings.step,
                f"{len(unreadable)} of {len(sources)} cited sources could not be read ({reliability.n_unreadable} claim(s) "
                f"{'left out of FA' if settings.unreadable == 'exclude' else 'counted unsupported'}): {reasons}",
                count=len(unreadable),
            )
        )
    record = {
        "n_extracted": len(triplets),
        "llm_merged": merged,
        "claims": [
            {"claim": t.claim, "source": t.source, "url": t.url, "verdict": t.verdict, "reason": t.reason}
            for t in unique
        ],
        "sources": sources,
        "unreadable_sources": len(unreadable),
        "unreadable_claims_are": settings.unreadable,
        "source_text_mismatches": sum(s.get("text_matches_citation") is False for s in sources),
    }
    return reliability, record, degraded
