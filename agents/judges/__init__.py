"""Judges: LLM evaluators (prompts + calls); their pure score math lives in `benchmarks.metrics`."""
