"""The graphs LangGraph Studio serves (see langgraph.json). The server supplies persistence.

Each takes an `EpisodeContext` as its runtime context (models per role, the system — pipeline,
its options, memory backend —, the judges, the web); with none given it runs on the embedded
defaults: the offline scripted model, the `full` memory backend, the LaMP-QA aspect judge and the
sandbox web over the bundled sample pages. Every graph takes `{"benchmark": "sample",
"case_id": "q01"}` as input (the judge graph also a `response` to judge); the episode graph runs
whichever pipeline the context's `system.pipeline` names.
`simulate` is the episode where the system, whatever its pipeline, talks with the simulated user
for several turns (graphs/simulate.py; `system.conversation` sets the turn budget).
"""

from atelier.benchmarks.common.offline import apply_offline_defaults

apply_offline_defaults()  # the graphs' entry point for Studio: before the libraries below load

from atelier.graphs.deep_research.graph import build_deep_research_graph
from atelier.graphs.direct import build_direct_graph
from atelier.graphs.episode import build_episode_graph
from atelier.graphs.external.graph import build_external_graph
from atelier.graphs.heavy_imports import load_for_server
from atelier.graphs.judge import build_judge_graph
from atelier.graphs.memory import build_memory_graph
from atelier.graphs.pipelines import PIPELINES
from atelier.graphs.planpers import build_planpers_graph
from atelier.graphs.rag import build_rag_graph
from atelier.graphs.research_api import build_research_api_graph

# The server runs nodes on its event loop and refuses blocking calls there (`langgraph dev` without
# --allow-blocking): what loads lazily on a first call — litellm's import reads the working folder —
# is loaded now, with the graphs.
load_for_server()

episode = build_episode_graph()
direct = build_direct_graph()
rag = build_rag_graph()
planpers = build_planpers_graph()
deep_research = build_deep_research_graph()
research_api = build_research_api_graph()
external = build_external_graph()
memory = build_memory_graph()
judge = build_judge_graph()
simulate = build_episode_graph([], conversations=PIPELINES.names())


def pipeline_graph(name: str):
    """The compiled graph of pipeline `name` — a plugin's entry-point name or `module:attr` — to
    serve beside these (`atelier studio` names it in the langgraph.json it writes)."""
    return PIPELINES.get(name).build()
