"""The simulated user (role `user_sim`; `history_writer` and `history_checker` fall back to it).

Grounded on a persona and, per query, the hidden gold need, it:
- synthesizes a persona's implicit history under PDR-Bench's annotation protocol (`history`),
  checked in code (`protocol`) and by an inverse pass (`reversibility`);
- answers a system's clarifying questions (`answers`), talks with a system turn by turn until its
  stop token (`conversation`), and rates responses on BESPOKE's criteria (`feedback`).

Nothing it sends a system carries gold text: `disclosure.GoldGuard` scrubs every message.
"""

from atelier.agents.clarify import DONT_KNOW
from atelier.agents.user_sim.answers import SimulatedAnswers, answer_clarification
from atelier.agents.user_sim.conversation import UserTurn, next_user_turn
from atelier.agents.user_sim.disclosure import GoldGuard
from atelier.agents.user_sim.feedback import UserFeedback, rate_response
from atelier.agents.user_sim.grounding import STOP_TOKEN
from atelier.agents.user_sim.history import HistoryOptions, SynthesizedHistory, plan_history, synthesize_history
from atelier.agents.user_sim.protocol import ProtocolFigures, check_protocol
from atelier.agents.user_sim.reversibility import ReversibilityReport, check_reversibility

__all__ = [
    "DONT_KNOW",
    "STOP_TOKEN",
    "GoldGuard",
    "HistoryOptions",
    "ProtocolFigures",
    "ReversibilityReport",
    "SimulatedAnswers",
    "SynthesizedHistory",
    "UserFeedback",
    "UserTurn",
    "answer_clarification",
    "check_protocol",
    "check_reversibility",
    "next_user_turn",
    "plan_history",
    "rate_response",
    "synthesize_history",
]
