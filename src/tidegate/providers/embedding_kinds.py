"""Which embedding provider serves a configured provider entry, by its kind: the local model
(`embeddings.py`) or a remote API (`embeddings_remote.py`). Apart from both, so neither imports
the other's module back."""

from __future__ import annotations

from ..config import ProviderConfig
from .embeddings import EmbeddingProvider, LocalEmbeddingProvider
from .embeddings_remote import build_remote_embedding_provider


def build_embedding_provider(config: ProviderConfig, connect_timeout_s: float = 10.0) -> EmbeddingProvider:
    """One embedding provider per configured provider entry, by kind."""
    if config.kind == "local":
        return LocalEmbeddingProvider(config)
    return build_remote_embedding_provider(config, connect_timeout_s)
