"""The experiment runner, recipes, reports and the CLI."""

from agents import offline as _offline  # noqa: F401
