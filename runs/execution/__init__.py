"""Executing a run: the runner and its executors, preflight, cost forecast and budget, judging."""
