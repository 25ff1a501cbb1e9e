"""LangGraph StateGraphs that wire agents, tools and memory."""

from agents import offline as _offline  # noqa: F401
