"""Conversation turns: the simulated user's next message to the system, or the stop token.

iKAT-style conversational search: the user opens with the benchmark's query, then reads each
response and follows up on what is still missing or wrong for their need, until the need is met
(it says the stop token, tau2-bench's `###STOP###`) or the turn budget runs out (the graph's job).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pydantic import BaseModel, Field

from agents.gateway import Gateway
from agents.prompts import build_messages, conversation_section
from agents.user_sim.disclosure import GoldGuard
from agents.user_sim.grounding import SIMULATOR_ROLE, STOP_TOKEN, user_sections
from benchmarks.case import Case, ConversationTurn

TASK = (
    "Read the assistant's last response against what you are looking for, and write your next message:\n"
    "- if something you need is missing, wrong, too shallow or not suited to you, ask for it in one or two "
    "sentences (one point at a time), or answer what the assistant asked you;\n"
    f"- if the response gives you what you need, or nothing is left to ask, set satisfied to true and write "
    f"exactly {STOP_TOKEN} as the message."
)


class UserMessage(BaseModel):
    message: str = Field(description=f"Your next message to the assistant, or {STOP_TOKEN}.")
    satisfied: bool = Field(description="True when your need is met and the conversation can end.")


@dataclass(frozen=True)
class UserTurn:
    text: str  # empty when the user stops
    stop: bool
    redacted: int = 0


def next_turn_messages(case: Case, turns: Sequence[ConversationTurn]) -> list[dict[str, str]]:
    return build_messages(SIMULATOR_ROLE, [*user_sections(case), conversation_section(turns)], TASK)


async def next_user_turn(
    gateway: Gateway, case: Case, turns: Sequence[ConversationTurn], role: str = "user_sim",
    guard: GoldGuard | None = None,
) -> UserTurn:
    """The user's reply to the conversation so far (the last turn holds the latest response)."""
    reply = await gateway.structured(role, next_turn_messages(case, turns), UserMessage)
    text = reply.message.replace(STOP_TOKEN, "").strip()
    if reply.satisfied or STOP_TOKEN in reply.message or not text:
        return UserTurn(text="", stop=True)
    scrubbed = (guard or GoldGuard(case)).scrub(text)
    if not scrubbed.text.strip(" .…"):
        return UserTurn(text="", stop=True, redacted=scrubbed.redacted)
    return UserTurn(text=scrubbed.text, stop=False, redacted=scrubbed.redacted)
