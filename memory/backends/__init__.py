"""One module per memory backend; each registers itself with `memory.registry.register_backend`."""
