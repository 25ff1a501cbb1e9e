"""The speed and memory benchmarks `atelier bench ...` runs, each printing JSON: the runner
(`runner`), a pipeline's graph (`graph`) against the stack's own floor (`stack_floor`), a model
(`model`), judges (`judge`), memory backends (`memory`) and the web (`web`)."""
