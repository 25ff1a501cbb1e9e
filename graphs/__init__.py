"""LangGraph StateGraphs that wire agents, tools and memory."""
