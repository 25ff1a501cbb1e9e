"""Every non-plain type the graphs put into state, interrupts or resume values: the list the
checkpoint serializer registers (so LangGraph never warns "Deserializing unregistered type")."""

from __future__ import annotations

from agents.citations import SourceRef
from agents.clarify import ClarifyAnswers, ClarifyRequest
from agents.judges.base import JudgeResult
from agents.planner import ReportForm, ResearchBrief
from agents.response import Citation, SystemResponse
from benchmarks.case import Case, CaseView
from graphs.deep_research.state import Clarification, Findings, Note
from graphs.inputs import GoldContext
from graphs.sources import WebHit
from memory.base import UserContext

STATE_TYPES: tuple[type, ...] = (
    Case, CaseView, UserContext, SystemResponse, Citation, JudgeResult,  # episodes
    GoldContext, SourceRef, WebHit,  # pipelines' inputs and sources
    Clarification, Note, Findings, ResearchBrief, ReportForm, ClarifyRequest, ClarifyAnswers,  # deep_research
)
