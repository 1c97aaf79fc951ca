"""tidegate: a self-hosted, streaming-first LLM API gateway."""

__version__ = "0.1.0"
