"""Data package: the bundled sample suite (JSONL files read by `benchmarks.loaders.sample`).

It is a package only so that the files ship as package data and resolve through
`importlib.resources`; see README.md in this folder for the file schemas.
"""
