"""Query expansion for history retrieval, following BESPOKE (§4.4, appendix C.4, Table 25).

- `cot`: the model reasons step by step about the key aspects that matter for finding the
  relevant past sessions (Su et al., 2024).
- `pseudo_history`: the model writes a hypothetical past history entry of the user — a chat
  message or a search query with notes — HyDE-style (Gao et al., 2023), whose text is closer to
  the real history entries than the query is.

The expansion is free text; the retriever searches with the query followed by it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from atelier.agents.models.gateway import Gateway
from atelier.agents.prompts import Section, build_messages, conversation_section
from atelier.benchmarks.case import ConversationTurn

ExpansionKind = Literal["cot", "pseudo_history"]

ROLE = "You are a retrieval assistant for user history (chat + search)."

TASKS: dict[ExpansionKind, str] = {
    "cot": (
        "Given the original query, think step by step to infer the key aspects that seem important for "
        "retrieving relevant past sessions.\nNo bullets, no extra text."
    ),
    "pseudo_history": (
        "You are generating a piece of the user's past history entry (it can be either a chat message to an "
        "assistant or a search query with notes). The generated text should sound like something the user "
        "actually wrote before, and it must be highly useful for retrieving relevant history sessions.\n"
        "Guidelines:\n"
        "- Write in natural style as if it were truly authored by the user.\n"
        "- It may look like a chat utterance (full sentence, conversational) or a search query (short and "
        "keyword-based).\n"
        "- Output ONLY the history text."
    ),
}


def expansion_messages(
    kind: ExpansionKind, query: str, previous_turns: Sequence[ConversationTurn] = ()
) -> list[dict[str, str]]:
    sections = []
    if previous_turns:
        sections.append(conversation_section(previous_turns))
    sections.append(Section("Query", query, untrusted=True))
    return build_messages(ROLE, sections, TASKS[kind])


async def expand_query(
    gateway: Gateway, role: str, kind: ExpansionKind, query: str, previous_turns: Sequence[ConversationTurn] = ()
) -> str:
    """The expansion text (CoT aspects or a pseudo history entry) for `query`."""
    return (await gateway.text(role, expansion_messages(kind, query, previous_turns))).strip()
