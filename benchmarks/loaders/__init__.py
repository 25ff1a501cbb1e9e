"""One module per data set; each registers a `BenchmarkSpec` in `benchmarks.registry`."""
