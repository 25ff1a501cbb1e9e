"""`mem0`: mem0ai's AsyncMemory over a persistent chromadb and Atelier's embedder and gateway.

Each ingest adds events to mem0 (`events_per_add` per add; mem0 makes one LLM call per add to
extract memories, none per search). mem0's memories do not know our event ids, so every add
carries them as metadata and each extracted memory inherits them: a context's event ids are the
events behind the memories it shows (only ids this user really ingested are kept).

Users are separated by mem0's `user_id` scope (a hash of our user id, since mem0 rejects ids with
spaces) and, again, by keeping only results of that scope. The store lives under
`<store_dir>/mem0` (a temporary directory when the backend has none) together with the list of
event ids already added, so a later instance on the same store does not add them twice.

In a run the store is not reopened by a later process: an add killed half-way leaves memories
that the next add would see (and its LLM would answer differently to), so a resumed run empties
the store (`reset_store`) and replays the run's memory journal into a new folder under it
(memory/journal.py). Each add dates mem0's extraction prompt with the day the backend's clock
gives, so the replayed adds send the requests the first ones sent and the response cache answers.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import secrets
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from atelier.benchmarks.case import ChatSession, HistoryEvent
from atelier.benchmarks.common import no_follow
from atelier.benchmarks.common.waiting import waiting_for
from atelier.memory.base import MemoryConfig, MemoryQuery, UserContext, as_query, digest_of
from atelier.memory.budget import pack
from atelier.memory.persona_first import PersonaFirstBackend, Personas
from atelier.memory.registry import register_backend
from atelier.memory.steps import memory_step

EVENT_IDS_KEY = "atelier_event_ids"
COLLECTION = "atelier_mem0"


class Mem0Config(MemoryConfig):
    backend: Literal["mem0"] = "mem0"
    events_per_add: int = Field(
        default=1,
        ge=1,
        le=100,
        description="Events per mem0 add (one LLM call each); memories cite all events of their add.",
    )
    top_k: int = Field(default=20, ge=1, description="Memories retrieved per query.")
    search_threshold: float = Field(default=0.1, ge=0, description="mem0's minimum memory score.")
    embedder: str = Field(default="local", description="`local` (MiniLM) or a litellm embedding model.")


@dataclass(frozen=True)
class _Hit:
    memory_id: str
    text: str
    event_ids: list[str]
    score: float


def mem0_user_key(user_id: str) -> str:
    return "u" + hashlib.sha256(user_id.encode("utf-8")).hexdigest()[:32]


def event_messages(event: HistoryEvent) -> list[dict[str, str]]:
    """The event as chat messages for mem0: a chat keeps its turns, anything else is one user
    message saying what it is and when."""
    if isinstance(event, ChatSession):
        return [{"role": m.role, "content": m.content} for m in event.messages if m.role != "system" and m.content]
    when = f" ({event.timestamp})" if event.timestamp else ""
    return [{"role": "user", "content": f"{event.kind.replace('_', ' ')}{when}: {event.render()}"}]


@register_backend
class Mem0Backend(PersonaFirstBackend):
    name = "mem0"
    config_model = Mem0Config
    config: Mem0Config

    def __init__(self, config, env=None) -> None:
        super().__init__(config, env)
        self._tmp: tempfile.TemporaryDirectory | None = None
        self._root = self._store_root()
        self._memory: Any = None
        self._build_lock = asyncio.Lock()
        self._ingested: dict[str, set[str]] = {}
        self._personas = Personas()  # kept whole and first, not extracted into memories (memory/persona_first.py)

    def _store_root(self) -> Path:
        if self.env.store_dir is not None:
            root = Path(self.env.store_dir) / "mem0"
        else:
            self._tmp = tempfile.TemporaryDirectory(prefix="atelier-mem0-")
            root = Path(self._tmp.name)
        no_follow.make_folders(root / "ingested")
        return root

    async def _mem0(self):
        async with self._build_lock:
            if self._memory is None:
                with waiting_for("mem0 to open its store (chromadb, the embedder)"):
                    self._memory = await asyncio.to_thread(self._build)
        self._memory.llm.bind_loop(asyncio.get_running_loop())
        return self._memory

    def _build(self):
        # mem0 warns on every start that chroma has no keyword search and that spaCy (a model
        # download) is missing; both are expected here, so its logger shows errors only unless
        # the user set a level for it.
        mem0_logger = logging.getLogger("mem0")
        if mem0_logger.level == logging.NOTSET:
            mem0_logger.setLevel(logging.ERROR)
        from mem0 import AsyncMemory
        from mem0.configs.base import MemoryConfig as Mem0MemoryConfig
        from mem0.vector_stores.configs import VectorStoreConfig

        from atelier.memory.mem0_bridge import embedder_config, llm_config  # (also dates mem0's prompts)

        config = Mem0MemoryConfig(
            vector_store=VectorStoreConfig(
                provider="chroma", config={"collection_name": COLLECTION, "path": str(self._root / "chroma")}
            ),
            llm=llm_config(self.env.gateway, self.env.role),
            embedder=embedder_config(self.config.embedder),
            history_db_path=str(self._root / "history.db"),
        )
        return AsyncMemory(config)

    # ------------------------------------------------------------------ what was added

    def _ingested_file(self, user_id: str) -> Path:
        return self._root / "ingested" / f"{mem0_user_key(user_id)}.txt"

    def ingested_ids(self, user_id: str) -> set[str]:
        if user_id not in self._ingested:
            path = self._ingested_file(user_id)
            # split at "\n" only: splitlines() would also cut at a U+2028 inside a JSON string
            lines = no_follow.read_text(path).split("\n") if os.path.lexists(path) else []
            self._ingested[user_id] = {json.loads(line) for line in lines if line.strip()}
        return self._ingested[user_id]

    def _record(self, user_id: str, event_ids: list[str]) -> None:
        with no_follow.open_file(self._ingested_file(user_id), "a") as fh:
            fh.writelines(json.dumps(i) + "\n" for i in event_ids)
        self._ingested[user_id].update(event_ids)

    # ------------------------------------------------------------------ protocol

    async def ingest(self, user_id: str, events: Sequence[HistoryEvent]) -> None:
        async with self.user_lock(user_id):
            events = self._personas.take(user_id, events)
            known = self.ingested_ids(user_id)
            new = list({e.id: e for e in events if e.id not in known}.values())
            if not new:
                return
            memory = await self._mem0()
            from atelier.memory.mem0_bridge import extraction_date

            size = self.config.events_per_add
            with memory_step("ingest"):
                for start in range(0, len(new), size):
                    batch = new[start : start + size]
                    messages = [m for e in batch for m in event_messages(e)]
                    ids = [e.id for e in batch]
                    if messages:
                        day = datetime.fromtimestamp(self.now(), UTC).date().isoformat()
                        with extraction_date(day):
                            await memory.add(
                                messages, user_id=mem0_user_key(user_id), metadata={EVENT_IDS_KEY: json.dumps(ids)}
                            )
                    self._record(user_id, ids)

    async def _history_context(self, user_id: str, query: MemoryQuery | str, budget: int | None = None) -> UserContext:
        """After the explicit persona (memory/persona_first.py): the memories mem0 finds for the query."""
        query = as_query(query)
        known = self.ingested_ids(user_id)
        if not known or not query.text.strip():
            return UserContext(backend=self.name, form="none")
        memory = await self._mem0()
        key = mem0_user_key(user_id)
        found = await memory.search(
            query.text, top_k=self.config.top_k, filters={"user_id": key}, threshold=self.config.search_threshold
        )
        hits: list[_Hit] = []
        for hit in found.get("results", []):
            if hit.get("user_id") != key or not hit.get("memory"):
                continue
            cited = json.loads((hit.get("metadata") or {}).get(EVENT_IDS_KEY, "[]"))
            event_ids = [i for i in cited if i in known]
            if event_ids:
                hits.append(_Hit(hit["id"], f"- {hit['memory']}", event_ids, float(hit.get("score") or 0.0)))
        by_id = {h.memory_id: h for h in hits}
        budget = self.budget(budget)
        packed = pack(((h.memory_id, h.text) for h in hits), budget)
        degraded = packed.degraded("recall", "memories found", budget)
        if not packed.ids:
            return UserContext(backend=self.name, form="none", degraded=degraded)
        shown = [by_id[memory_id] for memory_id in packed.ids]
        scores: dict[str, float] = {}
        for hit in shown:  # an event scores as its best memory
            for event_id in hit.event_ids:
                scores[event_id] = max(scores.get(event_id, float("-inf")), round(hit.score, 6))
        event_ids = list(dict.fromkeys(i for hit in shown for i in hit.event_ids))
        return UserContext(
            backend=self.name,
            form="profile",
            text=packed.text,
            event_ids=event_ids,
            scores=scores,
            tokens=packed.tokens,
            degraded=degraded,
        )

    async def state_digest(self, user_id: str) -> str:
        """The events added and the memories mem0 keeps for the user (their texts and the events
        each cites; mem0's ids and timestamps differ from one build to the next)."""
        known = sorted(self.ingested_ids(user_id))
        if not known:
            return digest_of({"events": [], "memories": []})
        memory = await self._mem0()
        found = await memory.get_all(filters={"user_id": mem0_user_key(user_id)}, top_k=1_000_000)
        memories = sorted(
            [hit.get("memory") or "", (hit.get("metadata") or {}).get(EVENT_IDS_KEY, "[]")]
            for hit in found.get("results", [])
        )
        return digest_of({"events": known, "memories": memories})

    def reset_store(self) -> None:
        """Empty the store (chromadb, mem0's history, the events added): a run rebuilds it from its
        journal rather than reopen what a killed process may have left half-written."""
        if self._memory is not None:
            raise RuntimeError("mem0's store is open: reset it before the first ingest or recall")
        shutil.rmtree(self._root)  # all of <store_dir>/mem0 is ours
        if self._tmp is None:  # a folder of its own: chromadb keeps each path it opened in the process,
            self._root = self._root / f"build-{secrets.token_hex(4)}"  # and one opened again would be stale
        no_follow.make_folders(self._root / "ingested")
        self._ingested.clear()

    async def aclose(self) -> None:
        if self._memory is not None:
            self._memory.close()
            self._memory = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
