"""The MemoryBackend protocol and every backend."""

from agents import offline as _offline  # noqa: F401
