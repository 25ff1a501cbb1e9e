"""The MemoryBackend protocol and every backend."""
