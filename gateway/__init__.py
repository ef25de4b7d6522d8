"""triton-openai-gateway: an OpenAI-compatible HTTP gateway in front of NVIDIA Triton."""

__version__ = "0.1.0"
