"""LLM roles: prompts, node functions and the model gateway every LLM call goes through."""

from agents import offline as _offline  # noqa: F401  (offline defaults before any library import)
