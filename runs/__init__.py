"""Runs: executing them, reading them, studies on them, and the command line.

Rooms, from the top floor down (a room imports only rooms below it):

    cli/        the `atelier` command
    bench/      `atelier bench ...`: speed and memory figures, as JSON
    studies/    studies on runs: rescore, meta-evaluation, simulated histories and feedback
    execution/  executing a run: the runner, its executors, preflight, cost and budget, judging
    reading/    reading a run: summary, outcome, report, view, trace, compare
    folder/     what a run folder holds: the recipe, results, epochs, its layout, lock and resume rules

`recipes/` holds the shipped recipes (package data).
"""
