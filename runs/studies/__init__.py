"""Studies on runs: re-judging a run, meta-evaluating judges, simulated histories and feedback."""
