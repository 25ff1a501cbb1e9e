"""The memory curator: the LLM steps of a MemoryOS-style hierarchical memory (BAI-LAB/MemoryOS).

- `summarize_topics`: pages leaving short-term memory get at most two topic summaries (theme,
  keywords, content); each topic decides which mid-term session the pages join.
- `analyze_profile`: when a mid-term session gets hot, its unanalysed pages update the user's
  long-term profile: the existing profile plus new evidence in, the complete updated profile out,
  as levels on MemoryOS's personality-preference dimensions.
- `extract_knowledge`: the same pages yield short private facts about the user.

Pages are untrusted history in the prompt, each headed by its event id so results can cite them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

from atelier.agents.models.gateway import Gateway
from atelier.agents.prompts import Section, build_messages

# --------------------------------------------------------------------------- topics


class TopicSummary(BaseModel):
    theme: str = Field(description="A few words naming the topic.")
    keywords: list[str] = Field(default_factory=list, description="A handful of keywords of the topic.")
    content: str = Field(description="A very brief summary of what was said on this topic.")


class TopicSummaries(BaseModel):
    topics: list[TopicSummary] = Field(default_factory=list, description="At most two topics.")


TOPICS_ROLE = (
    "You are an expert in analyzing dialogue topics. Generate concise summaries. No more than two topics. "
    "Be as brief as possible."
)
TOPICS_TASK = (
    "Analyze the history items above and generate extremely concise subtopic summaries (if applicable), with a "
    "maximum of two themes. Each summary should be very brief - just a few words for the theme and content, "
    "with a few keywords."
)


async def summarize_topics(gateway: Gateway, role: str, pages: str, max_topics: int = 2) -> list[TopicSummary]:
    messages = build_messages(TOPICS_ROLE, [Section("History items", pages, untrusted=True)], TOPICS_TASK)
    answer = await gateway.structured(role, messages, TopicSummaries)
    return [t for t in answer.topics if t.content.strip() or t.theme.strip()][:max_topics]


# --------------------------------------------------------------------------- long-term profile

DIMENSIONS = {
    "Psychological model (basic needs and personality)": (
        "Extraversion, Openness, Agreeableness, Conscientiousness, Neuroticism, Physiological Needs, Need for "
        "Security, Need for Belonging, Need for Self-Esteem, Cognitive Needs, Aesthetic Appreciation, "
        "Self-Actualization, Need for Order, Need for Autonomy, Need for Power, Need for Achievement"
    ),
    "Expectations of an AI assistant": (
        "Helpfulness, Honesty, Safety, Instruction Compliance, Truthfulness, Coherence, Complexity (preference "
        "for detailed, complex information), Conciseness (preference for brief, clear answers)"
    ),
    "Content interest tags": (
        "Science, Education, Psychology, Family, Fashion, Art, Health, Financial Management, Sports, Food, "
        "Travel, Music, Literature, Film, Social Media Activity, Tech, Environmental, History, Political, "
        "Religious, Gaming, Animal"
    ),
    "Communication preferences": (
        "Emotional Expression (direct vs. restrained), Sense of Humor (humorous vs. serious), Information Density "
        "(detailed vs. concise), Language Style (formal vs. casual), Practicality (practical advice vs. theory)"
    ),
}

PROFILE_ROLE = (
    "You are a professional user preference analysis assistant. Your task is to analyze the user's personality "
    "preferences from the given history based on the provided dimensions. For each dimension: determine if the "
    "history reflects it; if so, determine the user's preference level (High / Medium / Low) and briefly explain "
    "the reasoning, including time, people and context if possible; if not, do not list it."
)
PROFILE_TASK = (
    "Update the user profile with the new history items:\n"
    "1. Review the existing user profile.\n"
    "2. Analyze the new items for evidence on the dimensions.\n"
    "3. Return the comprehensive updated profile: keep the existing insights and integrate the new observations.\n"
    "4. For each dimension that can be identified, give its level and brief reasoning, and the ids (the [id] "
    "before each item) of the items that show it.\n"
    "5. Leave out dimensions that neither the old profile nor the new items reveal."
)


class ProfileTrait(BaseModel):
    dimension: str
    level: Literal["High", "Medium", "Low"]
    reasoning: str
    event_ids: list[str] = Field(default_factory=list, description="Ids of the history items showing it.")

    def render(self) -> str:
        return f"{self.dimension} ({self.level}): {self.reasoning}"


class ProfileAnalysis(BaseModel):
    traits: list[ProfileTrait] = Field(default_factory=list, description="The complete updated profile.")


async def analyze_profile(
    gateway: Gateway, role: str, existing: Sequence[ProfileTrait], pages: str
) -> list[ProfileTrait]:
    sections = [
        Section("Dimensions", "\n".join(f"[{group}] {names}" for group, names in DIMENSIONS.items())),
        Section("Existing user profile", "\n".join(t.render() for t in existing) or "No existing profile data."),
        Section("New history items", pages, untrusted=True),
    ]
    answer = await gateway.structured(role, build_messages(PROFILE_ROLE, sections, PROFILE_TASK), ProfileAnalysis)
    return answer.traits


# --------------------------------------------------------------------------- private facts

KNOWLEDGE_ROLE = (
    "You are a knowledge extraction assistant. Your task is to extract the user's private data from their "
    "history: personal information, preferences, or private facts about the user. Be extremely concise and "
    "factual in your extractions. Use the shortest possible phrases."
)
KNOWLEDGE_TASK = (
    "Extract personal information about the user from the items above, each as a brief fact with minimal "
    "context (including entities and time), with the ids (the [id] before each item) it comes from. Return no "
    "facts if there are none."
)


class UserFact(BaseModel):
    fact: str
    event_ids: list[str] = Field(default_factory=list, description="Ids of the history items it comes from.")


class UserKnowledge(BaseModel):
    facts: list[UserFact] = Field(default_factory=list)


async def extract_knowledge(gateway: Gateway, role: str, pages: str) -> list[UserFact]:
    messages = build_messages(KNOWLEDGE_ROLE, [Section("History items", pages, untrusted=True)], KNOWLEDGE_TASK)
    answer = await gateway.structured(role, messages, UserKnowledge)
    return [f for f in answer.facts if f.fact.strip()]
