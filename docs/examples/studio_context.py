"""Run one of Atelier's graphs on a LangGraph server with an episode's context, offline: what Studio's
"context" box takes, as langgraph-sdk sends it (docs/studio.md).

    python docs/examples/studio_context.py http://127.0.0.1:2025

The context is an `EpisodeContext` (graphs/context.py): the system (its pipeline, memory and
`pipeline_options`), models per role, judges, the web. Here deep_research with `clarify = "always"`
stops at its clarify interrupt; the script prints the questions, resumes the thread with an answer
(`Command(resume=...)`, the typed `ClarifyAnswers`) and prints how the clarification ended and the
report's first line."""

from __future__ import annotations

import asyncio
import sys

from langgraph_sdk import get_client

CONTEXT = {
    "system": {
        "name": "dr-clarify",
        "pipeline": "deep_research",
        "memory": {"backend": "full"},
        "pipeline_options": {"clarify": "always", "max_questions": 2, "max_researchers": 2, "max_rounds": 1},
    },
    "models": {"system": {"model": "scripted"}},
}
CASE = {"benchmark": "sample", "case_id": "q01"}


async def main(url: str) -> None:
    client = get_client(url=url)
    thread = (await client.threads.create())["thread_id"]
    first = await client.runs.wait(thread, "deep_research", input=CASE, context=CONTEXT)
    questions = first["__interrupt__"][0]["value"]["questions"]
    print("asked:", " | ".join(questions))
    await client.runs.wait(thread, "deep_research", command={"resume": {"answers": ["Late May"]}}, context=CONTEXT)
    final = (await client.threads.get_state(thread))["values"]
    print("clarify:", final["response"]["meta"]["clarify"]["status"])
    print("report:", final["response"]["text"].splitlines()[0])


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:2025"))
