"""The deep_research pipeline: state (state.py), nodes (nodes.py), the graphs (graph.py)."""
