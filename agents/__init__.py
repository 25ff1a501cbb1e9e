"""LLM roles: each role's prompts and the node functions that call it (planner, researcher, writer,
clarifier, profiler, ...), the judges (`agents/judges/`) and the simulated user (`agents/user_sim/`).
What every model call passes through — the gateway, its providers, cache, ledger and structured
output — is `agents/models/`."""
