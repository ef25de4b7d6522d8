"""triton-openai-gateway: an OpenAI-compatible HTTP gateway in front of NVIDIA Triton."""

from gateway import compiled

__version__ = "0.1.0"

compiled.guard()  # before any compiled module is imported: a stale build must not load
