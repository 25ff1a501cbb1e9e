"""The graphs LangGraph Studio serves (see langgraph.json). The server supplies persistence.

Each takes an `EpisodeContext` as its runtime context (models per role, the system's memory
backend, the judges); with none given it runs on the embedded defaults: the offline scripted
model, the `full` memory backend and the LaMP-QA aspect judge. For the episode graph, the input
may be a whole case or `{"benchmark": "sample", "case_id": "..."}`; `simulate` is the same episode
with the system talking to the simulated user for several turns (graphs/simulate.py).
"""

from graphs.direct import build_direct_graph
from graphs.episode import build_episode_graph
from graphs.judge import build_judge_graph
from graphs.memory import build_memory_graph

episode = build_episode_graph("direct")
direct = build_direct_graph()
memory = build_memory_graph()
judge = build_judge_graph()
simulate = build_episode_graph("direct", conversation=True)
