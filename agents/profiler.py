"""The profiler: LLM user profiles from history, following BESPOKE's prompts (appendix C.3).

- `build_profile`: the general profile of Table 21 (overall interests; per interest the explored
  subtopics, preferred presentation, and actionable guidance). Given an existing profile it
  updates it with new history only, so a long or growing history is folded in chunk by chunk.
- `build_query_profile`: the query-aware profile of Table 23 (per criterion — need alignment,
  content depth, tone, explanation style — what to emphasise, avoid, and how to deliver, and why).

History is untrusted data in the prompt and carries event ids (`[id] ...`) so the profile can cite
its evidence; callers drop cited ids that are not real events.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from atelier.agents.models.gateway import Gateway
from atelier.agents.prompts import Section, build_messages, conversation_section
from atelier.benchmarks.case import ConversationTurn

# --------------------------------------------------------------------------- general profile

PROFILE_ROLE = (
    "You are to produce a user profile that helps with information-seeking tasks.\n"
    "Information-seeking tasks aim to address a user's information need by providing the desired "
    "information in an appropriate form. Analyze the user's full search and chat history and infer "
    "preferences which help satisfy future personalized information seeking tasks for the user."
)
PROFILE_TASK = (
    "Based on the user's preferences, describe the user's profile in as much detail as possible that would "
    "help satisfy future information seeking tasks.\n"
    "Express needs and preferences without relying on demographic labels (e.g., nationality, ethnicity, "
    "region); ground all claims in observable behaviors and content/format preferences.\n"
    "Structure the profile to maximize usefulness for information seeking:\n"
    "- Specify overall interests (broad and specific).\n"
    "- For each interest: 1) frequently explored subtopics and focal aspects (from questions and follow-ups); "
    "2) preferred presentation signals (organization, content depth, medium, tone, explanation style) inferred "
    "from behavior; 3) personalization takeaways and actionable guidance (treat language usage as behavior, "
    "not identity; avoid implying nationality or region).\n"
    "- For each interest, list the ids of the history items (the [id] before each item) it is based on."
)
PROFILE_UPDATE_TASK = (
    "The existing profile was built from the user's earlier history; the history above is new. Return the "
    "complete updated profile: keep what the new history does not contradict, revise what it changes, and "
    "add new interests and signals it reveals. " + PROFILE_TASK
)


class PresentationSignals(BaseModel):
    organization: str = Field(description="How answers should be organised (lists, steps, overview first, ...).")
    content_depth: str = Field(description="How deep and detailed the content should be.")
    medium: str = Field(description="Preferred medium or format (text, tables, code, links, examples, ...).")
    tone: str = Field(description="Preferred tone.")
    explanation_style: str = Field(description="Preferred way of explaining.")


class InterestProfile(BaseModel):
    interest: str
    subtopics: list[str] = Field(default_factory=list, description="Frequently explored subtopics and focal aspects.")
    presentation: PresentationSignals
    guidance: list[str] = Field(default_factory=list, description="Personalization takeaways and actionable guidance.")
    evidence_ids: list[str] = Field(default_factory=list, description="Ids of the history items this is based on.")


class UserProfile(BaseModel):
    broad_interests: list[str] = Field(default_factory=list)
    specific_interests: list[str] = Field(default_factory=list)
    interests: list[InterestProfile] = Field(default_factory=list)

    def blocks(self) -> list[tuple[str, list[str]]]:
        """The profile as text blocks (overview, then one per interest) with the ids each cites."""
        out: list[tuple[str, list[str]]] = []
        overview = []
        if self.broad_interests:
            overview.append("Broad interests: " + "; ".join(self.broad_interests))
        if self.specific_interests:
            overview.append("Specific interests: " + "; ".join(self.specific_interests))
        if overview:
            out.append(("\n".join(overview), []))
        for item in self.interests:
            p = item.presentation
            lines = [f"## {item.interest}"]
            if item.subtopics:
                lines.append("Subtopics: " + "; ".join(item.subtopics))
            lines.append(
                f"Presentation: organization: {p.organization}; depth: {p.content_depth}; medium: {p.medium}; "
                f"tone: {p.tone}; explanation style: {p.explanation_style}"
            )
            lines += [f"- {g}" for g in item.guidance]
            out.append(("\n".join(lines), list(item.evidence_ids)))
        return out


async def build_profile(gateway: Gateway, role: str, history: str, existing: UserProfile | None = None) -> UserProfile:
    sections = []
    if existing is not None:
        sections.append(Section("Existing profile", existing.model_dump_json(indent=1)))
    sections.append(
        Section("New history" if existing else "The user's search and chat history", history, untrusted=True)
    )
    messages = build_messages(PROFILE_ROLE, sections, PROFILE_UPDATE_TASK if existing else PROFILE_TASK)
    return await gateway.structured(role, messages, UserProfile)


# --------------------------------------------------------------------------- query-aware profile

QUERY_PROFILE_ROLE = (
    "You are a personalization profiler. Goal: Create per-query personalized guidance on each criterion."
)
QUERY_PROFILE_TASK = """Do NOT default to general preferences. Extract query-topic-specific signals from the user's history:
Repeated subtopics and facets specific to THIS query's topic (subcategories, approaches, features, constraints). Format/style cues: preferred structure (checklists/templates/stepwise), concision vs detail, examples, references. Negative/avoid cues: content types they ignore/dislike, off-topic tangents, categories or formats they avoid. Determine domain fit: professional/work vs hobby/personal, using cues in the query and history.

