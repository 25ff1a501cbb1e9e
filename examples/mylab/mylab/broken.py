"""ForgetfulKeywordMemory: KeywordMemory with two deliberate bugs, for the conformance kit to find
(`atelier check memory mylab.broken:ForgetfulKeywordMemory` exits 3 naming both clauses):

- it ignores the token budget: every held event goes into the context;
- it "remembers" events it was never given: two invented ids follow the real ones.
"""

from __future__ import annotations

from atelier.memory.base import MemoryQuery, UserContext
from atelier.memory.budget import count_tokens, render_event
from mylab.memory import KeywordMemory


class ForgetfulKeywordMemory(KeywordMemory):
    name = "keyword_broken"

    async def context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:
        held = list(self._events.get(user_id, {}).values())
        text = "\n".join(render_event(e) for e in held)  # the budget is never consulted
        invented = [f"{user_id}:remembered-{i}" for i in (1, 2)]  # ids no ingest ever gave
        return UserContext(
            backend=self.name,
            form="raw" if held else "none",
            text=text,
            event_ids=[e.id for e in held] + (invented if held else []),
            tokens=count_tokens(text),
        )
