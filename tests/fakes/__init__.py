"""Deterministic stand-ins for external services, served over real sockets."""

from .fake_llm import FakeLLM, RecordedRequest

__all__ = ["FakeLLM", "RecordedRequest"]
