"""Conversation turns: the simulated user's next message to the system, or how it ends.

iKAT-style conversational search: the user opens with the benchmark's query, then reads each
response and follows up on what is still missing or wrong for their need, until the need is met
(it says the stop token, tau2-bench's `###STOP###`), it gives up on this assistant, or the turn
budget runs out (the graph's job). How a conversation ended is a typed field of the last turn,
counted per system in a run's summary and report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

from atelier.agents.models.gateway import Gateway
from atelier.agents.prompts import build_messages, conversation_section
from atelier.agents.user_sim.disclosure import GoldGuard
from atelier.agents.user_sim.grounding import SIMULATOR_ROLE, STOP_TOKEN, user_sections
from atelier.benchmarks.case import Case, ConversationTurn

TASK = (
    "Read the assistant's last response against what you are looking for, and write your next message:\n"
    "- if something you need is missing, wrong, too shallow or not suited to you, ask for it in one or two "
    "sentences (one point at a time), or answer what the assistant asked you;\n"
    f"- if the response gives you what you need, or nothing is left to ask, set satisfied to true and write "
    f"exactly {STOP_TOKEN} as the message;\n"
    f"- if you see this assistant will not get you what you need (it keeps missing or ignoring what you asked), "
    f"set gave_up to true and write exactly {STOP_TOKEN} as the message."
)

# How a conversation ended: the user's need met (or nothing left to ask), the user gave up on this
# assistant, the turn budget ran out, or the user's message was all gold text the guard removed.
ConversationEnd = Literal["satisfied", "gave_up", "turn_budget", "nothing_left_to_say"]


class UserMessage(BaseModel):
    message: str = Field(description=f"Your next message to the assistant, or {STOP_TOKEN}.")
    satisfied: bool = Field(description="True when your need is met and the conversation can end.")
    gave_up: bool = Field(
        default=False, description="True when you give up: this assistant will not get you what you need."
    )


@dataclass(frozen=True)
class UserTurn:
    text: str  # empty when the user stops
    ended: ConversationEnd | None = None  # set when the user stops
    redacted: int = 0

    @property
    def stop(self) -> bool:
        return self.ended is not None


def next_turn_messages(case: Case, turns: Sequence[ConversationTurn]) -> list[dict[str, str]]:
    return build_messages(SIMULATOR_ROLE, [*user_sections(case), conversation_section(turns)], TASK)


async def next_user_turn(
    gateway: Gateway,
    case: Case,
    turns: Sequence[ConversationTurn],
    role: str = "user_sim",
    guard: GoldGuard | None = None,
) -> UserTurn:
    """The user's reply to the conversation so far (the last turn holds the latest response)."""
    reply = await gateway.structured(role, next_turn_messages(case, turns), UserMessage)
    text = reply.message.replace(STOP_TOKEN, "").strip()
    if reply.gave_up:  # giving up outranks "satisfied" when a model sets both
        return UserTurn(text="", ended="gave_up")
    if reply.satisfied or STOP_TOKEN in reply.message or not text:
        return UserTurn(text="", ended="satisfied")
    scrubbed = (guard or GoldGuard(case)).scrub(text)
    if not scrubbed.text.strip(" .…"):
        return UserTurn(text="", ended="nothing_left_to_say", redacted=scrubbed.redacted)
    return UserTurn(text=scrubbed.text, redacted=scrubbed.redacted)
