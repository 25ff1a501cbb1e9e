"""What the simulated user knows, as prompt sections: who they are and what they are looking for.

Following tau2-bench and PersonaLens, a simulated user has *known* information (its persona or,
without one, the statements its history holds about it, and the hidden need behind its query) and
treats everything else as unknown: it never makes facts up, discloses progressively, and speaks in
its own words. The same grounding serves clarification answers, conversation turns and feedback.
"""

from __future__ import annotations

from atelier.agents.prompts import Section
from atelier.agents.user_sim.persona import render_persona
from atelier.benchmarks.case import Case, ExplicitPersona, MemorySnippet, PreferenceStatement, PTKBStatement

STOP_TOKEN = "###STOP###"
SELF_STATEMENT_LIMIT = 60  # without a persona: at most this many statements from the history

SIMULATOR_ROLE = (
    "You are playing a real person who is using an AI assistant to find information. You are not an "
    "assistant: you never answer your own question and never write the assistant's part.\n"
    "- What you know is exactly what is written under 'Who you are' and 'What you are looking for'. "
    "Anything not written there is unknown to you: never make up facts about yourself or your need.\n"
    "- Disclose progressively: say only what the assistant's message calls for.\n"
    "- Speak in your own words, briefly and naturally, in the first person. Never copy the descriptions "
    "below word for word."
)


def who_you_are(case: Case) -> Section:
    """The persona's facets; without one, the statements the user's history makes about them."""
    if case.persona is not None and case.persona.attributes:
        return Section("Who you are", render_persona(case.persona.attributes))
    statements = [
        e.render()
        for e in case.history
        if isinstance(e, (PTKBStatement, PreferenceStatement, MemorySnippet, ExplicitPersona))
    ][:SELF_STATEMENT_LIMIT]
    return Section("Who you are (things you have told assistants before)", "\n".join(statements), untrusted=True)


def looking_for(case: Case) -> Section:
    """The hidden need behind the query: the gold need, else the narrative, else the rubric aspects."""
    gold = case.gold
    need = gold.information_need or gold.narrative or ""
    if not need and gold.rubric_aspects:
        need = "You care about: " + "; ".join(a.aspect for a in gold.rubric_aspects)
    if not need and gold.preference:
        need = f"Whatever the answer, it must respect this preference of yours: {gold.preference}"
    body = f"You asked: {case.query.text}\n\n{need or 'Nothing beyond the question itself.'}"
    return Section("What you are looking for (private: the assistant has not seen this)", body)


def user_sections(case: Case) -> list[Section]:
    return [who_you_are(case), looking_for(case)]