If professional/work: prioritize history mentioning projects, workplace tools/stacks, teams/clients, deadlines, compliance; de-prioritize hobby-only signals.
If hobby/personal: prioritize history about personal projects, de-prioritize enterprise/production requirements.
If mixed or ambiguous: assess the query's complexity/difficulty level to determine domain - complex/technical queries suggest professional context, simpler and easier queries suggest hobby/personal context.
Selectively cite only history aligned with the inferred domain; ignore high-frequency but off-domain signals.

For EACH criterion (Need Alignment, Content Depth, Tone, Explanation Style), generate a comprehensive, highly detailed profile tailored to THIS specific query using only the most relevant history signals.
Provide extensive detail on what to emphasize: include specific topics, subtopics, approaches, methodologies, tools, frameworks, and examples that align with the user's demonstrated interests.
Elaborate thoroughly on what to avoid: specify particular content types, tangents, approaches, terminology levels, or presentation styles that the user has shown disinterest in or actively filtered out.
Detail exactly how to deliver content: specify preferred formatting (bullet points, numbered lists, code blocks, tables), structural organization (step-by-step vs. overview-first vs. problem-solution), level of technical depth, use of examples, and pacing of information.
Specify the reasoning behind each profile choice: explain why certain approaches work better for this user based on their demonstrated patterns and preferences.
For each criterion, list the ids of the history items (the [id] before each item) it relies on."""


class CriterionGuidance(BaseModel):
    emphasize: list[str] = Field(default_factory=list)
    avoid: list[str] = Field(default_factory=list)
    delivery: str = Field(description="How to deliver the content: formatting, structure, depth, examples, pacing.")
    reasoning: str = Field(description="Why this works for this user, from their demonstrated patterns.")
    evidence_ids: list[str] = Field(default_factory=list, description="Ids of the history items relied on.")


class QueryProfile(BaseModel):
    domain: str = Field(description="professional/work, hobby/personal, or mixed — and why.")
    need_alignment: CriterionGuidance
    content_depth: CriterionGuidance
    tone: CriterionGuidance
    explanation_style: CriterionGuidance

    def blocks(self) -> list[tuple[str, list[str]]]:
        out: list[tuple[str, list[str]]] = [(f"Domain: {self.domain}", [])]
        for title, item in (
            ("Need Alignment", self.need_alignment),
            ("Content Depth", self.content_depth),
            ("Tone", self.tone),
            ("Explanation Style", self.explanation_style),
        ):
            lines = [f"## {title}"]
            if item.emphasize:
                lines.append("Emphasize: " + "; ".join(item.emphasize))
            if item.avoid:
                lines.append("Avoid: " + "; ".join(item.avoid))
            lines.append(f"Delivery: {item.delivery}")
            lines.append(f"Why: {item.reasoning}")
            out.append(("\n".join(lines), list(item.evidence_ids)))
        return out


async def build_query_profile(
    gateway: Gateway, role: str, query: str, history: str, previous_turns: Sequence[ConversationTurn] = ()
) -> QueryProfile:
    sections = [Section("Query", query)]
    if previous_turns:
        sections.append(conversation_section(previous_turns))
    sections.append(Section("The user's search and chat history", history, untrusted=True))
    return await gateway.structured(
        role, build_messages(QUERY_PROFILE_ROLE, sections, QUERY_PROFILE_TASK), QueryProfile
    )
