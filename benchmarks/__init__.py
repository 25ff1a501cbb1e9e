"""Benchmarks: the data model, data-set loaders, the bundled sample suite and pure metric math.

This package imports none of Atelier's other packages.
"""
