"""Atelier: an agent-based simulation lab for personalized information seeking.

One installed name, `atelier`; its rooms are the repository's top-level folders, linked here
(`atelier/agents -> ../agents`, ...), so a checkout, an editable install and the wheel all import
them as `atelier.agents`, `atelier.graphs`, `atelier.memory`, `atelier.tools`, `atelier.benchmarks`
and `atelier.runs`. Imports run one way: runs -> graphs -> (memory, tools) -> agents -> benchmarks.
"""
